"""The API's objects as the SDK returns them (frozen dataclasses, snake_case), and the option dicts it takes.

The objects of the API's responses are generated from its schemas into _wire_types.py (scripts/wire-types.mjs)
and re-exported here. This module adds what the OpenAPI document does not describe: the SDK's option dicts,
the lines of NDJSON streams, the entries of a directory listing, and a webhook's registration answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, TypedDict, Union

from ._wire_types import (
    AllowEgress,
    ApiKey,
    BuildResult,
    BuildStep,
    CodeError,
    CodeExecution,
    Cursor,
    CodeResult,
    CommitMode,
    Conflict,
    ConnectionKind,
    Context,
    ContextConfig,
    ContextDefaults,
    ContextNetwork,
    CreatedKey,
    CreatedTenant,
    Delivery,
    DeliveryState,
    DiffChange,
    DiffResult,
    Event,
    EventKind,
    ExecExit,
    ExecResult,
    ExecUsage,
    ExposedPort,
    FileStat,
    FileType,
    BackupResult,
    GcResult,
    Image,
    ImageConfig,
    LimitHit,
    Machine,
    MachineConsole,
    MachineExecResult,
    MachineExit,
    MachinePort,
    MachineSnapshot,
    MachineState,
    MachineUsage,
    Mount,
    MountResult,
    NetworkConnection,
    NetworkPolicy,
    NoEgress,
    OnConflict,
    PublicEgress,
    PushResult,
    RegistryCredentials,
    Service,
    ServiceAccess,
    ServiceShare,
    ServiceState,
    Tenant,
    Usage,
    UsageItem,
    Version,
    VersionCause,
    Webhook,
)

__all__ = [
    "AllowEgress", "ApiKey", "BuildEvent", "BuildResult", "BuildResultEvent", "BuildStep", "BuildStepDone", "BuildStepStart",
    "CodeError", "CodeExecution", "CodeResult", "CommitMode", "Cursor",
    "Conflict", "ConnectionKind", "Context", "ContextConfig", "ContextDefaults", "ContextNetwork", "CreatedKey", "CreatedTenant", "Delivery",
    "DeliveryState", "DiffChange", "DiffResult", "DirEntry", "Event", "EventKind", "ExecEvent", "ExecExit", "ExecResult", "ExecUsage",
    "ExitEvent", "ExposedPort", "FileStat", "FileType", "GcResult", "BackupResult",
    "Image", "ImageConfig", "ImageProgress", "LimitHit", "Limits", "Machine", "MachineConsole", "MachineExecEvent", "MachineExecResult",
    "MachineExit", "MachineExitEvent", "MachineLimits", "MachinePort", "MachineSnapshot", "MachineState", "MachineUsage", "Mount", "MountResult", "NetworkConnection",
    "NetworkPolicy", "NoEgress", "OnConflict", "OutputEvent", "PublicEgress", "PushResult", "RegistryCredentials", "Service", "ServiceAccess", "ServiceLimits", "ServiceShare",
    "ServiceState", "Tenant", "TenantChange", "Usage", "UsageItem", "Version", "VersionCause", "Webhook", "WebhookCreated",
]


# Options (inputs): plain dicts with snake_case keys, checked by type checkers.

class Limits(TypedDict, total=False):
    """A query's limits (each optional; the server's defaults and maximums are in docs/api.md)."""

    memory_mb: int
    pids: int
    cpus: float
    disk_mb: int
    output_bytes: int


class ServiceLimits(TypedDict, total=False):
    """A service's limits (no timeout, no output cap)."""

    memory_mb: int
    pids: int
    cpus: float
    disk_mb: int


class MachineLimits(TypedDict, total=False):
    """What limits a machine's exec takes."""

    output_bytes: int


class TenantChange(TypedDict, total=False):
    """What `tenants.update` changes: quotas (replaced whole, by the API's names), network (None: the server's default)."""

    quotas: Mapping[str, float]
    network: NetworkPolicy | None


# A directory listing's entries (`GET .../files/DIR` answers `{"entries": [...]}`).

@dataclass(frozen=True, kw_only=True)
class DirEntry(FileStat):
    name: str


# A webhook as its registration answers it (the OpenAPI document gives this one as Webhook and the secret, combined).

@dataclass(frozen=True, kw_only=True)
class WebhookCreated(Webhook):
    """A webhook just registered, with its signing secret (shown only here): deliveries carry
    `Shellbase-Signature: t=UNIX_SECONDS,v1=HEX`, HEX the HMAC-SHA256 of `"{t}.{body}"` keyed by it."""

    secret: str


# The lines of NDJSON streams (exec, builds, pulls and imports).

@dataclass(frozen=True)
class OutputEvent:
    """A piece of a command's stdout or stderr, as it was written."""

    type: Literal["stdout", "stderr"]
    data: str


@dataclass(frozen=True)
class ExitEvent(ExecExit):
    """The last event of a query's stream."""

    type: Literal["exit"] = "exit"


ExecEvent = Union[OutputEvent, ExitEvent]


@dataclass(frozen=True)
class MachineExitEvent(MachineExit):
    type: Literal["exit"] = "exit"


MachineExecEvent = Union[OutputEvent, MachineExitEvent]


@dataclass(frozen=True)
class ImageProgress:
    """A line of a pull's or an import's progress."""

    type: Literal["progress"]
    message: str
    layer: str | None = None
    bytes: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class BuildStepStart:
    type: Literal["step"]
    index: int
    total: int
    instruction: str
    line: int


@dataclass(frozen=True)
class BuildStepDone(BuildStep):
    type: Literal["stepDone"] = "stepDone"


@dataclass(frozen=True)
class BuildResultEvent(BuildResult):
    """The last event of a build's stream."""

    type: Literal["result"] = "result"


BuildEvent = Union[BuildStepStart, BuildStepDone, OutputEvent, BuildResultEvent]
