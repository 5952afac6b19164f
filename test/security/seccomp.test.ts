import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startTestServer, type TestServer } from '../harness.ts';

// Threat: a query attacks the kernel through system calls no sandboxed program needs (kexec,
// modules, bpf, keyrings, userfaultfd, perf, io_uring) or makes new mounts and namespaces.
// Defence: the seccomp filter of packages/server/native/seccomp.c (docs/security.md).
describe('security: the seccomp filter', () => {
  let t: TestServer;
  before(async () => { t = await startTestServer(); });
  after(async () => { await t?.close(); });

  // Raw calls with arguments the kernel itself would reject differently (EFAULT, EINVAL, EOPNOTSUPP):
  // only the filter answers EPERM (or ENOSYS for clone3) before the kernel looks at them.
  const X86_64: Record<string, number> = {
    bpf: 321, perf_event_open: 298, userfaultfd: 323, keyctl: 250, kexec_load: 246, init_module: 175,
    io_uring_setup: 425, clone3: 435, open_tree: 428, fsopen: 430, setns: 308,
  };
  const script = `
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def err(r): return 'ok' if r >= 0 else os.strerror(ctypes.get_errno())
out = {name: err(libc.syscall(nr, 9999, 0, 0, 0, 0)) for name, nr in ${JSON.stringify(X86_64)}.items()}
out['unshare(CLONE_NEWUSER)'] = err(libc.unshare(0x10000000))
out['mount'] = err(libc.mount(b'none', b'/mnt', b'tmpfs', 0, None))
out['fork'] = 'ok' if os.waitpid(os.fork() or os._exit(0), 0) else 'failed'
print(json.dumps(out))`;

  test('denied calls fail with EPERM; everyday ones work', async () => {
    assert.equal(process.arch, 'x64', 'the call numbers above are x86_64 ones: extend the table for this architecture');
    const r = await t.sb.context('sc').exec(['python3', '-c', script], { commit: 'never' });
    assert.equal(r.exitCode, 0, r.stderr);
    const got = JSON.parse(r.stdout) as Record<string, string>;
    for (const [name, result] of Object.entries(got)) {
      const want = name === 'fork' ? 'ok' : name === 'clone3' ? 'Function not implemented' : 'Operation not permitted';
      assert.equal(result, want, name);
    }
  });

  test('the filter is installed on the command and no descriptor of it leaks', async () => {
    const r = await t.sb.context('sc').exec('grep ^Seccomp: /proc/self/status; ls /proc/self/fd | tr "\\n" " "; echo; unshare -U true 2>&1 | head -1', { commit: 'never' });
    const [mode, fds, unshare] = r.stdout.trim().split('\n');
    assert.equal(mode, 'Seccomp:\t2', 'filter mode');
    assert.deepEqual(fds.trim().split(' ').map(Number).sort(), [0, 1, 2, 3], 'stdin, stdout, stderr and ls\'s own directory');
    assert.match(unshare, /Operation not permitted/);
  });
});
