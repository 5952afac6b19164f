"""The JavaScript and TypeScript kernel: a long-lived `node js_kernel.mjs` per context.

Commands go to the kernel as JSON lines on a pipe of their own, its messages come back on another
(js_kernel.mjs describes both); the cells' stdout and stderr are the process's own. One reader
thread watches the three; before it handles a message it drains stdout and stderr, so a cell's
output always comes before its result and its end.
"""

from __future__ import annotations

import codecs
import json
import os
import selectors
import signal
import subprocess
import threading
from typing import Any, Optional

from .. import results
from ..errors import KernelError
from . import EnvChange, Emit, Kernel, KernelOptions
from .process import signal_group, stop_group

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js_kernel.mjs")
READY_TIMEOUT = 30.0


class NodeKernel(Kernel):
    def __init__(self, options: KernelOptions, node: str, typescript: bool,
                 acorn_path: Optional[str], typescript_path: Optional[str]) -> None:
        super().__init__(options)
        self._node = node
        self._typescript = typescript
        self._acorn = acorn_path
        self._ts = typescript_path
        self._proc: Optional[subprocess.Popen] = None
        self._cmd: Optional[Any] = None
        self._reader: Optional[threading.Thread] = None
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._sink: Optional[tuple[int, Emit, threading.Event]] = None
        self._next_id = 0

    def start(self) -> None:
        cmd_r, cmd_w = os.pipe()
        msg_r, msg_w = os.pipe()
        argv = [self._node, SCRIPT, "--cmd-fd", str(cmd_r), "--msg-fd", str(msg_w)]
        if self._acorn:
            argv += ["--acorn", self._acorn]
        if self._ts:
            argv += ["--typescript", self._ts]
        try:
            self._proc = subprocess.Popen(argv, cwd=self.options.cwd, env=self.options.env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(cmd_r, msg_w),
                                          start_new_session=True)
        except OSError as e:
            for fd in (cmd_r, cmd_w, msg_r, msg_w):
                os.close(fd)
            raise KernelError(f"cannot launch {self._node}: {e}") from e
        os.close(cmd_r)
        os.close(msg_w)
        self._cmd = os.fdopen(cmd_w, "wb", buffering=0)
        self._reader = threading.Thread(target=self._read, args=(msg_r,), name="node-kernel-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(READY_TIMEOUT) or self._ended.is_set():
            raise KernelError(f"the JavaScript kernel did not start ({self._node} status {self._proc.poll()})")

    def execute(self, code: str, env: EnvChange, emit: Emit) -> None:
        self._next_id += 1
        done = threading.Event()
        with self._lock:
            self._sink = (self._next_id, emit, done)
        try:
            line = json.dumps({"op": "execute", "id": self._next_id, "code": code, "typescript": self._typescript,
                               "env": env.apply, "revert": env.revert})
            try:
                self._cmd.write(line.encode() + b"\n")
            except OSError:
                pass  # the kernel is gone: the wait below sees it
            while not done.wait(0.2):
                if self._ended.is_set():
                    emit(results.error("KernelDied", f"the kernel exited (status {self._proc.poll()})",
                                       "the kernel process exited while the cell ran; it is restarted"))
                    return
        finally:
            with self._lock:
                self._sink = None

    def interrupt(self) -> None:
        with self._lock:
            running = self._sink is not None
        if running:
            signal_group(self._proc, signal.SIGINT)

    def kill(self) -> None:
        signal_group(self._proc, signal.SIGKILL)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and not self._ended.is_set()

    def shutdown(self) -> None:
        if self._cmd is not None:
            try:
                self._cmd.close()  # the kernel exits when its command pipe closes
            except OSError:
                pass
        stop_group(self._proc, grace=0.5)
        if self._reader is not None:
            self._reader.join(timeout=2)

    # The reader thread.
    def _emit(self, event: results.Event, msg_id: Optional[int] = None) -> None:
        with self._lock:
            sink = self._sink
        if sink is not None and (msg_id is None or msg_id == sink[0]):
            sink[1](event)

    def _read(self, msg_fd: int) -> None:
        streams = {self._proc.stdout.fileno(): "stdout", self._proc.stderr.fileno(): "stderr"}
        decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in streams}
        for fd in streams:
            os.set_blocking(fd, False)
        sel = selectors.DefaultSelector()
        for fd in [*streams, msg_fd]:
            sel.register(fd, selectors.EVENT_READ)
        pending = b""

        def drain(fd: int) -> bool:
            """Read what the stream holds now; False at its end."""
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    return True
                text = decoders[fd].decode(chunk, final=not chunk)
                if text:
                    self._emit(results.stream(streams[fd], text))
                if not chunk:
                    sel.unregister(fd)
                    return False

        try:
            while msg_fd in sel.get_map():  # the process holds it until it exits
                for key, _ in sel.select():
                    fd = key.fd
                    if fd in streams:
                        if fd in sel.get_map():
                            drain(fd)
                        continue
                    chunk = os.read(fd, 65536)
                    for sfd in streams:
                        if sfd in sel.get_map():
                            drain(sfd)
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._handle(json.loads(line))
        finally:
            sel.close()
            os.close(msg_fd)
            self._ended.set()
            self._ready.set()

    def _handle(self, msg: dict[str, Any]) -> None:
        kind, msg_id = msg.get("type"), msg.get("id")
        if kind == "ready":
            self._ready.set()
        elif kind == "count":
            self._emit(results.execution_count(int(msg["execution_count"])), msg_id)
        elif kind == "result":
            self._emit(results.result(msg.get("data", {}), bool(msg.get("main"))), msg_id)
        elif kind == "error":
            self._emit(results.error(str(msg.get("name", "Error")), str(msg.get("value", "")),
                                     str(msg.get("traceback", ""))), msg_id)
        elif kind == "done":
            with self._lock:
                sink = self._sink
            if sink is not None and sink[0] == msg_id:
                sink[2].set()
