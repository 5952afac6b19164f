"""The synchronous client: `Shellbase().context("demo").exec("ls")`."""

from __future__ import annotations

import os
import socket
from typing import IO, Callable, Literal, Mapping

from ._http import Body, QueryValue, Response, Transport, UrlSource
from ._wire import JsonObject, from_wire, to_wire
from .streams import final_event
from .context import ContextHandle, quote
from .events import Events, Webhooks
from .images import BuildStream, Images, Source, build, build_stream
from .machines import Machines
from .tunnel import open_tunnel
from .types import ApiKey, BackupResult, BuildEvent, BuildResult, Context, CreatedKey, CreatedTenant, GcResult, NetworkPolicy, PushResult, RegistryCredentials, Tenant, TenantChange, Usage


class Contexts:
    """`sb.contexts`: list, get, create and delete contexts (`sb.context(name)` is the handle)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    def list(self) -> list[Context]:
        contexts = self._t.json("GET", "/v1/contexts").get("contexts")
        return [from_wire(Context, c) for c in contexts] if isinstance(contexts, list) else []

    def get(self, name: str) -> Context:
        return from_wire(Context, self._t.json("GET", f"/v1/contexts/{quote(name)}"))

    def create(self, name: str, *, image: str | None = None, from_context: str | None = None, from_version: str | None = None,
               empty: bool | None = None) -> Context:
        """Creates a context from an image (default debian), or from another context's head or version;
        `empty=True` starts its tree empty (a volume for data, to mount into other work)."""
        source = {"context": from_context, "version": from_version} if from_context is not None else None
        body = to_wire({"name": name, "image": image, "from": source, "empty": empty})
        return from_wire(Context, self._t.json("POST", "/v1/contexts", json_body=body))

    def delete(self, name: str) -> None:
        """Deletes a context; garbage collection soon frees what only it held."""
        self._t.request("DELETE", f"/v1/contexts/{quote(name)}").close()

    def export(self, name: str, dest: str | os.PathLike[str] | IO[bytes], *, version: str | None = None, history: bool = False) -> None:
        """Writes the context as an archive (docs/formats.md) to `dest`, a path or a binary file, as it
        streams: its head, a `version`, or with `history` every version the head reaches."""
        query: dict[str, QueryValue] = {"version": version, "history": "true" if history else None}
        _save(self._t.request("GET", f"/v1/contexts/{quote(name)}/export", query=query, accept="application/x-tar"), dest)

    def export_oci(self, name: str, dest: str | os.PathLike[str] | IO[bytes], *, version: str | None = None, tag: str | None = None) -> None:
        """Writes the context (its head or a `version`) as an OCI image layout in a tar (docs/formats.md) to
        `dest`, a path or a binary file, as it streams; `tag` names it in the layout's index (default `latest`)."""
        query: dict[str, QueryValue] = {"version": version, "tag": tag}
        _save(self._t.request("GET", f"/v1/contexts/{quote(name)}/export/oci", query=query, accept="application/x-tar"), dest)

    def push(self, name: str, ref: str, *, version: str | None = None, credentials: RegistryCredentials | None = None,
             insecure: bool = False) -> PushResult:
        """Pushes the context (its head or a `version`) to a registry as an OCI image; `ref` is
        `registry/repository:tag`; `credentials` for a registry that wants them."""
        body = to_wire({"ref": ref, "version": version, "insecure": True if insecure else None,
                        "credentials": {"username": credentials.username, "password": credentials.password} if credentials else None})
        return from_wire(PushResult, self._t.json("POST", f"/v1/contexts/{quote(name)}/push", json_body=body))

    def import_archive(self, archive: str | os.PathLike[str] | bytes | IO[bytes], *, as_name: str | None = None) -> Context:
        """A new context from an archive `export` wrote (a path, bytes or a binary file), with its
        version ids; `as_name` names it (default: the archive's name). Admin key only."""
        if isinstance(archive, (str, os.PathLike)):
            with open(archive, "rb") as f:
                return self.import_archive(f, as_name=as_name)
        data = self._t.request("POST", "/v1/contexts/import", query={"as": as_name}, body=archive, headers={"Content-Type": "application/x-tar"}).json()
        return from_wire(Context, data if isinstance(data, dict) else {})


def _copy(response: Response, out: IO[bytes]) -> None:
    while True:
        chunk = response.read(1 << 16)
        if not chunk:
            return
        out.write(chunk)


def _save(response: Response, dest: str | os.PathLike[str] | IO[bytes]) -> None:
    """Writes a response's body to a path or a binary file, as it streams."""
    with response:
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as out:
                _copy(response, out)
        else:
            _copy(response, dest)


class Tenants:
    """`sb.tenants`: tenants and their API keys (admin key only)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(self, name: str, quotas: Mapping[str, float] | None = None, network: NetworkPolicy | None = None) -> CreatedTenant:
        """A tenant with its first key (shown only here); `quotas` by the API's names (snake_case accepted);
        `network` is its egress policy (default: the server's, SHELLBASE_EGRESS)."""
        body = to_wire({"name": name, "quotas": quotas, "network": network})
        return from_wire(CreatedTenant, self._t.json("POST", "/v1/tenants", json_body=body))

    def update(self, name: str, change: TenantChange) -> Tenant:
        """Changes the tenant's quotas (replaced whole) and egress policy (None: the server's default again);
        what `change` leaves out stays."""
        body: JsonObject = {}
        if "quotas" in change:
            body["quotas"] = to_wire(change["quotas"])
        if "network" in change:
            body["network"] = change["network"]
        return from_wire(Tenant, self._t.json("PUT", f"/v1/tenants/{quote(name)}", json_body=body))

    def set_network(self, name: str, network: NetworkPolicy | None) -> Tenant:
        """Sets the tenant's egress policy (None: the server's default again); its contexts' own policies are cut down to it."""
        return self.update(name, {"network": network})

    def create_key(self, name: str) -> CreatedKey:
        """Another key for the tenant (rotate: create, switch clients, revoke the old one)."""
        return from_wire(CreatedKey, self._t.json("POST", f"/v1/tenants/{quote(name)}/keys"))

    def list_keys(self, name: str) -> list[ApiKey]:
        keys = self._t.json("GET", f"/v1/tenants/{quote(name)}/keys").get("keys")
        return [from_wire(ApiKey, k) for k in keys] if isinstance(keys, list) else []

    def revoke_key(self, name: str, key_id: str) -> None:
        self._t.request("DELETE", f"/v1/tenants/{quote(name)}/keys/{quote(key_id)}").close()

    def revoke(self, name: str) -> None:
        """Revokes every key of the tenant; its data stays."""
        self._t.request("DELETE", f"/v1/tenants/{quote(name)}").close()

    def list(self) -> list[Tenant]:
        tenants = self._t.json("GET", "/v1/tenants").get("tenants")
        return [from_wire(Tenant, t) for t in tenants] if isinstance(tenants, list) else []


class Shellbase:
    """The shellbase client.

    `url` defaults to SHELLBASE_URL, then http://127.0.0.1:7070; `api_key` to SHELLBASE_API_KEY, then
    to the admin key file of a server on this host ($SHELLBASE_HOME/admin.key, /var/lib/shellbase by
    default). `timeout` is how many seconds a call waits for the server's answer (None: as long as the
    server takes; queries end by their own `timeout_ms`). Each call uses its own connection, so one
    client can be shared by threads.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float | None = None) -> None:
        self._t = Transport(url, api_key, timeout)
        self.contexts = Contexts(self._t)
        #: Machines (microVMs): `sb.machines.create()` then `machine.exec(...)`, `machine.fork(2)`.
        self.machines = Machines(self._t)
        #: OCI images: `sb.images.pull("docker.io/library/python:3.12-slim")`, then contexts of them.
        self.images = Images(self._t)
        self.tenants = Tenants(self._t)
        #: The tenant's events: `sb.events.list(context="demo")`, `for e in sb.events.stream(kinds=["version.committed"])`.
        self.events = Events(self._t)
        #: URLs the server POSTs the tenant's events to: `sb.webhooks.create(url, ["machine.state"])`.
        self.webhooks = Webhooks(self._t)

    @property
    def url(self) -> str:
        return self._t.url

    @property
    def url_source(self) -> UrlSource:
        """Where `url` came from, as connection errors say it."""
        return self._t.url_source

    @property
    def timeout(self) -> float | None:
        return self._t.timeout

    def __repr__(self) -> str:
        return f"<Shellbase {self.url} (from {self.url_source})>"

    def context(self, name: str) -> ContextHandle:
        """A handle on a context; nothing is sent until it is used (exec creates it if missing)."""
        return ContextHandle(self._t, name)

    def usage(
        self,
        *,
        from_: str | None = None,
        to: str | None = None,
        group_by: Literal["context", "kind"] | None = None,
        tenant: str | None = None,
    ) -> Usage:
        """What the caller's queries, services and machines cost over a time range (ISO times), and what they store."""
        query = {"from": from_, "to": to, "groupBy": group_by, "tenant": tenant}
        return from_wire(Usage, self._t.json("GET", "/v1/usage", query=query))

    def build(self, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
              build_args: Mapping[str, str] | None = None, on_event: Callable[[BuildEvent], None] | None = None) -> BuildResult:
        """Builds a Dockerfile into the context `tag` (steps the cache has are not run again). `context` is a
        directory (sent as a tar, its .dockerignore applied), a tar's bytes, or a binary file of one."""
        return build(self._t, context, tag, dockerfile=dockerfile, no_cache=no_cache, build_args=build_args, on_event=on_event)

    def build_stream(self, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
                     build_args: Mapping[str, str] | None = None) -> BuildStream:
        """The same build as a stream of events (steps, RUN output), ending with the result event."""
        return build_stream(self._t, context, tag, dockerfile=dockerfile, no_cache=no_cache, build_args=build_args)

    def gc(self) -> GcResult:
        """Runs garbage collection now (admin key); it also runs in the background."""
        return from_wire(GcResult, self._t.json("POST", "/v1/gc"))

    def backup(self, to: str, *, keep: int | None = None, s3_endpoint: str | None = None,
               on_progress: Callable[[JsonObject], None] | None = None) -> BackupResult:
        """Backs the whole server up (admin key) into `to`, a directory on the server's host or `s3://BUCKET/PREFIX`,
        while it keeps serving; only what the target lacks is copied. `on_progress` gets each progress line
        (`phase`, `done`, `total`, `bytes`). `shellbase restore` brings a backup back into an empty home."""
        body: JsonObject = {"to": to, **({"keep": keep} if keep is not None else {}), **({"s3Endpoint": s3_endpoint} if s3_endpoint else {})}
        with self._t.request("POST", "/v1/backups", json_body=body, accept="application/x-ndjson") as response:
            event = final_event(response, "backup", on_progress)
        return from_wire(BackupResult, {k: v for k, v in event.items() if k != "type"})

    def request(
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
    ) -> Response:
        """Any route (e.g. `/v1/openapi.json`), with the key; non-2xx answers raise typed errors. Close the Response."""
        return self._t.request(method, path, query=query, json_body=json, body=body, headers=headers, accept=accept, timeout=timeout)

    def json(self, method: str, path: str, *, query: Mapping[str, QueryValue] | None = None, json: object = None) -> JsonObject:
        """Any route answering JSON: its object ({} for 204)."""
        return self._t.json(method, path, query=query, json_body=json)

    def tunnel(self, path: str) -> socket.socket:
        """A TCP tunnel the API opens at `path` (a service's `/connect`): the connected socket, or a typed error."""
        return open_tunnel(self._t, path)
