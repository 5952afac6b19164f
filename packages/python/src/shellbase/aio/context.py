"""The async form of a context handle: the same calls as `shellbase.ContextHandle`, awaited."""

from __future__ import annotations

from typing import IO, Callable, Mapping, Sequence

from ..context import Command, ContextFiles, ContextHandle, ContextNetworking, ContextServices, Data
from ..errors import ShellbaseError
from ..streams import ExecStream
from ..types import (
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
    OutputEvent,
    Service,
    ServiceAccess,
    ServiceLimits,
    ServiceShare,
    Version,
)
from ._run import AsyncEventStream, AsyncResponse, run_sync
from .tunnel import AsyncLocalTunnel, Streams, open_tunnel

AsyncExecStream = AsyncEventStream[OutputEvent | ExitEvent, ExitEvent]


class AsyncContextFiles:
    """Files read and written straight from the layer store, with no sandbox; each write is one new version."""

    def __init__(self, files: ContextFiles) -> None:
        self._s = files

    async def read(self, path: str, *, version: str | None = None) -> bytes:
        return await run_sync(self._s.read, path, version=version)

    async def read_text(self, path: str, *, version: str | None = None, encoding: str = "utf-8") -> str:
        return await run_sync(self._s.read_text, path, version=version, encoding=encoding)

    async def open(self, path: str, *, version: str | None = None, range: tuple[int, int] | None = None) -> AsyncResponse:
        return AsyncResponse(await run_sync(self._s.open, path, version=version, range=range))

    async def list(self, path: str, *, version: str | None = None) -> list[DirEntry]:
        return await run_sync(self._s.list, path, version=version)

    async def stat(self, path: str, *, version: str | None = None) -> FileStat:
        return await run_sync(self._s.stat, path, version=version)

    async def write(self, path: str, data: Data, *, mode: int | None = None) -> str:
        return await run_sync(self._s.write, path, data, mode=mode)

    async def upload_tar(self, path: str, tar: bytes | IO[bytes]) -> str:
        return await run_sync(self._s.upload_tar, path, tar)

    async def delete(self, path: str, *, recursive: bool = False) -> str:
        return await run_sync(self._s.delete, path, recursive=recursive)


class AsyncContextServices:
    """Long-running processes over the context, on a gateway URL; they run only while used."""

    def __init__(self, services: ContextServices) -> None:
        self._s = services

    async def create(
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
        return await run_sync(self._s.create, name, command, port, env=env, idle_timeout_ms=idle_timeout_ms,
                              start_timeout_ms=start_timeout_ms, limits=limits, access=access, network=network, share=share)

    async def share(self, name: str, share: ServiceShare | None) -> Service:
        return await run_sync(self._s.share, name, share)

    async def list(self) -> list[Service]:
        return await run_sync(self._s.list)

    async def get(self, name: str) -> Service:
        return await run_sync(self._s.get, name)

    async def stop(self, name: str) -> Service:
        return await run_sync(self._s.stop, name)

    async def delete(self, name: str) -> None:
        await run_sync(self._s.delete, name)

    async def logs(self, name: str, *, tail: int | None = None) -> str:
        return await run_sync(self._s.logs, name, tail=tail)

    async def stream(self, name: str) -> Streams:
        """One TCP connection to the service's port, through the API (the service wakes for it)."""
        return await open_tunnel(self._s._t, self._s._svc(name, "/connect"))

    async def connect(self, name: str, *, port: int = 0, host: str = "127.0.0.1",
                      on_error: Callable[[ShellbaseError], None] | None = None) -> AsyncLocalTunnel:
        """A local port (0: any free one), served by the running loop, that reaches the service's port over
        plain TCP, a tunnel per connection. Close it when done."""
        return await AsyncLocalTunnel(lambda: self.stream(name), on_error).listen(host, port)


class AsyncContextNetworking:
    """The context's egress policy (its own, if set, and the one its sandboxes get) and its audit log."""

    def __init__(self, network: ContextNetworking) -> None:
        self._s = network

    async def get(self) -> ContextNetwork:
        return await run_sync(self._s.get)

    async def set(self, policy: NetworkPolicy) -> ContextNetwork:
        return await run_sync(self._s.set, policy)

    async def clear(self) -> ContextNetwork:
        return await run_sync(self._s.clear)

    async def log(self, *, limit: int | None = None) -> list[NetworkConnection]:
        return await run_sync(self._s.log, limit=limit)


class AsyncContextHandle:
    """A context, optionally pinned to a version (`at`); nothing is sent until it is used (exec creates it)."""

    def __init__(self, handle: ContextHandle) -> None:
        self._s = handle
        self.name = handle.name
        self.pinned_version = handle.pinned_version
        self.files = AsyncContextFiles(handle.files)
        self.services = AsyncContextServices(handle.services)
        self.network = AsyncContextNetworking(handle.network)

    def __repr__(self) -> str:
        at = f" at {self.pinned_version}" if self.pinned_version else ""
        return f"<AsyncContextHandle {self.name!r}{at}>"

    async def exec(
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
        """Runs a command and waits for its result; cancelling the task (or `asyncio.timeout`) stops the query."""
        return await run_sync(self._s.exec, command, stdin=stdin, env=env, cwd=cwd, version=version, commit=commit,
                              on_conflict=on_conflict, timeout_ms=timeout_ms, limits=limits, network=network, mounts=mounts, timeout=timeout)

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
    ) -> AsyncExecStream:
        """`async for event in ctx.exec_stream(...)`: output as it happens, then one exit event; leaving early stops the query."""

        def opener() -> ExecStream:
            return self._s.exec_stream(command, stdin=stdin, env=env, cwd=cwd, version=version, commit=commit,
                                       on_conflict=on_conflict, timeout_ms=timeout_ms, limits=limits, network=network, mounts=mounts, timeout=timeout)

        return AsyncEventStream(opener)

    def at(self, version: str) -> AsyncContextHandle:
        return AsyncContextHandle(self._s.at(version))

    async def fork(self, new_name: str, *, version: str | None = None) -> AsyncContextHandle:
        return AsyncContextHandle(await run_sync(self._s.fork, new_name, version=version))

    async def versions(self, *, limit: int | None = None) -> list[Version]:
        return await run_sync(self._s.versions, limit=limit)

    async def diff(self, *, from_: str | None = None, to: str | None = None, path: str | None = None) -> DiffResult:
        return await run_sync(self._s.diff, from_=from_, to=to, path=path)

    async def merge(self, source: str) -> str:
        return await run_sync(self._s.merge, source)

    async def reset(self, version: str) -> Context:
        return await run_sync(self._s.reset, version)

    async def info(self) -> Context:
        return await run_sync(self._s.info)

    async def set_defaults(self, defaults: Mapping[str, object]) -> Context:
        """Replaces the context's defaults (`env`, `cwd`, `user`; `{}` drops them)."""
        return await run_sync(self._s.set_defaults, defaults)

    async def delete(self) -> None:
        await run_sync(self._s.delete)
