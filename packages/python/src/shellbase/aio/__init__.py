"""The asyncio client: `AsyncShellbase` has the same calls as `Shellbase`, awaited."""

from ._run import AsyncEventStream, AsyncResponse
from .client import AsyncContexts, AsyncShellbase, AsyncTenants
from .context import AsyncContextFiles, AsyncContextHandle, AsyncContextServices, AsyncExecStream
from .machines import AsyncMachineExecStream, AsyncMachineFiles, AsyncMachineHandle, AsyncMachines

__all__ = [
    "AsyncContextFiles",
    "AsyncContextHandle",
    "AsyncContextServices",
    "AsyncContexts",
    "AsyncEventStream",
    "AsyncExecStream",
    "AsyncMachineExecStream",
    "AsyncMachineFiles",
    "AsyncMachineHandle",
    "AsyncMachines",
    "AsyncResponse",
    "AsyncShellbase",
    "AsyncTenants",
]
