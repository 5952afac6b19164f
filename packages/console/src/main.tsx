import { render } from 'preact';
import { App } from './components/app.js';
import './styles.css';

render(<App />, document.getElementById('app')!);
// The first screen (sign-in or the signed-in view) is in the DOM and takes input from here on.
performance.mark('console-interactive');
