import { HTTP_PROXY_PORT, SOCKS_PORT } from './egress.js';

/**
 * What tools inside a sandbox read to find the egress proxy: the usual proxy
 * variables in both cases (curl, wget, git, apt, pip, npm, Python, Go),
 * `ALL_PROXY` as SOCKS5 with names resolved by the proxy, `NODE_USE_ENV_PROXY`
 * for Node's own fetch, and `no_proxy` so the context's services on
 * 127.0.0.1 answer directly. `host` is where the proxy is from the sandbox's
 * side (127.0.0.1 in queries and services; 10.0.2.100 in machines).
 */
export function proxyEnv(host = '127.0.0.1'): Record<string, string> {
  const http = `http://${host}:${HTTP_PROXY_PORT}`;
  const socks = `socks5h://${host}:${SOCKS_PORT}`;
  const none = 'localhost,127.0.0.1,::1';
  return {
    http_proxy: http, https_proxy: http, HTTP_PROXY: http, HTTPS_PROXY: http,
    ALL_PROXY: socks, all_proxy: socks, no_proxy: none, NO_PROXY: none, NODE_USE_ENV_PROXY: '1',
  };
}
