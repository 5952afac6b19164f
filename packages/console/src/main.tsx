import { render } from 'preact';

render(<main>shellbase console</main>, document.getElementById('app')!);
