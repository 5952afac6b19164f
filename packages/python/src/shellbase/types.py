"""The API's objects as the SDK returns them (frozen dataclasses, snake_case), and the option dicts it takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, TypedDict, Union

from .limits import LimitHit, timeout_message

CommitMode = Literal["always", "on-success", "never"]
OnConflict = Literal["fail", "retry"]
FileType = Literal["file", "dir", "symlink", "other"]
ServiceState = Literal["sleeping", "starting", "running", "stopping"]
MachineState = Literal["starting", "running", "paused", "hibernated", "stopped", "lost"]
#: `url`: a service's URL token is enough; `key`: its gateway also wants the tenant's API key.
ServiceAccess = Literal["url", "key"]
#: Who else reaches a service at `{name}.{context}.internal:{port}`: every context of the tenant, or those.
ServiceShare = Union[Literal["tenant"], list[str]]
#: What asked for an egress connection.
ConnectionKind = Literal["query", "service", "machine"]


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


class NoEgress(TypedDict):
    """No network at all: no proxy, and names do not resolve."""

    egress: Literal["none"]


class AllowEgress(TypedDict):
    """Only these names (`api.example.com`, `*.github.com`), through the sandbox's proxy."""

    egress: Literal["allow"]
    domains: list[str]


class PublicEgress(TypedDict):
    """Any public address, through the sandbox's proxy (private, loopback and link-local ones are refused)."""

    egress: Literal["public"]


#: Where a sandbox's connections may go (docs/api.md, Network): `{"egress": "none"}`, `{"egress": "public"}` or
#: `{"egress": "allow", "domains": [...]}`. A context's narrows its tenant's; a query's or service's, its context's.
NetworkPolicy = Union[NoEgress, AllowEgress, PublicEgress]


class TenantChange(TypedDict, total=False):
    """What `tenants.update` changes: quotas (replaced whole, by the API's names), network (None: the server's default)."""

    quotas: Mapping[str, float]
    network: NetworkPolicy | None


# Results (outputs).

@dataclass(frozen=True)
class Context:
    name: str
    head: str
    image: str
    created_at: str
    updated_at: str
    #: Its own egress policy, if one is set (forks inherit it); else its tenant's applies.
    network: NetworkPolicy | None = None
    #: What its queries and services run with unless a request says otherwise: `env`, `cwd`, `user`.
    defaults: dict[str, object] | None = None
    #: What its image or Dockerfile says it runs (`entrypoint`, `cmd`, `exposedPorts`, `labels`): recorded, not run.
    config: dict[str, object] | None = None


@dataclass(frozen=True)
class ContextNetwork:
    #: A context's own policy (None: its tenant's applies).
    policy: NetworkPolicy | None
    #: What its sandboxes get: its own policy within its tenant's.
    effective: NetworkPolicy


@dataclass(frozen=True)
class NetworkConnection:
    """One connection a sandbox asked its egress proxy for."""

    time: str
    host: str
    port: int
    bytes_out: int
    bytes_in: int
    allowed: bool
    kind: ConnectionKind
    #: Why it was refused (or why it failed).
    reason: str | None = None


@dataclass(frozen=True)
class VersionCause:
    kind: str
    command: str | None = None
    #: The exit code of the query (``exec``) or service run (``service``) whose writes the version holds.
    exit_code: int | None = None


@dataclass(frozen=True)
class Version:
    id: str
    parent: str | None
    created_at: str
    cause: VersionCause
    #: Bytes this version added over its parent.
    bytes: int = 0
    #: A merge's second parent: the source context's version that was merged (None for other versions).
    merged: str | None = None


@dataclass(frozen=True)
class ExecUsage:
    cpu_ms: float = 0
    wall_ms: float = 0
    memory_peak_bytes: int = 0
    bytes_written: int = 0
    #: Bytes the query sent and received through its egress proxy (None when it had no egress).
    egress_bytes: int | None = None
    ingress_bytes: int | None = None


@dataclass(frozen=True)
class Conflict:
    """The query's changes overlapped changes committed meanwhile; `version` holds its work, unattached."""

    paths: list[str]
    version: str


@dataclass(frozen=True)
class ExecExit:
    """How a query ended: everything of its result but the output."""

    exit_code: int
    timed_out: bool
    oom_killed: bool
    truncated: bool
    base_version: str
    #: The context's head after the query.
    version: str
    #: Whether this query's writes became the head.
    committed: bool
    usage: ExecUsage = field(default_factory=ExecUsage)
    signal: str | None = None
    #: True when the disk limit (`limits.disk_mb`) stopped a write.
    disk_limit_hit: bool = False
    conflict: Conflict | None = None
    #: How many times `on_conflict="retry"` ran the command again.
    retries: int = 0
    #: With `timed_out`: the limit it met (`timeoutMs`), its value and the tenant's maximum.
    limit: LimitHit | None = None

    @property
    def ok(self) -> bool:
        """Exit code 0 and no conflict."""
        return self.exit_code == 0 and self.conflict is None

    @property
    def timeout_message(self) -> str | None:
        """With `timed_out`: which limit ended it, its value, and how far `timeout_ms` may go for this tenant."""
        return timeout_message(self.timed_out, self.limit)


@dataclass(frozen=True)
class ExecResult(ExecExit):
    """The result of a query once it ended."""

    stdout: str = ""
    stderr: str = ""


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
class FileStat:
    type: FileType
    size: int
    mode: int
    #: Owner and group as a sandbox sees them (65534 for ids a sandbox cannot map).
    uid: int
    gid: int
    mtime: str
    #: A symlink's target, as stored.
    target: str | None = None


@dataclass(frozen=True)
class DirEntry(FileStat):
    name: str = ""


@dataclass(frozen=True)
class DiffChange:
    path: str
    kind: Literal["added", "modified", "deleted"]
    type: FileType
    size: int | None = None


@dataclass(frozen=True)
class DiffResult:
    changes: list[DiffChange]
    #: With `path=`: a unified diff of that file.
    patch: str | None = None


@dataclass(frozen=True)
class Tenant:
    id: str
    name: str
    admin: bool
    created_at: str
    #: The tenant's own quotas, by the API's names (absent ones are the server's defaults).
    quotas: dict[str, float] | None = None
    #: The tenant's egress policy (None: the server's default, SHELLBASE_EGRESS).
    network: NetworkPolicy | None = None


@dataclass(frozen=True)
class ApiKey:
    """Names a key without revealing it."""

    id: str
    created_at: str
    revoked_at: str | None = None


@dataclass(frozen=True)
class CreatedTenant:
    tenant: Tenant
    #: The tenant's first key, shown only here.
    api_key: str


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    #: The new key, shown only here.
    api_key: str


@dataclass(frozen=True)
class UsageItem:
    key: str
    queries: int = 0
    cpu_ms: float = 0
    wall_ms: float = 0
    service_seconds: float = 0
    machine_seconds: float = 0
    #: Of those, the seconds they were doing something (a request, a connection, a start, a command);
    #: the rest was idle, which is the platform's.
    service_active_seconds: float = 0
    machine_active_seconds: float = 0
    #: Machines' running time weighted by their memory (MiB x seconds).
    machine_mb_seconds: float = 0
    #: Bytes sent and received through egress proxies by queries, services and machines.
    egress_bytes: int = 0
    ingress_bytes: int = 0
    bytes_stored: int = 0


@dataclass(frozen=True)
class Usage:
    items: list[UsageItem]
    total: UsageItem


@dataclass(frozen=True)
class GcResult:
    versions_dropped: int = 0
    layers_deleted: int = 0
    bytes_freed: int = 0
    deferred_layers: int = 0
    templates_deleted: int = 0
    ms: float = 0


@dataclass(frozen=True)
class Service:
    """A long-running process over a context, on a URL; it runs only while it is used."""

    name: str
    context: str
    #: As given: a string runs with bash -c, a list as argv.
    command: str | list[str]
    port: int
    #: The gateway URL (its host label is an unguessable token).
    url: str
    #: The same service through a path prefix, for clients that cannot resolve *.localhost.
    path_url: str
    state: ServiceState
    idle_timeout_ms: int
    created_at: str
    access: ServiceAccess = "url"
    #: Its own narrowing of its context's egress policy, if any.
    network: NetworkPolicy | None = None
    #: None: its own context only.
    share: ServiceShare | None = None


@dataclass(frozen=True)
class MachinePort:
    port: int
    url: str
    path_url: str
    #: "key": the gateway wants the tenant's API key too.
    access: ServiceAccess = "url"


@dataclass(frozen=True)
class ExposedPort:
    """A guest port's gateway URLs."""

    url: str
    path_url: str
    access: ServiceAccess = "url"


@dataclass(frozen=True)
class Machine:
    """A microVM: its own kernel, systemd, processes and memory."""

    id: str
    state: MachineState
    image: str
    memory_mb: int
    cpus: int
    #: Its disk's size as the guest sees it (GiB); `resize_disk` grows it.
    disk_gb: int
    idle_timeout_ms: int
    created_at: str
    ports: list[MachinePort] = field(default_factory=list)
    #: The context (and version) its disk was made from; None for a machine of a bare image.
    context: str | None = None
    version: str | None = None
    #: The snapshot it was restored from (forks and restores).
    snapshot: str | None = None
    #: Its own narrowing of its context's (or tenant's) egress policy, if made with one; forks keep it.
    network: NetworkPolicy | None = None


@dataclass(frozen=True)
class MachineUsage:
    wall_ms: float = 0


@dataclass(frozen=True)
class MachineExit:
    exit_code: int
    timed_out: bool
    truncated: bool
    usage: MachineUsage = field(default_factory=MachineUsage)
    signal: str | None = None
    #: With `timed_out`: the limit it met (`timeoutMs`), its value and the tenant's maximum.
    limit: LimitHit | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def timeout_message(self) -> str | None:
        """With `timed_out`: which limit ended it, its value, and how far `timeout_ms` may go for this tenant."""
        return timeout_message(self.timed_out, self.limit)


@dataclass(frozen=True)
class MachineExecResult(MachineExit):
    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True)
class MachineExitEvent(MachineExit):
    type: Literal["exit"] = "exit"


MachineExecEvent = Union[OutputEvent, MachineExitEvent]


@dataclass(frozen=True)
class MachineSnapshot:
    """RAM, device state and disk of a machine frozen at one instant."""

    id: str
    machine: str
    memory_mb: int
    cpus: int
    disk_gb: int
    created_at: str


@dataclass(frozen=True)
class MachineConsole:
    """The end of a machine's serial console log."""

    #: Its last lines, oldest first, without line ends.
    lines: list[str]
    #: Earlier lines were left out.
    truncated: bool
    #: Bytes the log holds in all.
    size: int


@dataclass(frozen=True)
class Image:
    """An OCI image the tenant pulled or imported; `sb.contexts.create(name, image=ref)` makes contexts of it."""

    ref: str
    digest: str
    #: Its root version (its layers, bottom first).
    version: str
    layers: int
    bytes: int
    #: `env`, `cwd`, `user`, `entrypoint`, `cmd`, `exposedPorts`, `labels` as the image's config gives them.
    config: dict[str, object]
    created_at: str


@dataclass(frozen=True)
class ImageProgress:
    """A line of a pull's or an import's progress."""

    type: Literal["progress"]
    message: str
    layer: str | None = None
    bytes: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class BuildStep:
    """One step of a build: its Dockerfile line (with its stage), whether the cache had it, the version after it."""

    instruction: str
    cached: bool
    version: str
    ms: float


@dataclass(frozen=True)
class BuildResult:
    context: str
    version: str
    steps: list[BuildStep]


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
