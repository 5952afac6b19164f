import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import type { MachineHandle } from '@shellbase/sdk';
import { startTestServer, type TestServer } from './harness.ts';

// A machine is a Debian server: the kernel's own modules, FUSE, BTF, users with sudo, units that
// start at boot and survive a fork and a snapshot, a locale and time zone, a firewall of its own,
// a disk that grows, the vCPUs and memory asked for. One context version (one template boot,
// 20-60 s under TCG) and at most two VMs at once.
const CLI = path.resolve('packages/cli/dist/main.js');
const run = promisify(execFile);
const GiB = 2 ** 30;
const code = (c: string) => (e: Error & { code?: string }) => e.code === c;

/** Runs `cmd` in the guest and returns its stdout; any other exit code fails with the guest's stderr. */
async function sh(m: MachineHandle, cmd: string): Promise<string> {
  const r = await m.exec(cmd, { timeoutMs: 120_000 });
  assert.equal(r.exitCode, 0, `${cmd}\nexit ${r.exitCode}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  return r.stdout;
}

/** The root file system's size in the guest, in bytes. */
const rootSize = async (m: MachineHandle) => Number((await sh(m, 'df -B1 --output=size / | tail -1')).trim());

// The context: two more users (alice in sudo, bob not) and a unit enabled the way a Debian package does it.
const SETUP = `set -e
useradd -m -s /bin/bash -G sudo alice
useradd -m -s /bin/bash bob
cat > /etc/systemd/system/hello.service <<'EOF'
[Unit]
Description=a unit of the context

[Service]
ExecStart=/bin/sh -c 'echo hello from boot; exec sleep infinity'

[Install]
WantedBy=multi-user.target
EOF
systemctl enable hello.service`;

describe('machines are full Debian', { timeout: 600_000 }, () => {
  let t: TestServer;
  let m: MachineHandle;

  before(async () => {
    t = await startTestServer();
    const r = await t.sb.context('server').exec(SETUP);
    assert.equal(r.exitCode, 0, r.stderr);
    m = await t.sb.machines.create({ context: 'server', diskGb: 10, cpus: 2, memoryMb: 640 });
  });
  after(async () => {
    await m?.remove().catch(() => undefined);
    await t?.close();
  });

  test('kernel modules: the guest kernel\'s own, loaded by modprobe, by udev at boot and by the kernel on demand; its BTF and config', async () => {
    const kernel = (await sh(m, 'uname -r')).trim();
    assert.equal((await sh(m, 'ls /usr/lib/modules')).trim(), kernel, 'one module tree, the running kernel\'s');
    assert.equal((await sh(m, 'modinfo -F vermagic fuse')).split(' ')[0], kernel, 'built for this kernel');
    // udev loaded the modules the CPU's modalias names at boot (crc32c_intel, aesni_intel, ...).
    const forCpu = (await sh(m, 'modprobe -qR "$(cat /sys/devices/system/cpu/modalias)" | sort -u')).split('\n').filter(Boolean);
    const loaded = (await sh(m, "cut -d' ' -f1 /proc/modules")).split('\n');
    assert.ok(forCpu.some((mod) => loaded.includes(mod)), `udev loaded none of ${forCpu.join(', ')} (loaded: ${loaded.join(' ')})`);
    await sh(m, 'modprobe fuse && modprobe overlay');
    assert.match(await sh(m, 'cat /proc/filesystems'), /\tfuse\n[\s\S]*\toverlay\n|\toverlay\n[\s\S]*\tfuse\n/);
    // A veth pair needs the veth module: the kernel asks modprobe for it.
    assert.match(await sh(m, 'ip link add v0 type veth peer name v1 && ip -br link show v0 && ip link del v0 && lsmod'), /^v0@v1[\s\S]*\nveth\s/m);
    assert.equal(await sh(m, 'head -c 2 /sys/kernel/btf/vmlinux | od -An -tx1'), ' 9f eb\n', 'the kernel\'s BTF (its magic, 0xeb9f)');
    assert.match(await sh(m, 'cat /boot/config-$(uname -r)'), /^CONFIG_DEBUG_INFO_BTF=y$/m);
    assert.equal((await sh(m, 'stat -fc %T /sys/fs/cgroup')).trim(), 'cgroup2fs');
  });

  test('AppArmor: on in the kernel, the image\'s profiles loaded at boot, and a profile loaded and enforced as dockerd loads docker-default', async () => {
    assert.equal((await sh(m, 'cat /sys/module/apparmor/parameters/enabled')).trim(), 'Y');
    assert.match(await sh(m, 'command -v apparmor_parser aa-status aa-exec'), /\/apparmor_parser\n.*\/aa-status\n.*\/aa-exec\n$/);
    await sh(m, 'aa-status --enabled');
    assert.equal((await sh(m, 'systemctl is-active apparmor.service')).trim(), 'active', 'loaded at boot (the template\'s)');
    assert.match(await sh(m, 'aa-status'), /^\s+lsb_release\n/m, 'the package\'s own profiles are in the kernel');
    // What dockerd does at its start (`apparmor_parser -Kr` of its profile), with a profile of the same
    // kind: everything allowed but a few paths. It is loaded, listed, and a process under it is denied.
    const profile = `abi <abi/3.0>,
include <tunables/global>
profile shellbase-test-default flags=(attach_disconnected,mediate_deleted) {
  include <abstractions/base>
  file,
  network,
  capability,
  signal,
  deny @{PROC}/sysrq-trigger rwklx,
  deny /srv/aa-secret rwklx,
}
`;
    await sh(m, `cat > /tmp/shellbase-test-default <<'EOF'\n${profile}EOF\napparmor_parser -Kr /tmp/shellbase-test-default`);
    assert.match(await sh(m, 'aa-status'), /profiles are in enforce mode\.\n(?:\s+\S+\n)*?\s+shellbase-test-default\n/);
    assert.equal(await sh(m, 'aa-exec -p shellbase-test-default -- cat /proc/self/attr/current'), 'shellbase-test-default (enforce)\n');
    await sh(m, 'echo secret > /srv/aa-secret');
    assert.equal(await sh(m, 'cat /srv/aa-secret'), 'secret\n');
    const denied = await m.exec('aa-exec -p shellbase-test-default -- cat /srv/aa-secret');
    assert.notEqual(denied.exitCode, 0);
    assert.match(denied.stderr, /Permission denied/);
    await sh(m, 'apparmor_parser -R /tmp/shellbase-test-default && rm /srv/aa-secret');
    assert.doesNotMatch(await sh(m, 'aa-status'), /shellbase-test-default/);
  });

  test('FUSE: fuse-overlayfs mounts as root and as an ordinary user', async () => {
    assert.match(await sh(m, 'stat -c "%A %t:%T" /dev/fuse'), /^crw-rw-rw- a:e5$/m);
    const mount = 'mkdir -p lower upper work mnt && echo below > lower/f && fuse-overlayfs -o lowerdir=$PWD/lower,upperdir=$PWD/upper,workdir=$PWD/work $PWD/mnt'
      + ' && cat mnt/f && echo above > mnt/g && grep -c " $PWD/mnt fuse.fuse-overlayfs " /proc/mounts && fusermount3 -u mnt && ls upper';
    assert.equal(await sh(m, `mkdir -p /srv/f && cd /srv/f && ${mount}`), 'below\n1\ng\n');
    assert.equal(await sh(m, `su - bob -c '${mount.replace(/'/g, "'\\''")}'`), 'below\n1\ng\n', 'bob (not in sudo) mounts through the set-uid fusermount3');
    assert.equal((await sh(m, 'stat -c %U /home/bob/upper/g')).trim(), 'bob');
  });

  test('users: their own homes, sudo for the sudo group; the default user is `user` (1000:1000, /home/user, bash)', async () => {
    assert.equal(await sh(m, 'getent passwd user'), 'user:x:1000:1000::/home/user:/bin/bash\n');
    assert.equal(await sh(m, 'id -nG user'), 'user sudo\n');
    assert.equal(await sh(m, 'sudo -u user -i sh -c \'echo $HOME; stat -c %U .; sudo -n id -u\''), '/home/user\nuser\n0\n');
    assert.equal(await sh(m, 'su - alice -c \'echo $HOME; stat -c %U .; sudo -n id -u\''), '/home/alice\nalice\n0\n');
    const bob = await m.exec("su - bob -c 'sudo -n id -u'");
    assert.notEqual(bob.exitCode, 0, 'bob is not in sudo');
    assert.match(bob.stderr, /password is required|not in the sudoers/);
    assert.equal(await sh(m, 'id -u'), '0\n', 'commands still run as root');
  });

  test('iptables and nft inside the guest filter the guest\'s own traffic, and nothing of the host', async () => {
    const mark = `shellbase-test-${randomBytes(4).toString('hex')}`;
    // The agent's binary listens on another port: a TCP server that needs nothing from the image.
    await sh(m, 'setsid -f /usr/lib/shellbase/sbx-spawner --listen 7002 >/dev/null 2>&1; for i in $(seq 100); do grep -q ":1B5A 00000000:0000 0A" /proc/net/tcp && break; sleep 0.1; done');
    const connect = "timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/7002' && echo open || echo refused";
    assert.equal(await sh(m, connect), 'open\n');
    await sh(m, `iptables -I INPUT -p tcp --dport 7002 -m comment --comment ${mark} -j REJECT --reject-with tcp-reset`);
    assert.equal(await sh(m, connect), 'refused\n');
    assert.match(await sh(m, 'iptables -S INPUT'), new RegExp(`--dport 7002 -m comment --comment ${mark} -j REJECT`));
    assert.match(await sh(m, 'nft list ruleset 2>/dev/null'), /tcp dport 7002 .*reject with tcp reset/, 'iptables is nft\'s front end here');
    await sh(m, 'nft add table inet guest && nft add chain inet guest out && nft list tables');
    for (const [tool, args] of [['iptables-save', []], ['nft', ['list', 'ruleset']]] as const) {
      const host = await run(tool, [...args]).catch((e: Error & { stdout?: string }) => ({ stdout: e.stdout ?? '' }));
      assert.ok(!host.stdout.includes(mark) && !/table inet guest\b/.test(host.stdout), `the host's ${tool} shows the guest's rules`);
    }
    await sh(m, `iptables -D INPUT -p tcp --dport 7002 -m comment --comment ${mark} -j REJECT --reject-with tcp-reset && nft delete table inet guest`);
    assert.equal(await sh(m, connect), 'open\n');
  });

  test('a locale and a time zone; units of the context start at boot; a fork and a restored snapshot keep them, their clocks are now', async () => {
    assert.match(await sh(m, 'localectl status'), /LANG=en_US\.UTF-8/);
    const login = await m.exec("su - user -c 'locale; date +%Z'");
    assert.equal(login.stderr, '', 'no locale warnings');
    assert.match(login.stdout, /^LANG=en_US\.UTF-8$[\s\S]*^UTC$/m);
    assert.equal(await sh(m, 'python3 -c \'import locale; print(locale.setlocale(locale.LC_ALL, "en_US.UTF-8"))\''), 'en_US.UTF-8\n');
    await sh(m, 'timedatectl set-timezone Europe/Paris');
    assert.match(await sh(m, 'date +%Z'), /^CES?T\n$/);
    assert.equal((await sh(m, 'systemctl is-active hello')).trim(), 'active', 'enabled in the context, started by the template\'s boot');
    assert.match(await sh(m, 'journalctl -u hello --no-pager -o cat'), /hello from boot/);
    await sh(m, 'systemd-run --unit=later sleep infinity');
    const pid = (await sh(m, 'systemctl show -p MainPID --value hello')).trim();
    const [fork] = await m.fork(1);
    try {
      assert.equal((await sh(fork, 'systemctl is-active hello later')), 'active\nactive\n');
      assert.equal((await sh(fork, 'systemctl show -p MainPID --value hello')).trim(), pid, 'the same process, from the same memory');
      assert.match(await sh(fork, 'journalctl -u hello --no-pager -o cat'), /hello from boot/);
      assert.match(await sh(fork, 'date +%Z'), /^CES?T\n$/);
      assert.ok(Math.abs(Number(await sh(fork, 'date +%s')) - Date.now() / 1000) < 10, 'the fork\'s clock is now');
      assert.equal(await sh(fork, 'sudo -u user -i sudo -n whoami'), 'root\n');
    } finally {
      await fork.remove();
    }
    // A kept snapshot, restored later: the units, the time zone and modules still there, its clock
    // set to now (not the snapshot's moment, 15 s before).
    const snap = await m.snapshot();
    await new Promise((res) => setTimeout(res, 15_000));
    const [copy] = await t.sb.machines.restore(snap, 1);
    try {
      assert.equal((await sh(copy, 'systemctl is-active hello later')), 'active\nactive\n');
      assert.equal((await sh(copy, 'systemctl show -p MainPID --value hello')).trim(), pid);
      assert.match(await sh(copy, 'date +%Z'), /^CES?T\n$/);
      assert.ok(Math.abs(Number(await sh(copy, 'date +%s')) - Date.now() / 1000) < 10, 'the restored copy\'s clock is now');
      assert.match(await sh(copy, 'modprobe loop && lsmod'), /^loop\s/m);
    } finally {
      await copy.remove();
      await t.sb.machines.deleteSnapshot(snap);
    }
  });

  test('sizes: the vCPUs and memory asked for at create, within the host\'s caps', async () => {
    const info = await m.info();
    assert.deepEqual([info.cpus, info.memoryMb], [2, 640]);
    assert.equal((await sh(m, 'nproc')).trim(), '2');
    const kb = Number(/^MemTotal:\s+(\d+) kB$/m.exec(await sh(m, 'cat /proc/meminfo'))?.[1]);
    assert.ok(kb > 0.8 * 640 * 1024 && kb <= 640 * 1024, `MemTotal ${kb} kB for 640 MiB`);
    const count = (await t.sb.machines.list()).length;
    const { maxCpus, maxMemoryMb } = t.config.machines;
    for (const [body, hint] of [[{ cpus: maxCpus + 1 }, `cpus between 1 and ${maxCpus}`], [{ memoryMb: maxMemoryMb + 1 }, `memoryMb between 128 and ${maxMemoryMb}`]] as const) {
      const r = await t.http('POST', '/v1/machines', { body: { context: 'server', ...body } });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.hint, new RegExp(hint));
    }
    assert.equal((await t.sb.machines.list()).length, count, 'nothing created');
  });

  test('disks: the size chosen at create, grown online with the file system, kept by forks; bad sizes change nothing', async () => {
    assert.equal((await m.info()).diskGb, 10);
    assert.equal(Number((await sh(m, 'cat /sys/block/vda/size')).trim()), 10 * 2 ** 21);
    assert.ok(await rootSize(m) > 9.5 * GiB, `the file system filled the disk (${await rootSize(m)} bytes)`);
    const grown = await m.resizeDisk(12);
    assert.equal(grown.diskGb, 12);
    assert.ok(await rootSize(m) > 11.5 * GiB, 'grown online');
    await sh(m, 'head -c 64M /dev/urandom > /root/big && sync');
    assert.equal((await m.resizeDisk(12)).diskGb, 12, 'the size it has: nothing to do');
    await assert.rejects(m.resizeDisk(11), code('invalid_argument'), 'disks never shrink');
    await assert.rejects(m.resizeDisk(t.config.machines.maxDiskGb + 1), code('invalid_argument'));
    const half = await t.http('POST', `/v1/machines/${m.id}/disk`, { body: { diskGb: 12.5 } });
    assert.equal(half.status, 400, half.text);
    assert.equal((await m.info()).diskGb, 12);
    await m.pause();
    await assert.rejects(m.resizeDisk(13), code('failed_precondition'), 'a paused machine cannot grow its file system');
    await m.resume();
    // The CLI: a bad size is a usage error before any request; a good one grows it.
    const env = { ...process.env, SHELLBASE_URL: t.server.url, SHELLBASE_API_KEY: t.key };
    const bad = await run(process.execPath, [CLI, 'machine', 'disk', m.id, 'lots'], { env }).catch((e: Error & { code: number; stderr: string }) => e);
    assert.equal((bad as { code: number }).code, 2);
    assert.equal((await run(process.execPath, [CLI, 'machine', 'disk', m.id, '13'], { env })).stdout, '13\n');
    assert.ok(await rootSize(m) > 12.5 * GiB);
    const count = (await t.sb.machines.list()).length;
    for (const diskGb of [4, t.config.machines.maxDiskGb + 1]) {
      const r = await t.http('POST', '/v1/machines', { body: { context: 'server', diskGb } });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.hint, /diskGb between 8 and/);
    }
    assert.equal((await t.sb.machines.list()).length, count, 'nothing created');
    const [fork] = await m.fork(1);
    try {
      assert.equal((await fork.info()).diskGb, 13);
      assert.ok(await rootSize(fork) > 12.5 * GiB);
      assert.equal((await sh(fork, 'stat -c %s /root/big')).trim(), String(64 << 20));
      assert.equal((await fork.resizeDisk(14)).diskGb, 14, 'a fork grows on its own');
      assert.equal((await m.info()).diskGb, 13);
    } finally {
      await fork.remove();
    }
  });
});

// Needs Debian's mirror (through the machine's egress policy): docker.io, bpftrace, bpftool and busybox-static are not in the image.
describe('machines are full Debian: eBPF and Docker inside (opt-in: SHELLBASE_TEST_INTERNET=1)', {
  skip: process.env.SHELLBASE_TEST_INTERNET !== '1' && 'set SHELLBASE_TEST_INTERNET=1 (installs docker.io, bpftrace and bpftool from Debian)', timeout: 2_400_000,
}, () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  test('bpftrace runs a program and bpftool sees it and reads the kernel\'s BTF; docker imports a root file system and runs it, with bridge networking through the egress policy', async () => {
    const big = await t.sb.machines.create({ memoryMb: 2048, diskGb: 16 });
    try {
      // Streamed: an install under TCG takes longer than an HTTP client waits for a response's head.
      const slow = async (cmd: string) => {
        let stdout = '';
        let stderr = '';
        let exit = -1;
        for await (const e of big.execStream(cmd, { timeoutMs: 600_000, env: { DEBIAN_FRONTEND: 'noninteractive' } })) {
          if (e.type === 'stdout') stdout += e.data;
          else if (e.type === 'stderr') stderr += e.data;
          else if (e.type === 'exit') exit = e.exitCode;
        }
        assert.equal(exit, 0, `${cmd}\nexit ${exit}\n${stdout.slice(-2000)}\n${stderr.slice(-2000)}`);
        return stdout;
      };
      await slow('apt-get update -q >/dev/null');
      // Without recommends, as scripts install it: apparmor (which docker.io recommends) is the image's, as on a stock
      // Debian, and dockerd loads its docker-default profile with apparmor_parser from it.
      await slow('apt-get install -y -q --no-install-recommends docker.io bpftrace bpftool busybox-static >/dev/null');
      assert.match(await slow('bpftrace -e \'BEGIN { printf("hi\\n"); exit(); }\''), /^Attaching 1 probe\.\.\.\nhi\n/);
      // bpftool reads the kernel's BTF (to a file: a pipe into head would hide its exit code).
      assert.match(await slow('bpftool btf dump file /sys/kernel/btf/vmlinux format raw >/tmp/btf && head -1 /tmp/btf && grep -c "^\\[[0-9]*\\] STRUCT \'task_struct\' " /tmp/btf'),
        /^\[1\] [A-Z_]+ .*\n1\n$/);
      // bpftool lists and dumps the program a running bpftrace loaded, and the program goes with bpftrace.
      const traced = async () => (JSON.parse(await slow('bpftool --json prog list')) as { id: number; type: string; name?: string }[])
        .filter((p) => p.type === 'kprobe' && p.name === 'do_nanosleep');
      assert.deepEqual(await traced(), [], 'no program on do_nanosleep before bpftrace');
      // In the background, its output in a file (an exec's own must not be held open); the interval ends it if nothing else does.
      await slow('bpftrace -e "kprobe:do_nanosleep { @sleeps = count(); } interval:s:600 { exit(); }" </dev/null >/tmp/bt.out 2>&1 & echo $! >/tmp/bt.pid; '
        + 'for i in $(seq 120); do bpftool prog list | grep -q "kprobe  name do_nanosleep " && exit 0; sleep 1; done; cat /tmp/bt.out >&2; exit 1');
      const progs = await traced();
      assert.equal(progs.length, 1, JSON.stringify(progs));
      assert.match(await slow(`bpftool prog dump xlated id ${progs[0].id}`), /= map\[id:\d+\]/, 'its instructions, the count\'s map among them');
      await slow('sleep 1 && kill -INT $(cat /tmp/bt.pid) && for i in $(seq 300); do kill -0 $(cat /tmp/bt.pid) 2>/dev/null || exit 0; sleep 0.2; done; exit 1');
      assert.match(await slow('cat /tmp/bt.out'), /^@sleeps: [1-9]\d*$/m, 'the program ran (sleep 1 entered do_nanosleep)');
      assert.deepEqual(await traced(), [], 'the program is gone with bpftrace');
      assert.match(await slow('docker info --format "{{.Driver}} {{.CgroupVersion}}"'), /^overlay2 2\n$/);
      assert.match(await slow('docker info --format "{{json .SecurityOptions}}"'), /"name=apparmor"/);
      assert.doesNotMatch(await slow('journalctl -u docker --no-pager -o cat'), /apparmor_parser|docker-default profile could not be loaded/);
      // A root file system tarball of busybox, imported and run; the container reaches the mirror through the proxy.
      await slow('mkdir -p /tmp/bb/bin && cp /bin/busybox /tmp/bb/bin/ && for a in sh wget cat; do ln -s busybox /tmp/bb/bin/$a; done && tar -C /tmp/bb -c . | docker import - bb');
      assert.equal(await slow('docker run --rm bb /bin/sh -c "echo hello from a container"'), 'hello from a container\n');
      assert.equal(await slow('docker run --rm bb cat /proc/self/attr/current'), 'docker-default (enforce)\n', 'the container runs confined');
      const fetched = await slow('docker run --rm -e http_proxy=http://10.0.2.100:3128 bb wget -qO- http://deb.debian.org/debian/dists/bookworm/Release | head -1');
      assert.match(fetched, /^Origin: Debian/);
    } finally {
      await big.remove();
    }
    });
});
