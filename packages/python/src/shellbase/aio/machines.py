"""The async form of machines: the same calls as `shellbase.Machines` and `shellbase.MachineHandle`, awaited."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..context import Command, Data
from ..machines import MachineFiles, MachineHandle, Machines
from ..pty import MachinePty, PtyExit
from ..streams import MachineExecStream
from ..types import CodeExecution, Cursor, ExposedPort, Machine, MachineConsole, MachineExecResult, MachineExitEvent, MachineLimits, MachineSnapshot, Mount, NetworkPolicy, OutputEvent, ServiceAccess
from ._run import AsyncEventStream, run_sync

AsyncMachineExecStream = AsyncEventStream[OutputEvent | MachineExitEvent, MachineExitEvent]


class AsyncMachineFiles:
    """Files of the live machine (through its guest agent)."""

    def __init__(self, files: MachineFiles) -> None:
        self._s = files

    async def read(self, path: str) -> bytes:
        return await run_sync(self._s.read, path)

    async def read_text(self, path: str, *, encoding: str = "utf-8") -> str:
        return await run_sync(self._s.read_text, path, encoding=encoding)

    async def list(self, path: str) -> list[str]:
        return await run_sync(self._s.list, path)

    async def write(self, path: str, data: Data, *, mode: int | None = None) -> None:
        await run_sync(self._s.write, path, data, mode=mode)


class AsyncMachinePty:
    """The async form of `shellbase.MachinePty`: `await pty.read()`, `async for chunk in pty`."""

    def __init__(self, pty: MachinePty) -> None:
        self._s = pty

    @property
    def exit(self) -> PtyExit | None:
        return self._s.exit

    async def read(self) -> bytes:
        return await run_sync(self._s.read)

    async def write(self, data: bytes | str) -> None:
        await run_sync(self._s.write, data)

    async def resize(self, cols: int, rows: int) -> None:
        await run_sync(self._s.resize, cols, rows)

    async def close(self) -> None:
        await run_sync(self._s.close)

    def __aiter__(self) -> AsyncMachinePty:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.read()
        if not chunk:
            raise StopAsyncIteration
        return chunk

    async def __aenter__(self) -> AsyncMachinePty:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncMachineHandle:
    """A machine by id; nothing is sent until it is used."""

    def __init__(self, handle: MachineHandle) -> None:
        self._s = handle
        self.id = handle.id
        self.files = AsyncMachineFiles(handle.files)

    def __repr__(self) -> str:
        return f"<AsyncMachineHandle {self.id!r}>"

    async def info(self) -> Machine:
        return await run_sync(self._s.info)

    async def exec(
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
        """Runs a command as root in the live machine; cancelling the task kills the command."""
        return await run_sync(self._s.exec, command, stdin=stdin, env=env, cwd=cwd, timeout_ms=timeout_ms, limits=limits, timeout=timeout)

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
    ) -> AsyncMachineExecStream:
        """`async for event in machine.exec_stream(...)`; leaving early kills the command."""

        def opener() -> MachineExecStream:
            return self._s.exec_stream(command, stdin=stdin, env=env, cwd=cwd, timeout_ms=timeout_ms, limits=limits, timeout=timeout)

        return AsyncEventStream(opener)

    async def run_code(
        self,
        code: str,
        *,
        language: str | None = None,
        context: str | None = None,
        envs: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        timeout: float | None = None,
    ) -> CodeExecution:
        """Runs a cell in the machine's code interpreter (see MachineHandle.run_code)."""
        return await run_sync(self._s.run_code, code, language=language, context=context, envs=envs, timeout_ms=timeout_ms, timeout=timeout)

    async def screen(self, *, pointer: bool = True) -> bytes:
        """Its screen as PNG bytes (see MachineHandle.screen)."""
        return await run_sync(self._s.screen, pointer=pointer)

    async def input(self, input: Mapping[str, object]) -> Cursor:
        """One input to its screen (see MachineHandle.input)."""
        return await run_sync(self._s.input, input)

    async def click(self, x: int | None = None, y: int | None = None, *, button: str = "left", count: int = 1) -> Cursor:
        return await run_sync(self._s.click, x, y, button=button, count=count)

    async def type(self, text: str, *, delay_ms: int | None = None) -> Cursor:
        return await run_sync(self._s.type, text, delay_ms=delay_ms)

    async def key(self, key: str) -> Cursor:
        return await run_sync(self._s.key, key)

    async def pause(self) -> Machine:
        return await run_sync(self._s.pause)

    async def resume(self) -> Machine:
        return await run_sync(self._s.resume)

    async def hibernate(self) -> Machine:
        return await run_sync(self._s.hibernate)

    async def console(self, *, tail: int | None = None) -> MachineConsole:
        return await run_sync(self._s.console, tail=tail)

    async def pty(self, *, cols: int | None = None, rows: int | None = None) -> AsyncMachinePty:
        return AsyncMachinePty(await run_sync(self._s.pty, cols=cols, rows=rows))

    async def stop(self) -> Machine:
        return await run_sync(self._s.stop)

    async def delete(self) -> None:
        await run_sync(self._s.delete)

    async def resize_disk(self, disk_gb: int) -> Machine:
        return await run_sync(self._s.resize_disk, disk_gb)

    async def snapshot(self) -> str:
        return await run_sync(self._s.snapshot)

    async def fork(self, count: int = 1) -> list[AsyncMachineHandle]:
        return [AsyncMachineHandle(m) for m in await run_sync(self._s.fork, count)]

    async def expose(self, port: int, *, access: ServiceAccess | None = None) -> ExposedPort:
        return await run_sync(self._s.expose, port, access=access)

    async def commit(self, context: str) -> str:
        return await run_sync(self._s.commit, context)

    async def commit_mount(self, path: str) -> str:
        return await run_sync(self._s.commit_mount, path)


class AsyncMachines:
    """`sb.machines`: create, get, list, and restore snapshots."""

    def __init__(self, machines: Machines) -> None:
        self._s = machines

    async def create(
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
    ) -> AsyncMachineHandle:
        handle = await run_sync(self._s.create, context=context, version=version, image=image, memory_mb=memory_mb, cpus=cpus,
                                disk_gb=disk_gb, idle_timeout_ms=idle_timeout_ms, network=network, mounts=mounts)
        return AsyncMachineHandle(handle)

    def get(self, id: str) -> AsyncMachineHandle:
        return AsyncMachineHandle(self._s.get(id))

    async def restore(self, snapshot: str, count: int = 1) -> list[AsyncMachineHandle]:
        return [AsyncMachineHandle(m) for m in await run_sync(self._s.restore, snapshot, count)]

    async def snapshots(self) -> list[MachineSnapshot]:
        return await run_sync(self._s.snapshots)

    async def delete_snapshot(self, id: str) -> None:
        await run_sync(self._s.delete_snapshot, id)

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    async def list(self) -> list[Machine]:
        return await run_sync(self._s.list)
