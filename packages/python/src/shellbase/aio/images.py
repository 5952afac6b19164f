"""OCI images for asyncio: the synchronous calls run in threads (see _run.py)."""

from __future__ import annotations

from typing import Callable

from ..images import Images, Source
from ..types import Image, ImageProgress
from ._run import run_sync


class AsyncImages:
    """`sb.images` of the asyncio client."""

    def __init__(self, images: Images) -> None:
        self._s = images

    async def pull(self, ref: str, *, insecure: bool = False, on_progress: Callable[[ImageProgress], None] | None = None) -> Image:
        return await run_sync(self._s.pull, ref, insecure=insecure, on_progress=on_progress)

    async def import_archive(self, archive: Source, *, ref: str | None = None, on_progress: Callable[[ImageProgress], None] | None = None) -> list[Image]:
        return await run_sync(self._s.import_archive, archive, ref=ref, on_progress=on_progress)

    async def delete(self, ref: str) -> None:
        await run_sync(self._s.delete, ref)

    # Last: a method named `list` shadows the builtin in the class body's annotations after it.
    async def list(self) -> list[Image]:
        return await run_sync(self._s.list)
