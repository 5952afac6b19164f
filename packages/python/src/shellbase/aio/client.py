"""The asyncio client: the same calls as `shellbase.Shellbase`, awaited."""

from __future__ import annotations

import os
from typing import IO, Callable, Literal, Mapping

from .._http import Body, QueryValue, UrlSource
from .._wire import JsonObject
from ..client import Contexts, Shellbase, Tenants
from ..types import ApiKey, BackupResult, Context, CreatedKey, CreatedTenant, GcResult, NetworkPolicy, PushResult, RegistryCredentials, Tenant, TenantChange, Usage
from ._run import AsyncResponse, run_sync
from .context import AsyncContextHandle
from .events import AsyncEvents, AsyncWebhooks
from .machines import AsyncMachines
from .images import AsyncImages
from ..images import Source
from ..types import BuildEvent, BuildResult, BuildResultEvent
from ._run import AsyncEventStream
from .tunnel import Streams, open_tunnel


class AsyncContexts:
    """`sb.contexts`: list, get, create and delete contexts (`sb.context(name)` is the handle)."""

    def __init__(self, contexts: Contexts) -> None:
        self._s = contexts

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    async def list(self) -> list[Context]:
        return await run_sync(self._s.list)

    async def get(self, name: str) -> Context:
        return await run_sync(self._s.get, name)

    async def create(self, name: str, *, image: str | None = None, from_context: str | None = None, from_version: str | None = None,
                     empty: bool | None = None) -> Context:
        return await run_sync(self._s.create, name, image=image, from_context=from_context, from_version=from_version, empty=empty)

    async def delete(self, name: str) -> None:
        await run_sync(self._s.delete, name)

    async def export(self, name: str, dest: str | os.PathLike[str] | IO[bytes], *, version: str | None = None, history: bool = False) -> None:
        await run_sync(self._s.export, name, dest, version=version, history=history)

    async def export_oci(self, name: str, dest: str | os.PathLike[str] | IO[bytes], *, version: str | None = None, tag: str | None = None) -> None:
        await run_sync(self._s.export_oci, name, dest, version=version, tag=tag)

    async def push(self, name: str, ref: str, *, version: str | None = None, credentials: RegistryCredentials | None = None,
                   insecure: bool = False) -> PushResult:
        return await run_sync(self._s.push, name, ref, version=version, credentials=credentials, insecure=insecure)

    async def import_archive(self, archive: str | os.PathLike[str] | bytes | IO[bytes], *, as_name: str | None = None) -> Context:
        return await run_sync(self._s.import_archive, archive, as_name=as_name)


class AsyncTenants:
    """`sb.tenants`: tenants and their API keys (admin key only)."""

    def __init__(self, tenants: Tenants) -> None:
        self._s = tenants

    async def create(self, name: str, quotas: Mapping[str, float] | None = None, network: NetworkPolicy | None = None) -> CreatedTenant:
        return await run_sync(self._s.create, name, quotas, network)

    async def update(self, name: str, change: TenantChange) -> Tenant:
        return await run_sync(self._s.update, name, change)

    async def set_network(self, name: str, network: NetworkPolicy | None) -> Tenant:
        return await run_sync(self._s.set_network, name, network)

    async def create_key(self, name: str) -> CreatedKey:
        return await run_sync(self._s.create_key, name)

    async def list_keys(self, name: str) -> list[ApiKey]:
        return await run_sync(self._s.list_keys, name)

    async def revoke_key(self, name: str, key_id: str) -> None:
        await run_sync(self._s.revoke_key, name, key_id)

    async def revoke(self, name: str) -> None:
        await run_sync(self._s.revoke, name)

    async def list(self) -> list[Tenant]:
        return await run_sync(self._s.list)


class AsyncShellbase:
    """The asyncio client, with the same settings and calls as `Shellbase`.

    Calls run in the event loop's default executor; cancelling a task (or `asyncio.timeout`) closes
    its connection at once, which stops a query or a machine's exec on the server.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float | None = None) -> None:
        #: The synchronous client underneath (same server, key and timeout).
        self.sync = Shellbase(url, api_key, timeout=timeout)
        self.contexts = AsyncContexts(self.sync.contexts)
        self.machines = AsyncMachines(self.sync.machines)
        self.tenants = AsyncTenants(self.sync.tenants)
        self.images = AsyncImages(self.sync.images)
        self.events = AsyncEvents(self.sync.events)
        self.webhooks = AsyncWebhooks(self.sync.webhooks)

    @property
    def url(self) -> str:
        return self.sync.url

    @property
    def url_source(self) -> UrlSource:
        return self.sync.url_source

    @property
    def timeout(self) -> float | None:
        return self.sync.timeout

    def __repr__(self) -> str:
        return f"<AsyncShellbase {self.url} (from {self.url_source})>"

    def context(self, name: str) -> AsyncContextHandle:
        return AsyncContextHandle(self.sync.context(name))

    async def usage(
        self,
        *,
        from_: str | None = None,
        to: str | None = None,
        group_by: Literal["context", "kind"] | None = None,
        tenant: str | None = None,
    ) -> Usage:
        return await run_sync(self.sync.usage, from_=from_, to=to, group_by=group_by, tenant=tenant)

    async def build(self, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
                    build_args: Mapping[str, str] | None = None, on_event: Callable[[BuildEvent], None] | None = None) -> BuildResult:
        """Builds a Dockerfile into the context `tag`; `on_event` sees steps and RUN output (called from a worker thread)."""
        return await run_sync(self.sync.build, context, tag, dockerfile=dockerfile, no_cache=no_cache, build_args=build_args, on_event=on_event)

    def build_stream(self, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
                     build_args: Mapping[str, str] | None = None) -> AsyncEventStream[BuildEvent, BuildResultEvent]:
        """The build's events as an async iterator (the request goes out on the first `__anext__`)."""
        return AsyncEventStream(lambda: self.sync.build_stream(context, tag, dockerfile=dockerfile, no_cache=no_cache, build_args=build_args))

    async def gc(self) -> GcResult:
        return await run_sync(self.sync.gc)

    async def backup(self, to: str, *, keep: int | None = None, s3_endpoint: str | None = None,
                     on_progress: Callable[[JsonObject], None] | None = None) -> BackupResult:
        return await run_sync(lambda: self.sync.backup(to, keep=keep, s3_endpoint=s3_endpoint, on_progress=on_progress))

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        json: object = None,
        body: Body | None = None,
        headers: Mapping[str, str] | None = None,
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> AsyncResponse:
        response = await run_sync(self.sync.request, method, path, query=query, json=json, body=body, headers=headers,
                                  accept=accept, timeout=timeout)
        return AsyncResponse(response)

    async def json(self, method: str, path: str, *, query: Mapping[str, QueryValue] | None = None, json: object = None) -> JsonObject:
        return await run_sync(self.sync.json, method, path, query=query, json=json)

    async def tunnel(self, path: str) -> Streams:
        """A TCP tunnel the API opens at `path` (a service's `/connect`): the connection's streams, or a typed error."""
        return await open_tunnel(self.sync._t, path)
