"""A context as the SDK sees it: queries, files, history and services."""

from __future__ import annotations

import socket
import urllib.parse
from dataclasses import asdict
from typing import IO, Callable, Mapping, Sequence, Union

from ._http import Response, Transport
from ._wire import JsonObject, from_wire, to_wire
from .errors import ShellbaseError
from .streams import ExecStream, EventStream, parse_exec_event
from .tunnel import LocalTunnel, open_tunnel
from .types import (
    CommitMode,
    Context,
    ContextNetwork,
    DiffResult,
    DirEntry,
    ExecResult,
    ExitEvent,
    FileStat,
    Limits,
    Mount,
    NetworkConnection,
    NetworkPolicy,
    OnConflict,
    Service,
    ServiceAccess,
    ServiceLimits,
    ServiceShare,
    Version,
)

#: A string runs with `bash -c`; a list is the argv.
Command = Union[str, Sequence[str]]
Data = Union[str, bytes, IO[bytes]]
#: Without a per-call `timeout`, exec waits at least this long past the command's own `timeout_ms`.
EXEC_MARGIN_S = 30.0
SERVER_DEFAULT_TIMEOUT_MS = 60_000


def quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def file_path(path: str) -> str:
    """`/a/b` with each segment encoded (dot segments too, which proxies might resolve): the server resolves them."""
    segments = [s for i, s in enumerate(path.split("/")) if i > 0 or s != ""]
    return "/".join("%2e%2e" if s == ".." else "%2e" if s == "." else quote(s) for s in segments)


def command_body(command: Command) -> JsonObject:
    if isinstance(command, str):
        return {"command": command}
    return {"argv": list(command)}


def exec_timeout(transport: Transport, timeout: float | None, timeout_ms: int | None) -> float | None:
    """The seconds to wait for an exec's answer: the call's `timeout`, else the client's stretched to the command's."""
    if timeout is not None:
        return timeout
    if transport.timeout is None:
        return None
    return max(transport.timeout, (timeout_ms or SERVER_DEFAULT_TIMEOUT_MS) / 1000 + EXEC_MARGIN_S)


def _data(data: Data) -> bytes | IO[bytes]:
    return data.encode() if isinstance(data, str) else data


class ContextFiles:
    """Files read and written straight from the layer store, with no sandbox; each write is one new version."""

    def __init__(self, transport: Transport, ctx: ContextHandle) -> None:
        self._t = transport
        self._ctx = ctx

    def _version(self, version: str | None) -> str | None:
        return version if version is not None else self._ctx.pinned_version

    def read(self, path: str, *, version: str | None = None) -> bytes:
        response = self._t.request("GET", self._ctx._path(f"/files/{file_path(path)}"), query={"version": self._version(version)}, accept="*/*")
        with response:
            return response.read()

    def read_text(self, path: str, *, version: str | None = None, encoding: str = "utf-8") -> str:
        return self.read(path, version=version).decode(encoding)

    def open(self, path: str, *, version: str | None = None, range: tuple[int, int] | None = None) -> Response:
        """The unread answer, for streaming a large file (`read(n)`, then `close()`); `range` is inclusive bytes."""
        headers = {"Range": f"bytes={range[0]}-{range[1]}"} if range else None
        return self._t.request("GET", self._ctx._path(f"/files/{file_path(path)}"), query={"version": self._version(version)}, headers=headers, accept="*/*")

    def list(self, path: str, *, version: str | None = None) -> list[DirEntry]:
        data = self._t.json("GET", self._ctx._path(f"/files/{file_path(path)}"), query={"version": self._version(version)})
        entries = data.get("entries")
        return [from_wire(DirEntry, e) for e in entries] if isinstance(entries, list) else []

    def stat(self, path: str, *, version: str | None = None) -> FileStat:
        return from_wire(FileStat, self._t.json("GET", self._ctx._path(f"/stat/{file_path(path)}"), query={"version": self._version(version)}))

    def write(self, path: str, data: Data, *, mode: int | None = None) -> str:
        """Writes a file (parents made); returns the new version."""
        query = {"mode": format(mode, "o") if mode is not None else None}
        return str(self._t.json("PUT", self._ctx._path(f"/files/{file_path(path)}"), query=query, body=_data(data))["version"])

    def upload_tar(self, path: str, tar: bytes | IO[bytes]) -> str:
        """Unpacks a tar archive below directory `path`, as one version; returns it."""
        return str(self._t.json("PUT", self._ctx._path(f"/files/{file_path(path)}"), query={"format": "tar"}, body=tar)["version"])

    def delete(self, path: str, *, recursive: bool = False) -> str:
        """Deletes a file, a symlink, or (with recursive=True) a directory; returns the new version."""
        query = {"recursive": True if recursive else None}
        return str(self._t.json("DELETE", self._ctx._path(f"/files/{file_path(path)}"), query=query)["version"])


class ContextServices:
    """Long-running processes over the context, on a gateway URL; they run only while used."""

    def __init__(self, transport: Transport, ctx: ContextHandle) -> None:
        self._t = transport
        self._ctx = ctx

    def _svc(self, name: str, suffix: str = "") -> str:
        return self._ctx._path(f"/services/{quote(name)}{suffix}")

    def create(
        self,
        name: str,
        command: Command,
        port: int,
        *,
        env: Mapping[str, str] | None = None,
        idle_timeout_ms: int | None = None,
        start_timeout_ms: int | None = None,
        limits: ServiceLimits | None = None,
        access: ServiceAccess | None = None,
        network: NetworkPolicy | None = None,
        share: ServiceShare | None = None,
    ) -> Service:
        """Defines a service; nothing starts until the first request to its URL (or connection through a tunnel).

        `access="key"` makes its gateway URL want the tenant's API key too; `network` narrows the
        context's egress policy for it; `share` lets other contexts reach it (see `share`).
        """
        body = to_wire({
            "name": name, "command": command if isinstance(command, str) else list(command), "port": port, "env": env,
            "idle_timeout_ms": idle_timeout_ms, "start_timeout_ms": start_timeout_ms, "limits": limits, "access": access,
            "network": network, "share": share,
        })
        return from_wire(Service, self._t.json("POST", self._ctx._path("/services"), json_body=body))

    def list(self) -> list[Service]:
        services = self._t.json("GET", self._ctx._path("/services")).get("services")
        return [from_wire(Service, s) for s in services] if isinstance(services, list) else []

    def get(self, name: str) -> Service:
        return from_wire(Service, self._t.json("GET", self._svc(name)))

    def share(self, name: str, share: ServiceShare | None) -> Service:
        """Who else reaches it at `{name}.{context}.internal:{port}`: "tenant", a list of contexts, or None (this context only)."""
        return from_wire(Service, self._t.json("PUT", self._svc(name, "/share"), json_body={"share": share}))

    def stop(self, name: str) -> Service:
        """Puts it to sleep now; its writes commit to the context."""
        return from_wire(Service, self._t.json("POST", self._svc(name, "/stop")))

    def delete(self, name: str) -> None:
        """Stops it and removes it, with its log."""
        self._t.request("DELETE", self._svc(name)).close()

    def logs(self, name: str, *, tail: int | None = None) -> str:
        """The last lines of its stdout and stderr, across runs."""
        return self._t.request("GET", self._svc(name, "/logs"), query={"tail": tail}, accept="text/plain").text()

    def stream(self, name: str) -> socket.socket:
        """One TCP connection to the service's port, through the API (the service wakes for it); the caller closes it."""
        return open_tunnel(self._t, self._svc(name, "/connect"))

    def connect(self, name: str, *, port: int = 0, host: str = "127.0.0.1",
                on_error: Callable[[ShellbaseError], None] | None = None) -> LocalTunnel:
        """A local port (0: any free one) that reaches the service's port over plain TCP, a tunnel per
        connection, so a database in a context answers `psql -h 127.0.0.1 -p PORT`. Close it when done."""
        return LocalTunnel(lambda: self.stream(name), host=host, port=port, on_error=on_error)


class ContextNetworking:
    """The context's egress policy (its own, if set, and the one its sandboxes get) and its audit log."""

    def __init__(self, transport: Transport, ctx: ContextHandle) -> None:
        self._t = transport
        self._ctx = ctx

    def get(self) -> ContextNetwork:
        return from_wire(ContextNetwork, self._t.json("GET", self._ctx._path("/network")))

    def set(self, policy: NetworkPolicy) -> ContextNetwork:
        """Sets its own policy (within its tenant's); forks inherit it."""
        return from_wire(ContextNetwork, self._t.json("PUT", self._ctx._path("/network"), json_body=policy))

    def clear(self) -> ContextNetwork:
        """Drops its own policy: its tenant's applies again."""
        return from_wire(ContextNetwork, self._t.json("DELETE", self._ctx._path("/network")))

    def log(self, *, limit: int | None = None) -> list[NetworkConnection]:
        """The last connections its sandboxes asked for, newest first (allowed or refused, and why)."""
        connections = self._t.json("GET", self._ctx._path("/network/log"), query={"limit": limit}).get("connections")
        return [from_wire(NetworkConnection, c) for c in connections] if isinstance(connections, list) else []


class ContextHandle:
    """A context, optionally pinned to a version (`at`); nothing is sent until it is used (exec creates it)."""

    def __init__(self, transport: Transport, name: str, pinned_version: str | None = None) -> None:
        self._t = transport
        self.name = name
        self.pinned_version = pinned_version
        self.files = ContextFiles(transport, self)
        self.services = ContextServices(transport, self)
        self.network = ContextNetworking(transport, self)

    def __repr__(self) -> str:
        at = f" at {self.pinned_version}" if self.pinned_version else ""
        return f"<ContextHandle {self.name!r}{at}>"

    def _path(self, suffix: str = "") -> str:
        return f"/v1/contexts/{quote(self.name)}{suffix}"

    def _exec_body(
        self, command: Command, stdin: str | None, env: Mapping[str, str] | None, cwd: str | None, version: str | None,
        commit: CommitMode | None, on_conflict: OnConflict | None, timeout_ms: int | None, limits: Limits | None,
        network: NetworkPolicy | None, mounts: Sequence[Mount | Mapping[str, object]] | None = None,
    ) -> JsonObject:
        body = {**command_body(command), **to_wire({
            "stdin": stdin, "env": env, "cwd": cwd, "version": version if version is not None else self.pinned_version,
            "commit": commit, "on_conflict": on_conflict, "timeout_ms": timeout_ms, "limits": limits, "network": network,
        })}
        if mounts is not None:
            body["mounts"] = [to_wire(asdict(m) if isinstance(m, Mount) else m) for m in mounts]
        return body

    def exec(
        self,
        command: Command,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        version: str | None = None,
        commit: CommitMode | None = None,
        on_conflict: OnConflict | None = None,
        timeout_ms: int | None = None,
        limits: Limits | None = None,
        network: NetworkPolicy | None = None,
        mounts: Sequence[Mount | Mapping[str, object]] | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Runs a command in a fresh sandbox over the context (or `version`) and waits for its result.

        `timeout_ms` is the command's limit on the server; `timeout` (seconds) is how long this client
        waits for the answer before it gives up, which also stops the query. `network` narrows the
        context's egress policy for this query (`{"egress": "none"}`: no network at all). `mounts`
        shows other contexts at paths (`Mount(context="data", path="/mnt/data", read_only=True)`);
        what the command writes under a writable one commits into it with this context's commit.
        """
        body = self._exec_body(command, stdin, env, cwd, version, commit, on_conflict, timeout_ms, limits, network, mounts)
        data = self._t.json("POST", self._path("/exec"), json_body=body, timeout=exec_timeout(self._t, timeout, timeout_ms))
        return from_wire(ExecResult, data)

    def exec_stream(
        self,
        command: Command,
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        version: str | None = None,
        commit: CommitMode | None = None,
        on_conflict: OnConflict | None = None,
        timeout_ms: int | None = None,
        limits: Limits | None = None,
        network: NetworkPolicy | None = None,
        mounts: Sequence[Mount | Mapping[str, object]] | None = None,
        timeout: float | None = None,
    ) -> ExecStream:
        """Runs a command and yields its output as it happens, then one exit event (also kept in `.exit`).

        Closing the stream early (break, `close()`, the end of a `with` block) stops the query.
        `timeout` is the longest wait for each event.
        """
        body = self._exec_body(command, stdin, env, cwd, version, commit, on_conflict, timeout_ms, limits, network, mounts)
        response = self._t.request("POST", self._path("/exec"), json_body=body, accept="application/x-ndjson",
                                   timeout=exec_timeout(self._t, timeout, timeout_ms))
        return EventStream(response, parse_exec_event, ExitEvent)

    def at(self, version: str) -> ContextHandle:
        """The same context, with reads, queries and forks pinned to `version`."""
        return ContextHandle(self._t, self.name, version)

    def fork(self, new_name: str, *, version: str | None = None) -> ContextHandle:
        """Forks this context (at its head, or the pinned version) into a new one, in O(1)."""
        version = version if version is not None else self.pinned_version
        self._t.json("POST", self._path("/fork"), json_body=to_wire({"name": new_name, "version": version}))
        return ContextHandle(self._t, new_name)

    def versions(self, *, limit: int | None = None) -> list[Version]:
        """Versions newest first, following parents from the head."""
        versions = self._t.json("GET", self._path("/versions"), query={"limit": limit}).get("versions")
        return [from_wire(Version, v) for v in versions] if isinstance(versions, list) else []

    def diff(self, *, from_: str | None = None, to: str | None = None, path: str | None = None) -> DiffResult:
        """What changed between two versions (default: the head against its parent); `path=` adds a patch."""
        return from_wire(DiffResult, self._t.json("GET", self._path("/diff"), query={"from": from_, "to": to, "path": path}))

    def merge(self, source: str) -> str:
        """Merges context `source` (usually a fork of this one) into this one; ConflictError (`.paths`) on overlap."""
        return str(self._t.json("POST", self._path("/merge"), json_body={"from": source})["version"])

    def reset(self, version: str) -> Context:
        """Moves the head to `version` (as a new version); later versions stay in the history."""
        return from_wire(Context, self._t.json("POST", self._path("/reset"), json_body={"version": version}))

    def info(self) -> Context:
        return from_wire(Context, self._t.json("GET", self._path()))

    def set_defaults(self, defaults: Mapping[str, object]) -> Context:
        """Replaces the context's defaults (`env`, `cwd`, `user`; `{}` drops them): what its queries and services run with."""
        return from_wire(Context, self._t.json("PATCH", self._path(), json_body={"defaults": dict(defaults)}))

    def delete(self) -> None:
        self._t.request("DELETE", self._path()).close()
