"""shellbase: contexts, queries, files, history, services, machines, images, builds, events and webhooks from Python.

    from shellbase import Shellbase
    sb = Shellbase()                       # SHELLBASE_URL, SHELLBASE_API_KEY
    r = sb.context("agent-1").exec("python3 -c 'print(6*7)'")

`shellbase.aio.AsyncShellbase` (also exported here) has the same calls for asyncio.
"""

from ._http import Response
from .aio import AsyncShellbase
from .client import Contexts, Shellbase, Tenants
from .context import ContextFiles, ContextHandle, ContextNetworking, ContextServices
from .errors import (
    AlreadyExistsError,
    ConflictError,
    ErrorCode,
    FailedPreconditionError,
    ForbiddenError,
    InternalError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaError,
    ShellbaseConnectionError,
    ShellbaseError,
    ShellbaseTimeoutError,
    UnauthorizedError,
    UnavailableError,
)
from .events import EventFeed, Events, Webhooks
from .images import BuildStream, Dockerignore, Images, tar_context
from .limits import TIMEOUT_CEILING_MS
from .machines import MachineFiles, MachineHandle, Machines
from .pty import MachinePty, PtyExit
from .streams import EventStream, ExecStream, MachineExecStream
from .tunnel import LocalTunnel
from .types import (
    AllowEgress,
    ApiKey,
    BuildEvent,
    BuildResult,
    BuildResultEvent,
    BuildStep,
    BuildStepDone,
    BuildStepStart,
    CodeError,
    CodeExecution,
    CodeResult,
    Image,
    ImageProgress,
    CommitMode,
    Conflict,
    ConnectionKind,
    Context,
    ContextNetwork,
    CreatedKey,
    CreatedTenant,
    Delivery,
    DeliveryState,
    DiffChange,
    DiffResult,
    DirEntry,
    Event,
    EventKind,
    ExecEvent,
    ExecExit,
    ExecResult,
    ExecUsage,
    ExitEvent,
    ExposedPort,
    FileStat,
    GcResult,
    BackupResult,
    PushResult,
    RegistryCredentials,
    LimitHit,
    Limits,
    Machine,
    MachineExecEvent,
    MachineExecResult,
    MachineExitEvent,
    MachineLimits,
    MachinePort,
    MachineConsole,
    MachineSnapshot,
    Mount,
    MountResult,
    NetworkConnection,
    NetworkPolicy,
    NoEgress,
    OnConflict,
    OutputEvent,
    PublicEgress,
    Service,
    ServiceAccess,
    ServiceLimits,
    ServiceShare,
    Tenant,
    TenantChange,
    Usage,
    UsageItem,
    Version,
    VersionCause,
    Webhook,
    WebhookCreated,
)

__version__ = "0.1.0"

__all__ = [
    "AllowEgress", "AlreadyExistsError", "ApiKey", "AsyncShellbase", "BuildEvent", "BuildResult", "BuildResultEvent", "BuildStep",
    "BuildStepDone", "BuildStepStart", "BuildStream", "CodeError", "CodeExecution", "CodeResult", "Dockerignore", "Image", "ImageProgress", "Images", "tar_context", "CommitMode", "Conflict", "ConflictError",
    "ConnectionKind", "Context", "ContextFiles", "ContextHandle", "ContextNetwork", "ContextNetworking", "ContextServices",
    "Contexts", "CreatedKey", "CreatedTenant", "Delivery", "DeliveryState", "DiffChange", "DiffResult", "DirEntry", "ErrorCode",
    "Event", "EventFeed", "EventKind", "EventStream", "Events",
    "ExecEvent", "ExecExit", "ExecResult", "ExecStream", "ExecUsage", "ExitEvent", "ExposedPort", "FailedPreconditionError",
    "FileStat", "ForbiddenError", "GcResult", "BackupResult", "PushResult", "RegistryCredentials", "InternalError", "InvalidArgumentError", "LimitExceededError", "LimitHit", "Limits",
    "LocalTunnel", "Machine", "MachineExecEvent", "MachineExecResult", "MachineExecStream", "MachineExitEvent",
    "MachineConsole", "MachineFiles", "MachineHandle", "MachineLimits", "MachinePort", "MachinePty", "MachineSnapshot", "Machines", "Mount", "MountResult", "NetworkConnection", "PtyExit",
    "NetworkPolicy", "NoEgress", "NotFoundError", "OnConflict", "OutputEvent", "PayloadTooLargeError", "PublicEgress",
    "QuotaError", "Response", "Service", "ServiceAccess", "ServiceLimits", "ServiceShare", "Shellbase",
    "ShellbaseConnectionError", "ShellbaseError", "ShellbaseTimeoutError", "TIMEOUT_CEILING_MS", "Tenant", "TenantChange", "Tenants",
    "UnauthorizedError", "UnavailableError", "Usage", "UsageItem", "Version", "VersionCause", "Webhook",
    "WebhookCreated", "Webhooks", "__version__",
]
