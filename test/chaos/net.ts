import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

/**
 * A test network made of network namespaces: a `switch` namespace holding a bridge, and one
 * namespace per node (Postgres, the S3 server, each worker), joined to the bridge by a veth pair,
 * with an address 10.78.N.k/24 of its own. Nothing of the host's own network is touched: the
 * namespaces, bridge and links live only inside the namespaces made here, and `close` deletes them
 * (so does a later `sweepStale` after a killed run).
 *
 * Faults are made inside the namespaces: a partition drops a pair's packets silently on both
 * sides (iptables INPUT rules, so a TCP peer retransmits into nothing, as across a real
 * partition), an isolation drops everything a node receives from the other nodes (the switch's
 * own address, where the test's clients come from, stays reachable), loss drops a share of a node's
 * packets at random (iptables' `statistic` match), and a slow link delays them (`tc netem` where
 * the kernel has it, else a rate limit with `htb`, whose queue is the delay).
 */
export interface TestNet {
  /** The prefix of every namespace and link made here. */
  readonly prefix: string;
  /** The address of the switch's bridge: where the test's own relays (clients) come from. */
  readonly gatewayIp: string;
  add(name: string): Promise<NetNode>;
  node(name: string): NetNode;
  /** Drops every packet between `a` and `b` (both directions) until `heal`. */
  partition(a: string, b: string): void;
  /** Drops every packet `name` gets from another node (clients still reach it) until `heal`. */
  isolate(name: string): void;
  /** Drops `percent` of what `name` sends and receives at random until `heal`. */
  lossy(name: string, percent: number): void;
  /** Delays what `name` sends by `ms` (netem) or limits it to a slow rate (htb) until `heal`. */
  slow(name: string, ms: number): 'delay' | 'rate';
  /** Undoes every fault on every node. */
  heal(): void;
  close(): void;
}

export interface NetNode {
  name: string;
  ip: string;
  /** The namespace's path, for `nsenter --net=`. */
  ns: string;
  /** Starts a program in the node's namespace (only the network namespace: files, mounts and cgroups are the host's). */
  spawn(program: string, args: string[], options?: SpawnOptions): ChildProcess;
  /** Runs a program in the namespace and returns its output. */
  run(program: string, args: string[]): string;
}

const sh = (program: string, args: string[]) => execFileSync(program, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const NETNS_DIR = '/run/netns';
const STALE = /^sbc\d+-/;

/** Deletes the namespaces a killed run left (their processes are gone; their names carry a dead pid). */
export function sweepStale(): void {
  if (!existsSync(NETNS_DIR)) return;
  for (const name of readdirSync(NETNS_DIR)) {
    if (!STALE.test(name)) continue;
    const pid = Number(name.slice(3, name.indexOf('-')));
    if (pid === process.pid || existsSync(`/proc/${pid}`)) continue;
    try { sh('ip', ['netns', 'del', name]); } catch { /* gone meanwhile */ }
  }
}

export function startNet(subnet = 78): TestNet {
  sweepStale();
  const prefix = `sbc${process.pid}-`;
  const sw = `${prefix}sw`;
  const gatewayIp = `10.${subnet}.0.1`;
  const nodes = new Map<string, NetNode>();
  const faulted = new Set<string>();
  const made: string[] = [];
  let links = 0;
  sh('ip', ['netns', 'add', sw]);
  made.push(sw);
  const inSw = (args: string[]) => sh('ip', ['-n', sw, ...args]);
  inSw(['link', 'add', 'br0', 'type', 'bridge']);
  inSw(['addr', 'add', `${gatewayIp}/24`, 'dev', 'br0']);
  inSw(['link', 'set', 'br0', 'up']);
  inSw(['link', 'set', 'lo', 'up']);

  const nsOf = (name: string) => `${prefix}${name}`;
  const inNs = (name: string, program: string, args: string[]) => sh('nsenter', [`--net=${NETNS_DIR}/${nsOf(name)}`, program, ...args]);
  const ipt = (name: string, args: string[]) => inNs(name, 'iptables', ['-w', ...args]);
  const node = (name: string) => {
    const n = nodes.get(name);
    if (!n) throw new Error(`no node ${name}`);
    return n;
  };

  const net: TestNet = {
    prefix, gatewayIp,
    async add(name) {
      if (nodes.has(name)) throw new Error(`node ${name} exists`);
      const ns = nsOf(name);
      const ip = `10.${subnet}.0.${nodes.size + 2}`;
      // The pair is made inside the switch's namespace and one end moved to the node's: the host's own network never holds either.
      const inner = `e${++links}`;
      const outer = `p${links}`;
      sh('ip', ['netns', 'add', ns]);
      made.push(ns);
      inSw(['link', 'add', inner, 'type', 'veth', 'peer', 'name', outer]);
      inSw(['link', 'set', inner, 'netns', ns]);
      inSw(['link', 'set', outer, 'master', 'br0']);
      inSw(['link', 'set', outer, 'up']);
      sh('ip', ['-n', ns, 'link', 'set', inner, 'name', 'eth0']);
      sh('ip', ['-n', ns, 'addr', 'add', `${ip}/24`, 'dev', 'eth0']);
      sh('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
      sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
      const n: NetNode = {
        name, ip, ns: `${NETNS_DIR}/${ns}`,
        spawn: (program, args, options = {}) => spawn('nsenter', [`--net=${NETNS_DIR}/${ns}`, program, ...args], options),
        run: (program, args) => inNs(name, program, args),
      };
      nodes.set(name, n);
      return n;
    },
    node,
    partition(a, b) {
      const [x, y] = [node(a), node(b)];
      ipt(a, ['-A', 'INPUT', '-s', y.ip, '-j', 'DROP']);
      ipt(b, ['-A', 'INPUT', '-s', x.ip, '-j', 'DROP']);
      faulted.add(a).add(b);
    },
    isolate(name) {
      // Everything from the subnet but the switch (clients) is dropped; what it sends goes out and is never answered.
      ipt(name, ['-I', 'INPUT', '-s', gatewayIp, '-j', 'ACCEPT']);
      ipt(name, ['-A', 'INPUT', '-s', `10.${subnet}.0.0/24`, '-j', 'DROP']);
      faulted.add(name);
    },
    lossy(name, percent) {
      const p = String(percent / 100);
      ipt(name, ['-I', 'INPUT', '-s', gatewayIp, '-j', 'ACCEPT']);
      ipt(name, ['-I', 'OUTPUT', '-d', gatewayIp, '-j', 'ACCEPT']);
      ipt(name, ['-A', 'INPUT', '-s', `10.${subnet}.0.0/24`, '-m', 'statistic', '--mode', 'random', '--probability', p, '-j', 'DROP']);
      ipt(name, ['-A', 'OUTPUT', '-d', `10.${subnet}.0.0/24`, '-m', 'statistic', '--mode', 'random', '--probability', p, '-j', 'DROP']);
      faulted.add(name);
    },
    slow(name, ms) {
      faulted.add(name);
      try {
        inNs(name, 'tc', ['qdisc', 'add', 'dev', 'eth0', 'root', 'netem', 'delay', `${ms}ms`, `${Math.round(ms / 4)}ms`]);
        return 'delay';
      } catch {
        // No sch_netem in this kernel: a link of 2 Mbit/s, whose queue delays what crosses it under load.
        inNs(name, 'tc', ['qdisc', 'add', 'dev', 'eth0', 'root', 'handle', '1:', 'htb', 'default', '1']);
        inNs(name, 'tc', ['class', 'add', 'dev', 'eth0', 'parent', '1:', 'classid', '1:1', 'htb', 'rate', '2mbit', 'ceil', '2mbit']);
        return 'rate';
      }
    },
    heal() {
      for (const name of faulted) {
        ipt(name, ['-F', 'INPUT']);
        ipt(name, ['-F', 'OUTPUT']);
        try { inNs(name, 'tc', ['qdisc', 'del', 'dev', 'eth0', 'root']); } catch { /* none */ }
      }
      faulted.clear();
    },
    close() {
      for (const ns of made.reverse()) {
        try { sh('ip', ['netns', 'del', ns]); } catch { /* already gone */ }
      }
      made.length = 0;
    },
  };
  process.once('exit', () => net.close());
  return net;
}
