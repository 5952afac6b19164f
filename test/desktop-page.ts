// The page test/machines-desktop.test.ts opens in a desktop machine's browser: a fixed bar at the
// top with a button (solid blue; yellow after an odd number of clicks), a text field (a green
// border) and an animation (a red fill of a grey track growing 10 px a second, from 0 to 399 px
// and again), over 200 lines of text that the page scrolls half-way down when it loads. Its title
// says what it saw: `y=SCROLL clicks=N entered=TEXT` (Enter in the field enters its text).
import type { Sandbox } from '@e2b/desktop';

export const BLUE: [number, number, number] = [0, 0, 255];
export const YELLOW: [number, number, number] = [255, 255, 0];
export const GREEN: [number, number, number] = [0, 255, 0];
export const RED: [number, number, number] = [255, 0, 0];
export const GREY: [number, number, number] = [128, 128, 128];
/** The animation's track, in px: the red fill's width is (tenths of a second since the page loaded) mod this. */
export const TRACK_PX = 400;

const lines = Array.from({ length: 200 }, (_, i) => `<p${i === 100 ? ' id="middle"' : ''}>line ${i}: ${'the quick brown fox jumps over the lazy dog '.repeat(1 + (i % 3))}</p>`).join('\n');

export const DESKTOP_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>loading</title>
<style>
body { margin: 0; font: 16px sans-serif; background: #fff; color: #000; }
p { margin: 4px 8px; }
#top { position: fixed; top: 0; left: 0; right: 0; height: 64px; background: #fff; border-bottom: 1px solid #000; }
#btn { position: absolute; left: 10px; top: 12px; width: 120px; height: 40px; background: #0000ff; border: 0; outline: none; }
.odd #btn { background: #ffff00; }
#field { position: absolute; left: 150px; top: 12px; width: 200px; height: 34px; border: 3px solid #00ff00; outline: none; font: 16px sans-serif; padding: 0 4px; }
#track { position: absolute; left: 380px; top: 22px; width: ${TRACK_PX}px; height: 20px; background: #808080; }
#bar { height: 20px; width: 0; background: #ff0000; }
#lines { padding-top: 70px; }
</style></head>
<body>
<div id="top"><button id="btn"></button><input id="field" autocomplete="off"><div id="track"><div id="bar"></div></div></div>
<div id="lines">
${lines}
</div>
<script>
let clicks = 0, entered = '';
const bar = document.getElementById('bar'), field = document.getElementById('field');
const t0 = performance.now();
const frame = (now) => { bar.style.width = (Math.floor((now - t0) / 100) % ${TRACK_PX}) + 'px'; requestAnimationFrame(frame); };
requestAnimationFrame(frame);
const show = () => { document.title = 'y=' + Math.round(scrollY) + ' clicks=' + clicks + ' entered=' + entered; };
addEventListener('scroll', show);
document.getElementById('btn').addEventListener('click', () => { clicks++; document.body.classList.toggle('odd', clicks % 2 === 1); show(); });
field.addEventListener('keydown', (e) => { if (e.key === 'Enter') { entered = field.value.replace(/\\s/g, '_'); field.blur(); show(); } });
addEventListener('load', () => { document.getElementById('middle').scrollIntoView(); show(); });
</script>
</body></html>
`;

export interface PageState { y: number; clicks: number; entered: string }

/** The page's title, parsed (null: not the page's). */
export function pageState(title: string): PageState | null {
  const m = /y=(\d+) clicks=(\d+) entered=(\S*)/.exec(title);
  return m ? { y: Number(m[1]), clicks: Number(m[2]), entered: m[3] } : null;
}

/**
 * Serves the page in a desktop sandbox on 127.0.0.1:8000 and opens it with the SDK's `open` once
 * the server answers. Not `python3 -m http.server`: it looks its own name up, and DNS in a machine
 * with no network only times out; threads: a browser opens connections ahead that send nothing for a while.
 */
export async function openDesktopPage(sbx: Sandbox): Promise<void> {
  await sbx.files.write('/home/user/page/index.html', DESKTOP_PAGE);
  await sbx.commands.run(`cd /home/user/page && python3 -c "import socketserver, http.server as h; socketserver.ThreadingTCPServer(('127.0.0.1', 8000), h.SimpleHTTPRequestHandler).serve_forever()"`, { background: true, timeoutMs: 0 });
  await sbx.commands.run('for i in $(seq 300); do curl -sf -o /dev/null --noproxy "*" http://127.0.0.1:8000/index.html && exit 0; sleep 0.2; done; exit 1');
  await sbx.open('http://127.0.0.1:8000/index.html');
}

/** What the page's browser window says in its title (null: no window shows the page). */
export async function shownPageState(sbx: Sandbox): Promise<PageState | null> {
  const ids = (await sbx.commands.run('xdotool search --onlyvisible --class chromium || true')).stdout.trim().split('\n').filter(Boolean);
  for (const id of ids) {
    const state = pageState(await sbx.getWindowTitle(id).catch(() => ''));
    if (state) return state;
  }
  return null;
}
