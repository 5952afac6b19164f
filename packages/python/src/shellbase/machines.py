"""Machines (microVMs): create, exec, files, fork, snapshots, ports, and commit into a context."""

from __future__ import annotations

from dataclasses import asdict
from typing import Mapping, Sequence

from ._http import Transport
from ._wire import JsonObject, from_wire, to_wire
from .context import Command, Data, command_body, exec_timeout, quote
from .pty import MachinePty, open_pty
from .streams import EventStream, MachineExecStream, parse_machine_event
from .types import CodeExecution, Cursor, ExposedPort, Machine, MachineConsole, MachineExecResult, MachineExitEvent, MachineLimits, MachineSnapshot, Mount, NetworkPolicy, ServiceAccess


def _absolute(path: str) -> str:
    path = path if path.startswith("/") else f"/{path}"
    return "/".join(quote(s) for s in path.split("/"))


def _machines(transport: Transport, data: JsonObject) -> list[MachineHandle]:
    machines = data.get("machines")
    return [MachineHandle(transport, str(m["id"])) for m in machines if isinstance(m, dict)] if isinstance(machines, list) else []


class MachineFiles:
    """Files of the live machine (through its guest agent)."""

    def __init__(self, transport: Transport, machine: MachineHandle) -> None:
        self._t = transport
        self._m = machine

    def read(self, path: str) -> bytes:
        response = self._t.request("GET", self._m._path(f"/files{_absolute(path)}"), accept="*/*")
        with response:
            return response.read()

    def read_text(self, path: str, *, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str) -> list[str]:
        """Names in a directory, with `/` after subdirectories."""
        entries = self._t.json("GET", self._m._path(f"/files{_absolute(path)}")).get("entries")
        return [str(e) for e in entries] if isinstance(entries, list) else []

    def write(self, path: str, data: Data, *, mode: int | None = None) -> None:
        """Writes a file (parents made; at most 64 MiB)."""
        query = {"mode": format(mode, "o") if mode is not None else None}
        body = data.encode() if isinstance(data, str) else data
        self._t.request("PUT", self._m._path(f"/files{_absolute(path)}"), query=query, body=body).close()


class MachineHandle:
    """A machine by id; nothing is sent until it is used."""

    def __init__(self, transport: Transport, id: str) -> None:
        self._t = transport
        self.id = id
        self.files = MachineFiles(transport, self)

    def __repr__(self) -> str:
        return f"<MachineHandle {self.id!r}>"

    def _path(self, suffix: str = "") -> str:
        return f"/v1/machines/{quote(self.id)}{suffix}"

    def _exec_body(self, command: Command, stdin: str | None, env: Mapping[str, str] | None, cwd: str | None,
                   timeout_ms: int | None, limits: MachineLimits | None) -> JsonObject:
        return {**command_body(command), **to_wire({"stdin": stdin, "env": env, "cwd": cwd, "timeout_ms": timeout_ms, "limits": limits})}

    def info(self) -> Machine:
        return from_wire(Machine, self._t.json("GET", self._path()))

    def exec(
        self,
        command: Command,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_ms: int | None = None,
        limits: MachineLimits | None = None,
        timeout: float | None = None,
    ) -> MachineExecResult:
        """Runs a command as root in the live machine; wakes it if it hibernated."""
        body = self._exec_body(command, stdin, env, cwd, timeout_ms, limits)
        return from_wire(MachineExecResult, self._t.json("POST", self._path("/exec"), json_body=body, timeout=exec_timeout(self._t, timeout, timeout_ms)))

    def exec_stream(
        self,
        command: Command,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_ms: int | None = None,
        limits: MachineLimits | None = None,
        timeout: float | None = None,
    ) -> MachineExecStream:
        """Runs a command and yields its output as it happens, then one exit event; closing it early kills the command."""
        body = self._exec_body(command, stdin, env, cwd, timeout_ms, limits)
        response = self._t.request("POST", self._path("/exec"), json_body=body, accept="application/x-ndjson",
                                   timeout=exec_timeout(self._t, timeout, timeout_ms))
        return EventStream(response, parse_machine_event, MachineExitEvent)

    def run_code(
        self,
        code: str,
        *,
        language: str | None = None,
        context: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        timeout: float | None = None,
    ) -> CodeExecution:
        """Runs a cell in the machine's code interpreter (a machine of the code-interpreter image).

        Each language (or context) is one long-lived kernel: variables stay between calls, and in
        forks. The code's own error is the result's `error`, not a raised one.
        """
        body = to_wire({"code": code, "language": language, "context": context, "envs": envs, "timeout_ms": timeout_ms})
        return from_wire(CodeExecution, self._t.json("POST", self._path("/code"), json_body=body, timeout=exec_timeout(self._t, timeout, timeout_ms)))

    def screen(self, *, pointer: bool = True) -> bytes:
        """Its screen (display :0 of a machine of the desktop image) as PNG bytes, the pointer drawn in unless `pointer` is False."""
        response = self._t.request("GET", self._path("/screen"), query={"pointer": "true" if pointer else "false"}, accept="image/png")
        with response:
            return response.read()

    def input(self, input: Mapping[str, object]) -> Cursor:
        """One input to its screen, as the API has it (`{"type": "click", "x": 10, "y": 20}`, `{"type": "key", "key": "ctrl+l"}`);
        returns where the pointer is afterwards."""
        return from_wire(Cursor, self._t.json("POST", self._path("/input"), json_body=dict(input)))

    def click(self, x: int | None = None, y: int | None = None, *, button: str = "left", count: int = 1) -> Cursor:
        """Clicks at `x`,`y` (or where the pointer is); `count=2` for a double click."""
        at = {k: v for k, v in (("x", x), ("y", y)) if v is not None}
        return self.input({"type": "click", **at, "button": button, "count": count})

    def type(self, text: str, *, delay_ms: int | None = None) -> Cursor:
        """Types text as keystrokes."""
        return self.input({"type": "type", "text": text, **({"delayMs": delay_ms} if delay_ms is not None else {})})

    def key(self, key: str) -> Cursor:
        """Presses a key or a chord of X key names: `Return`, `ctrl+l`."""
        return self.input({"type": "key", "key": key})

    def pause(self) -> Machine:
        """Stops its CPUs (its memory stays); `resume` goes on."""
        return from_wire(Machine, self._t.json("POST", self._path("/pause")))

    def resume(self) -> Machine:
        return from_wire(Machine, self._t.json("POST", self._path("/resume")))

    def hibernate(self) -> Machine:
        """Its memory and device state to disk and its QEMU ended now (as after its idle time); any use wakes it."""
        return from_wire(Machine, self._t.json("POST", self._path("/hibernate")))

    def console(self, *, tail: int | None = None) -> MachineConsole:
        """The last `tail` lines (default 100, at most 10,000) of its serial console log; the machine is not woken."""
        return from_wire(MachineConsole, self._t.json("GET", self._path("/console"), query={"tail": tail}))

    def pty(self, *, cols: int | None = None, rows: int | None = None) -> MachinePty:
        """An interactive terminal: root's login shell on a PTY of `cols` x `rows` (default 80 x 24), over a
        WebSocket. Wakes a hibernated machine, and keeps it from hibernating while open."""
        query = "&".join(f"{k}={v}" for k, v in (("cols", cols), ("rows", rows)) if v is not None)
        return open_pty(self._t, self._path("/pty") + (f"?{query}" if query else ""))

    def stop(self) -> Machine:
        """Powers it off; its disk stays (commit before stopping)."""
        return from_wire(Machine, self._t.json("POST", self._path("/stop")))

    def delete(self) -> None:
        """Deletes it: its disk, memory and run files go."""
        self._t.request("DELETE", self._path()).close()

    def resize_disk(self, disk_gb: int) -> Machine:
        """Grows its disk to `disk_gb` GiB and its root file system with it, online (wakes it if it hibernated). Disks never shrink."""
        return from_wire(Machine, self._t.json("POST", self._path("/disk"), json_body={"diskGb": disk_gb}))

    def snapshot(self) -> str:
        """Freezes RAM, devices and disk at one instant; restore it with `sb.machines.restore`. Returns its id."""
        return str(self._t.json("POST", self._path("/snapshot"))["snapshot"])

    def fork(self, count: int = 1) -> list[MachineHandle]:
        """`count` copies with this machine's memory, processes and disk at one instant; it keeps running."""
        return _machines(self._t, self._t.json("POST", self._path("/fork"), json_body={"count": count}))

    def expose(self, port: int, *, access: ServiceAccess | None = None) -> ExposedPort:
        """A gateway URL for a guest port (forks get URLs of their own); `access="key"` wants the tenant's API key too."""
        body = {"port": port, **({"access": access} if access is not None else {})}
        return from_wire(ExposedPort, self._t.json("POST", self._path("/ports"), json_body=body))

    def commit(self, context: str) -> str:
        """Its changed files as a new version of `context` (rebased like a query's writes); returns the version."""
        return str(self._t.json("POST", self._path("/commit"), json_body={"context": context})["version"])

    def commit_mount(self, path: str) -> str:
        """What it wrote below a writable mount's path as a new version of the mounted context; returns the version."""
        return str(self._t.json("POST", self._path(f"/mounts/{quote(path)}/commit"))["version"])


class Machines:
    """`sb.machines`: create, get, list, and restore snapshots."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(
        self,
        *,
        context: str | None = None,
        version: str | None = None,
        image: str | None = None,
        memory_mb: int | None = None,
        cpus: int | None = None,
        disk_gb: int | None = None,
        idle_timeout_ms: int | None = None,
        network: NetworkPolicy | None = None,
        mounts: Sequence[Mount | Mapping[str, object]] | None = None,
    ) -> MachineHandle:
        """A running machine, restored from a template (the first one of an image or version boots it once).

        `network` narrows its context's (or tenant's) egress policy; the guest reaches the outside
        only through the egress proxy at 10.0.2.100:3128 (its programs are told so). `mounts`
        copies contexts into it at paths; `commit_mount(path)` commits a writable one's changes.
        """
        body = to_wire({"context": context, "version": version, "image": image, "memory_mb": memory_mb, "cpus": cpus,
                        "disk_gb": disk_gb, "idle_timeout_ms": idle_timeout_ms, "network": network})
        if mounts is not None:
            body["mounts"] = [to_wire(asdict(m) if isinstance(m, Mount) else m) for m in mounts]
        return MachineHandle(self._t, str(self._t.json("POST", "/v1/machines", json_body=body)["id"]))

    def get(self, id: str) -> MachineHandle:
        return MachineHandle(self._t, id)

    def restore(self, snapshot: str, count: int = 1) -> list[MachineHandle]:
        """`count` machines continuing from a snapshot."""
        return _machines(self._t, self._t.json("POST", f"/v1/snapshots/{quote(snapshot)}/machines", json_body={"count": count}))

    def snapshots(self) -> list[MachineSnapshot]:
        snapshots = self._t.json("GET", "/v1/snapshots").get("snapshots")
        return [from_wire(MachineSnapshot, s) for s in snapshots] if isinstance(snapshots, list) else []

    def delete_snapshot(self, id: str) -> None:
        self._t.request("DELETE", f"/v1/snapshots/{quote(id)}").close()

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    def list(self) -> list[Machine]:
        machines = self._t.json("GET", "/v1/machines").get("machines")
        return [from_wire(Machine, m) for m in machines] if isinstance(machines, list) else []
