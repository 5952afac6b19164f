// A client in its own process (as real callers are): sequential POSTs, latencies in ms as JSON on stdout.
const [url, key, n, body] = process.argv.slice(2);
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
const post = async () => { const r = await fetch(url, { method: 'POST', body, headers }); await r.text(); if (!r.ok) throw new Error(`HTTP ${r.status}`); };
await post();
const out = [];
for (let i = 0; i < Number(n); i++) { const t = performance.now(); await post(); out.push(performance.now() - t); }
process.stdout.write(JSON.stringify(out));
