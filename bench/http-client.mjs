// A client in its own process (as real callers are): sequential requests, latencies in ms as JSON on stdout.
// Usage: node bench/http-client.mjs URL KEY N [BODY]   (with BODY: POST JSON; without: GET)
const [url, key, n, body] = process.argv.slice(2);
const headers = { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) };
const send = async () => {
  const r = await fetch(url, { method: body ? 'POST' : 'GET', body, headers });
  await r.arrayBuffer();
  if (!r.ok) throw new Error(`HTTP ${r.status}`);
};
// Warm up (the client's own JIT included) before anything is timed: cheap reads get more rounds.
for (let i = 0; i < (body ? 20 : 500); i++) await send();
const out = [];
for (let i = 0; i < Number(n); i++) { const t = performance.now(); await send(); out.push(performance.now() - t); }
process.stdout.write(JSON.stringify(out));
