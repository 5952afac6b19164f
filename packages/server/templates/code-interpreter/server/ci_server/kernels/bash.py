"""The bash kernel: one `bash --noprofile --norc` per context, fed over its stdin.

A cell is written to a file and sourced (`. cell </dev/null`), so variables, functions and `cd`
persist; the cell's stdin is /dev/null, never the kernel's command pipe. After it, bash prints an
end marker (a random token) on stdout, followed by the cell's exit status, and the same token on
stderr; the cell is over once both markers have arrived, so no output is cut off. A cell whose
status is not 0 ends with an error named `ExitCode` whose value is the status ("1").

An interrupt is a SIGINT to the kernel's process group: the foreground command gets it, and bash's
INT trap returns from the sourced cell (status 130). `exit` in a cell, or `set -e` and a failing
command, ends the shell: the error names its status and the context gets a fresh shell.
"""

from __future__ import annotations

import codecs
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import uuid
from typing import Optional

from .. import results
from ..errors import KernelError
from . import EnvChange, Emit, Kernel, KernelOptions
from .process import signal_group, stop_group

INIT = "trap 'return 130 2>/dev/null' INT\n"


class BashKernel(Kernel):
    def __init__(self, options: KernelOptions) -> None:
        super().__init__(options)
        self._proc: Optional[subprocess.Popen] = None
        self._dir: Optional[str] = None
        self._token = "__shellbase_cell_end_" + uuid.uuid4().hex + "__"
        self._count = 0
        self._running = False

    def start(self) -> None:
        bash = shutil.which("bash") or "/bin/bash"
        self._dir = tempfile.mkdtemp(prefix="ci-bash-")
        try:
            self._proc = subprocess.Popen([bash, "--noprofile", "--norc"], cwd=self.options.cwd, env=self.options.env,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True)
        except OSError as e:
            raise KernelError(f"cannot launch bash: {e}") from e
        self._write(INIT)

    def execute(self, code: str, env: EnvChange, emit: Emit) -> None:
        self._count += 1
        emit(results.execution_count(self._count))
        cell = os.path.join(self._dir, "cell.sh")
        with open(cell, "w", encoding="utf-8") as f:
            f.write(code if code.endswith("\n") else code + "\n")
        lines = [f"export {k}={shlex.quote(v)}" for k, v in env.apply.items()]
        lines.append(f". {shlex.quote(cell)} </dev/null")
        lines.append("__shellbase_status=$?")
        for k, v in env.revert.items():
            lines.append(f"unset {k}" if v is None else f"export {k}={shlex.quote(v)}")
        lines.append(f"printf '%s%d\\n' {self._token} \"$__shellbase_status\"")
        lines.append(f"printf '%s\\n' {self._token} >&2")
        lines.append("unset __shellbase_status")
        self._running = True
        try:
            self._write("\n".join(lines) + "\n")
            status = self._collect(emit)
        finally:
            self._running = False
        if status is None:
            if self._proc.poll() is None:
                self.kill()  # its output is closed: no marker can come any more
            code_ = self._proc.wait()
            emit(results.error("ExitCode", str(code_ if code_ >= 0 else 128 - code_),
                               f"the shell exited (status {code_}); the context gets a fresh shell"))
        elif status != 0:
            emit(results.error("ExitCode", str(status), f"the cell ended with exit status {status}"))

    def _collect(self, emit: Emit) -> Optional[int]:
        """Stream stdout and stderr until both end markers; the status, or None if bash exited."""
        token = self._token.encode()
        pending = {"stdout": b"", "stderr": b""}
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in pending}
        done = {"stdout": False, "stderr": False}
        status: Optional[int] = None
        ended = False  # a stream closed before its marker: bash is gone
        sel = selectors.DefaultSelector()
        sel.register(self._proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(self._proc.stderr, selectors.EVENT_READ, "stderr")
        try:
            while not all(done.values()):
                ready = sel.select(timeout=0.5)
                if not ready and self._proc.poll() is not None:
                    return None  # bash exited; a child of it may still hold the pipes open
                for key, _ in ready:
                    name = key.data
                    chunk = os.read(key.fd, 65536)
                    buf = pending[name] + chunk
                    at = buf.find(token)
                    if not chunk:
                        out, pending[name], ended, done[name] = buf, b"", True, True
                        sel.unregister(key.fileobj)
                    elif at >= 0:
                        rest = buf[at + len(token):]
                        if b"\n" not in rest:
                            pending[name] = buf  # the marker line is not complete yet
                            continue
                        out, pending[name], done[name] = buf[:at], b"", True
                        if name == "stdout":
                            status = int(rest.split(b"\n", 1)[0] or b"0")
                        sel.unregister(key.fileobj)
                    else:
                        keep = _partial_suffix(buf, token)
                        out, pending[name] = buf[:len(buf) - keep], buf[len(buf) - keep:]
                    text = decoders[name].decode(out, final=done[name])
                    if text:
                        emit(results.stream(name, text))
        finally:
            sel.close()
        return None if ended else status

    def interrupt(self) -> None:
        if self._running:
            signal_group(self._proc, signal.SIGINT)

    def kill(self) -> None:
        signal_group(self._proc, signal.SIGKILL)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def shutdown(self) -> None:
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        stop_group(self._proc, grace=0.5)
        for pipe in (self._proc.stdout, self._proc.stderr) if self._proc else ():
            pipe.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _write(self, text: str) -> None:
        try:
            self._proc.stdin.write(text.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # bash is gone; the reader sees the end of its output


def _partial_suffix(buf: bytes, token: bytes) -> int:
    """Length of the longest end of `buf` that could begin the token (kept back for the next read)."""
    for n in range(min(len(token) - 1, len(buf)), 0, -1):
        if token.startswith(buf[-n:]):
            return n
    return 0
