"""The asyncio client: `AsyncShellbase` has the same calls as `Shellbase`, awaited."""

from ._run import AsyncEventStream, AsyncResponse
from .client import AsyncContexts, AsyncShellbase, AsyncTenants
from .context import AsyncContextFiles, AsyncContextHandle, AsyncContextNetworking, AsyncContextServices, AsyncExecStream
from .events import AsyncEventFeed, AsyncEvents, AsyncWebhooks
from .machines import AsyncMachineExecStream, AsyncMachineFiles, AsyncMachineHandle, AsyncMachinePty, AsyncMachines
from .tunnel import AsyncLocalTunnel

__all__ = [
    "AsyncContextFiles",
    "AsyncContextHandle",
    "AsyncContextNetworking",
    "AsyncContextServices",
    "AsyncContexts",
    "AsyncEventFeed",
    "AsyncEventStream",
    "AsyncEvents",
    "AsyncExecStream",
    "AsyncLocalTunnel",
    "AsyncMachineExecStream",
    "AsyncMachineFiles",
    "AsyncMachineHandle",
    "AsyncMachinePty",
    "AsyncMachines",
    "AsyncResponse",
    "AsyncShellbase",
    "AsyncTenants",
    "AsyncWebhooks",
]
