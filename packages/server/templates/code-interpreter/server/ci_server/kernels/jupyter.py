"""Jupyter kernels (ipykernel for python, IRkernel for r), driven over the Jupyter messaging
protocol with plain blocking ZeroMQ sockets.

jupyter_client provides the connection file and the signing of what this server sends (`Session`);
launching and the sockets are ours, so that only the thread that holds the context uses them.
Messages received are checked and unpacked here (`_recv`): `Session.recv` also turns every date
of a message's headers into a datetime through dateutil, ~1 ms a message under TCG, for dates
nothing here reads. Cells the server runs for itself (setup, per-execution environment
variables) are sent `silent`: they publish no execute_input or result and do not advance the
execution count; their output is dropped.

A kernel may be told at start to publish only what this server reads (`quiet_cells`): no `busy`
status and no `execute_input`. The server numbers each cell itself then: a cell's number is one
more than the `execution_count` of the kernel's last reply (ipykernel answers every execute,
silent or not, with the count before its post-cell increment), so `number_of_executions` still
leads the stream without a message from the kernel.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Optional

import zmq
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session

from .. import results
from ..errors import KernelError
from . import EnvChange, Emit, Kernel, KernelOptions
from .process import signal_group, stop_group

log = logging.getLogger(__name__)

READY_TIMEOUT = 60.0     # seconds for a kernel to answer kernel_info (R takes a few)
HIDDEN_TIMEOUT = 30.0    # seconds for a hidden cell (setup, environment variables)
POLL_MS = 200
DELIM = b"<IDS|MSG>"     # what separates a message's routing ids from its parts
SEEN_MAX = 1 << 16       # signatures kept for the replay check (Session keeps as many)


class JupyterKernel(Kernel):
    """A kernel process launched from `argv` ({connection_file} is substituted)."""

    def __init__(self, options: KernelOptions) -> None:
        super().__init__(options)
        self._proc: Optional[subprocess.Popen] = None
        self._dir: Optional[str] = None
        self._zmq: Optional[zmq.Context] = None
        self._shell: Any = None
        self._iopub: Any = None
        self._poller: Any = None
        self._session: Optional[Session] = None
        self._running = False
        self._seen: set[bytes] = set()   # signatures received: a message replayed is refused
        self._cell = ""          # msg_id of the user cell running, if any
        self._interrupted = ""   # msg_id of the last cell interrupted
        self._quiet = False      # the kernel publishes neither `busy` nor `execute_input`
        self._next_count: Optional[int] = None  # the next user cell's number, from the last reply

    # What a language provides.
    # How messages are signed (Jupyter's connection file `signature_scheme`): HMAC with SHA-256,
    # the protocol's default, unless the kernel takes another hashlib algorithm.
    SIGNATURE_SCHEME = "hmac-sha256"

    def argv(self) -> list[str]:
        raise NotImplementedError

    def extra_env(self) -> dict[str, str]:
        return {}

    def setup_cells(self) -> list[str]:
        return []

    def quiet_cells(self) -> list[str]:
        """Cells that stop the kernel's `busy` status and `execute_input` messages; the kernel is
        taken as quiet if all of them succeed."""
        return []

    def env_cell(self, apply: dict[str, str], unset: list[str]) -> str:
        raise NotImplementedError

    # Kernel.
    def start(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="ci-kernel-")
        conn_file, info = write_connection_file(
            os.path.join(self._dir, "connection.json"), ip="127.0.0.1", key=uuid.uuid4().hex.encode(),
            signature_scheme=self.SIGNATURE_SCHEME)
        argv = [a.replace("{connection_file}", conn_file) for a in self.argv()]
        env = {**self.options.env, **self.extra_env()}
        try:
            self._proc = subprocess.Popen(argv, cwd=self.options.cwd, env=env, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        except OSError as e:
            raise KernelError(f"cannot launch {argv[0]}: {e}") from e
        self._session = Session(key=info["key"] if isinstance(info["key"], bytes) else str(info["key"]).encode(),
                                signature_scheme=str(info["signature_scheme"]), username="ci_server")
        self._zmq = zmq.Context()
        url = "tcp://127.0.0.1:%d"
        self._shell = self._zmq.socket(zmq.DEALER)
        self._shell.linger = 0
        self._shell.connect(url % info["shell_port"])
        self._iopub = self._zmq.socket(zmq.SUB)
        self._iopub.linger = 0
        self._iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self._iopub.connect(url % info["iopub_port"])
        self._poller = zmq.Poller()
        self._poller.register(self._shell, zmq.POLLIN)
        self._poller.register(self._iopub, zmq.POLLIN)
        self._wait_ready()
        for cell in self.setup_cells():
            reply = self._run_hidden(cell)
            if reply.get("status") != "ok":
                log.warning("setup cell failed in %s: %s: %s", type(self).__name__,
                            reply.get("ename"), reply.get("evalue"))
        quiet = self.quiet_cells()
        self._quiet = bool(quiet) and all(self._run_hidden(cell).get("status") == "ok" for cell in quiet)

    def execute(self, code: str, env: EnvChange, emit: Emit) -> None:
        if env:
            self._run_hidden(self.env_cell(env.apply, []))
        number = self._next_count
        msg_id = self._send_execute(code, silent=False)
        counted = errored = idle = False
        if self._quiet and number is not None:
            counted = True
            emit(results.execution_count(number))
        reply: Optional[dict[str, Any]] = None
        idle_at = 0.0
        self._cell = msg_id
        self._running = True
        try:
            while not (idle and reply is not None):
                if idle and time.monotonic() - idle_at > 2.0:
                    break  # idle without a reply: nothing more will come
                got = self._poll()
                if not got and not self.alive():
                    emit(results.error("KernelDied", f"the kernel exited (status {self._proc.returncode})",
                                       "the kernel process exited while the cell ran; it is restarted"))
                    return
                for msg in got:
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    kind, content = msg["msg_type"], msg["content"]
                    if kind == "execute_reply":
                        reply = content
                        self._counted(content)
                    elif kind == "execute_input" and not counted:
                        counted = True
                        emit(results.execution_count(int(content.get("execution_count", 0))))
                    elif kind == "stream":
                        emit(results.stream("stderr" if content.get("name") == "stderr" else "stdout",
                                            content.get("text", "")))
                    elif kind in ("execute_result", "display_data"):
                        emit(results.result(content.get("data", {}), kind == "execute_result"))
                    elif kind == "error" and not errored:
                        errored = True
                        emit(results.error(content.get("ename", "Error"), content.get("evalue", ""),
                                           "\n".join(content.get("traceback", []))))
                    elif kind == "status" and content.get("execution_state") == "idle":
                        idle, idle_at = True, time.monotonic()
        finally:
            self._running = False
        if reply is not None:
            if not counted and isinstance(reply.get("execution_count"), int):
                emit(results.execution_count(reply["execution_count"]))
            if reply.get("status") == "error" and not errored:
                emit(results.error(reply.get("ename", "Error"), reply.get("evalue", ""),
                                   "\n".join(reply.get("traceback", []))))
            elif reply.get("status") == "aborted" and not errored:
                emit(results.error("ExecutionAborted", "the kernel aborted the cell", ""))
        if env and self.alive():
            self._run_hidden(self.env_cell({k: v for k, v in env.revert.items() if v is not None},
                                           [k for k, v in env.revert.items() if v is None]))

    def interrupt(self) -> None:
        # Once per cell: a second SIGINT could land in ipykernel's own code as the cell ends.
        if self._running and self._interrupted != self._cell:
            self._interrupted = self._cell
            signal_group(self._proc, signal.SIGINT)

    def kill(self) -> None:
        signal_group(self._proc, signal.SIGKILL)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def shutdown(self) -> None:
        stop_group(self._proc)
        for sock in (self._shell, self._iopub):
            if sock is not None:
                sock.close(linger=0)
        if self._zmq is not None:
            self._zmq.term()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._shell = self._iopub = self._zmq = self._poller = None

    # Messaging.
    def _send_execute(self, code: str, silent: bool) -> str:
        self._next_count = None  # known again once this cell's reply has come
        content = {"code": code, "silent": silent, "store_history": not silent, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": False}
        return self._session.send(self._shell, "execute_request", content)["header"]["msg_id"]

    def _poll(self, timeout_ms: int = POLL_MS) -> list[dict[str, Any]]:
        """Every message waiting on shell and iopub, after at most `timeout_ms` of waiting."""
        ready = dict(self._poller.poll(timeout_ms))
        out = []
        for sock in (self._shell, self._iopub):
            # Asked of the socket, not found by a receive that fails (a raised zmq.Again costs ~0.2 ms under TCG).
            while sock in ready and sock.get(zmq.EVENTS) & zmq.POLLIN:
                msg = self._recv(sock)
                if msg is None:
                    break
                out.append(msg)
        return out

    def _recv(self, sock: Any) -> Optional[dict[str, Any]]:
        """The next message waiting on `sock` (None: none), its signature checked: its header's
        `msg_type`, its `parent_header` and `content`, unpacked from JSON as they are."""
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        try:
            parts = frames[frames.index(DELIM) + 1:]
        except ValueError:
            raise KernelError("a message from the kernel has no delimiter") from None
        if len(parts) < 5:
            raise KernelError("a message from the kernel has fewer than 5 parts")
        signature = parts[0]
        if self._session.auth is not None:
            if signature in self._seen or not hmac.compare_digest(signature, self._session.sign(parts[1:5])):
                raise KernelError("a message from the kernel has a bad or repeated signature")
            if len(self._seen) >= SEEN_MAX:
                self._seen.clear()
            self._seen.add(signature)
        header = json.loads(parts[1])
        return {"msg_type": header["msg_type"], "parent_header": json.loads(parts[2]), "content": json.loads(parts[4])}

    def _run_hidden(self, code: str) -> dict[str, Any]:
        msg_id = self._send_execute(code, silent=True)
        deadline = time.monotonic() + HIDDEN_TIMEOUT
        while time.monotonic() < deadline and self.alive():
            for msg in self._poll():
                if msg["msg_type"] == "execute_reply" and msg["parent_header"].get("msg_id") == msg_id:
                    self._counted(msg["content"])
                    return msg["content"]
        return {"status": "error", "ename": "Timeout", "evalue": "no reply to a hidden cell"}

    def _counted(self, reply: dict[str, Any]) -> None:
        """The next user cell's number, from a reply: one more than the count it carries."""
        count = reply.get("execution_count")
        self._next_count = count + 1 if isinstance(count, int) and not isinstance(count, bool) else None

    def _wait_ready(self) -> None:
        """Ask kernel_info until the shell answers and iopub has carried a message of ours."""
        deadline = time.monotonic() + READY_TIMEOUT
        asked: set[str] = set()
        shell_ok = iopub_ok = False
        next_ask = 0.0
        while not (shell_ok and iopub_ok):
            if not self.alive():
                raise KernelError(f"{self.argv()[0]} exited with status {self._proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise KernelError(f"{self.argv()[0]} did not answer within {READY_TIMEOUT:.0f} s")
            if time.monotonic() >= next_ask:
                asked.add(self._session.send(self._shell, "kernel_info_request", {})["header"]["msg_id"])
                next_ask = time.monotonic() + 0.5
            for msg in self._poll(100):
                if msg["parent_header"].get("msg_id") in asked:
                    if msg["msg_type"] == "kernel_info_reply":
                        shell_ok = True
                    else:
                        iopub_ok = True


class PythonKernel(JupyterKernel):
    """ipykernel, on the interpreter that runs this server."""

    # Every message is signed by one side and checked by the other: HMAC-SHA256 of a 10 MiB stream
    # message takes ~375 ms under TCG, HMAC-BLAKE2b ~75 ms (ipykernel takes any hashlib algorithm;
    # IRkernel only SHA-256).
    SIGNATURE_SCHEME = "hmac-blake2b"

    SETUP = "\n".join([
        "def __shellbase_setup():",
        "    import importlib.util, os",
        "    if importlib.util.find_spec('matplotlib') and importlib.util.find_spec('matplotlib_inline'):",
        "        os.environ.setdefault('MPLBACKEND', 'module://matplotlib_inline.backend_inline')",
        "    if importlib.util.find_spec('shellbase_display') is not None:",
        "        import shellbase_display",
        "        shellbase_display.register(get_ipython())",
        "        if importlib.util.find_spec('shellbase_display.fast_paths') is not None:",
        "            import shellbase_display.fast_paths",
        "            shellbase_display.fast_paths.install()",
        "try:",
        "    __shellbase_setup()",
        "finally:",
        "    del __shellbase_setup",
    ])

    def argv(self) -> list[str]:
        # No history database: IPython otherwise writes every cell to a SQLite file on disk, ~12 ms
        # of a warm `1+1` under TCG. `In`, `Out` and `%history` keep the session's in memory.
        # No sleep after each cell (ipykernel's 0.5 ms "to let stray output arrive"): a cell ends
        # here at its reply and the kernel's idle status, which follows all its output on IOPub.
        return [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}",
                "--HistoryManager.enabled=False", "--IPythonKernel._execute_sleep=0"]

    def extra_env(self) -> dict[str, str]:
        # ipykernel exits when this process does (its parent poller watches the pid).
        return {"JPY_PARENT_PID": str(os.getpid())}

    # The interpreter server is the kernel's only client. It reads neither the `busy` status nor
    # `execute_input`: each message costs a cell 4-7 ms in a guest under TCG (the kernel's IOPub
    # thread, ZeroMQ's and this server's threads take turns on one vCPU). And it sends nothing on
    # the control channel, whose queue ipykernel flushes before every shell message by waking its
    # control thread (~2.8 ms of a cell). Raises, leaving the kernel as it was, where ipykernel
    # publishes status or input some other way.
    QUIET = "\n".join([
        "def __shellbase_quiet():",
        "    kernel = get_ipython().kernel",
        "    status, announce = getattr(kernel, '_publish_status', None), getattr(kernel, '_publish_execute_input', None)",
        "    if not (callable(status) and callable(announce)):",
        "        raise RuntimeError('this ipykernel has no _publish_status or _publish_execute_input')",
        "    def publish_status(state, channel, parent=None):",
        "        if state != 'busy':",
        "            status(state, channel, parent)",
        "    kernel._publish_status = publish_status",
        "    kernel._publish_execute_input = lambda code, parent, execution_count: None",
        "    if callable(getattr(kernel, '_flush_control_queue', None)):",
        "        async def no_control_messages():",
        "            pass",
        "        kernel._flush_control_queue = no_control_messages",
        "try:",
        "    __shellbase_quiet()",
        "finally:",
        "    del __shellbase_quiet",
    ])

    def setup_cells(self) -> list[str]:
        return [self.SETUP]

    def quiet_cells(self) -> list[str]:
        return [self.QUIET]

    def env_cell(self, apply: dict[str, str], unset: list[str]) -> str:
        return (f"__import__('os').environ.update({apply!r})\n"
                f"for __k in {unset!r}: __import__('os').environ.pop(__k, None)\n"
                "__k = None; del __k")


class RKernel(JupyterKernel):
    """IRkernel, from its installed kernel spec."""

    def __init__(self, options: KernelOptions, argv: list[str]) -> None:
        super().__init__(options)
        self._argv = argv

    def argv(self) -> list[str]:
        return self._argv

    def env_cell(self, apply: dict[str, str], unset: list[str]) -> str:
        lines = []
        if apply:
            pairs = ", ".join(f"{_r_string(k)} = {_r_string(v)}" for k, v in apply.items())
            lines.append(f"invisible(do.call(Sys.setenv, as.list(c({pairs}))))")
        if unset:
            lines.append(f"invisible(Sys.unsetenv(c({', '.join(_r_string(k) for k in unset)})))")
        return "\n".join(lines) or "invisible(NULL)"


def _r_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
