"""OCI images (pull, import, list, delete) and Dockerfile builds, with the standard library only."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path
from typing import IO, Callable, Mapping, Union

from ._http import Transport
from ._wire import JsonObject, from_wire
from .streams import EventStream, final_event
from .types import BuildEvent, BuildResult, BuildResultEvent, BuildStepDone, BuildStepStart, Image, ImageProgress, OutputEvent

#: A build context or an archive: a directory (or file) path, bytes, or a binary file.
Source = Union[str, os.PathLike, bytes, IO[bytes]]


def _pattern(p: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(p):
        c = p[i]
        if c == "*":
            if p[i + 1 : i + 2] == "*":
                i += 1
                if p[i + 1 : i + 2] == "/":
                    i += 1
                    out += "(?:.*/)?"
                else:
                    out += ".*"
            else:
                out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[" and "]" in p[i + 1 :]:
            end = p.index("]", i + 1)
            cls = p[i + 1 : end]
            out += "[" + ("^" + cls[1:] if cls[:1] in ("!", "^") else cls) + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile(f"^{out}$")


def _clean(path: str) -> str:
    parts: list[str] = []
    for s in path.split("/"):
        if s in ("", "."):
            continue
        if s == "..":
            if parts:
                parts.pop()
        else:
            parts.append(s)
    return "/".join(parts)


class Dockerignore:
    """`.dockerignore` as Docker reads it (the same rules as the server's): the last matching pattern decides,
    `!` re-includes, a pattern matching a directory covers what is below it."""

    def __init__(self, text: str) -> None:
        self._rules: list[tuple[re.Pattern[str], bool]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            p = _clean(line[1:].strip() if negate else line)
            if p:
                self._rules.append((_pattern(p), negate))

    def ignores(self, path: str) -> bool:
        parts = _clean(path).split("/")
        out = False
        for rx, negate in self._rules:
            if any(rx.match("/".join(parts[:n])) for n in range(len(parts), 0, -1)):
                out = not negate
        return out

    def prunes(self, directory: str) -> bool:
        return self.ignores(directory) and not any(negate for _, negate in self._rules)


def tar_context(directory: str | os.PathLike, dockerfile: str = "Dockerfile") -> bytes:
    """A directory as a build context: a tar of what its .dockerignore keeps (the Dockerfile always goes)."""
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    ignore_file = root / ".dockerignore"
    ignore = Dockerignore(ignore_file.read_text() if ignore_file.exists() else "")
    always = {dockerfile, ".dockerignore"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir
            kept = []
            for d in sorted(dirnames):
                rel = f"{rel_dir}/{d}" if rel_dir else d
                if (root / rel).is_symlink():
                    filenames.append(d)
                elif not ignore.prunes(rel):
                    kept.append(d)
                    if not ignore.ignores(rel):
                        tar.add(root / rel, arcname=rel, recursive=False)
            dirnames[:] = kept
            for f in sorted(filenames):
                rel = f"{rel_dir}/{f}" if rel_dir else f
                if rel in always or not ignore.ignores(rel):
                    info = tar.gettarinfo(str(root / rel), arcname=rel)
                    if info.isfile():
                        with open(root / rel, "rb") as fh:
                            tar.addfile(info, fh)
                    elif info.issym():
                        tar.addfile(info)
    return buf.getvalue()


def _body(source: Source, dockerfile: str = "Dockerfile") -> bytes | IO[bytes]:
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return tar_context(path, dockerfile) if path.is_dir() else path.read_bytes()
    return source


def parse_build_event(event: JsonObject) -> BuildEvent:
    kind = event.get("type")
    if kind == "step":
        return from_wire(BuildStepStart, event)
    if kind == "stepDone":
        return from_wire(BuildStepDone, event)
    if kind == "result":
        return from_wire(BuildResultEvent, event)
    return from_wire(OutputEvent, event)


BuildStream = EventStream[BuildEvent, BuildResultEvent]


def build_stream(transport: Transport, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
                 build_args: Mapping[str, str] | None = None) -> BuildStream:
    query: dict[str, object] = {"tag": tag, "dockerfile": dockerfile, "noCache": True if no_cache else None,
                                "buildArg": [f"{k}={v}" for k, v in (build_args or {}).items()] or None}
    response = transport.request("POST", "/v1/builds", query=query, body=_body(context, dockerfile or "Dockerfile"),  # type: ignore[arg-type]
                                 headers={"Content-Type": "application/x-tar"}, accept="application/x-ndjson")
    return EventStream(response, parse_build_event, BuildResultEvent)


def build(transport: Transport, context: Source, tag: str, *, dockerfile: str | None = None, no_cache: bool = False,
          build_args: Mapping[str, str] | None = None, on_event: Callable[[BuildEvent], None] | None = None) -> BuildResult:
    with build_stream(transport, context, tag, dockerfile=dockerfile, no_cache=no_cache, build_args=build_args) as stream:
        for event in stream:
            if on_event:
                on_event(event)
            if isinstance(event, BuildResultEvent):
                return BuildResult(context=event.context, version=event.version, steps=event.steps)
    raise RuntimeError("the build ended without a result")


class Images:
    """`sb.images`: the caller's tenant's OCI images."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def _ndjson(self, method: str, path: str, final: str, on_progress: Callable[[ImageProgress], None] | None, **kw: object) -> JsonObject:
        with self._t.request(method, path, accept="application/x-ndjson", **kw) as response:  # type: ignore[arg-type]
            return final_event(response, final, (lambda e: on_progress(from_wire(ImageProgress, e))) if on_progress else None)

    def pull(self, ref: str, *, insecure: bool = False, on_progress: Callable[[ImageProgress], None] | None = None) -> Image:
        """Pulls an image from its registry (`insecure`: plain HTTP; loopback registries always are)."""
        body = {"ref": ref, **({"insecure": True} if insecure else {})}
        return from_wire(Image, self._ndjson("POST", "/v1/images/pull", "image", on_progress, json_body=body)["image"])

    def import_archive(self, archive: Source, *, ref: str | None = None, on_progress: Callable[[ImageProgress], None] | None = None) -> list[Image]:
        """Imports the images of a `docker save` or OCI layout archive (a tar, or a layout directory); `ref` names its only image."""
        event = self._ndjson("POST", "/v1/images/import", "images", on_progress, query={"ref": ref}, body=_body(archive),
                             headers={"Content-Type": "application/x-tar"})
        return [from_wire(Image, i) for i in event["images"]]  # type: ignore[union-attr]

    def delete(self, ref: str) -> None:
        """Forgets a reference; contexts made of it keep their files."""
        self._t.request("DELETE", "/v1/images/" + "/".join(_quote(p) for p in ref.split("/"))).close()

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    def list(self) -> list[Image]:
        return [from_wire(Image, i) for i in self._t.json("GET", "/v1/images").get("images", [])]  # type: ignore[union-attr]


def _quote(part: str) -> str:
    from urllib.parse import quote

    return quote(part, safe="")
