import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';

// How the code interpreter server (packages/server/templates/code-interpreter/server) takes a
// kernel's messages in: over a ZeroMQ pair, with Debian's python3 and jupyter_client signing them
// as a kernel would. A message signed with another key, a replayed one and one without the
// delimiter are refused; a good one comes out with its type, parent header and content.
const SERVER_DIR = path.resolve('packages/server/templates/code-interpreter/server');
const SCRIPT = String.raw`
import json, zmq
from jupyter_client.session import Session
from ci_server.errors import KernelError
from ci_server.kernels import KernelOptions
from ci_server.kernels.jupyter import JupyterKernel

kernel = JupyterKernel(KernelOptions(cwd="/", env={}))
kernel._session = Session(key=b"the-key", signature_scheme="hmac-blake2b")
ctx = zmq.Context()
out, into = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
out.bind("inproc://messages"); into.connect("inproc://messages")
sender = Session(key=b"the-key", signature_scheme="hmac-blake2b")
seen = {"empty": kernel._recv(into)}

def attempt(name, frames):
    out.send_multipart(frames)
    for _ in range(100):
        if into.poll(50):
            break
    try:
        seen[name] = kernel._recv(into)
    except KernelError as e:
        seen[name] = "refused: " + str(e)

good = sender.serialize(sender.msg("status", {"execution_state": "idle"}, parent={"msg_id": "p1"}))
attempt("good", good)
attempt("replayed", good)
other = Session(key=b"another-key", signature_scheme="hmac-blake2b")
attempt("other key", other.serialize(other.msg("status", {"execution_state": "busy"})))
attempt("no delimiter", [f for f in sender.serialize(sender.msg("status", {})) if f != b"<IDS|MSG>"])
print(json.dumps(seen))
`;

test('code interpreter server: a kernel\'s messages are checked as they come in', async () => {
  const { stdout } = await promisify(execFile)('/usr/bin/python3', ['-c', SCRIPT], { env: { PYTHONPATH: SERVER_DIR, PATH: '/usr/bin:/bin' } });
  const seen = JSON.parse(stdout) as Record<string, unknown>;
  assert.equal(seen.empty, null, 'nothing waiting: none');
  assert.deepEqual(seen.good, { msg_type: 'status', parent_header: { msg_id: 'p1' }, content: { execution_state: 'idle' } });
  assert.match(String(seen.replayed), /^refused: .*repeated signature/);
  assert.match(String(seen['other key']), /^refused: .*bad or repeated signature/);
  assert.match(String(seen['no delimiter']), /^refused: .*no delimiter/);
});
