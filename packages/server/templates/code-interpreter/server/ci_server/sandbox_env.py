"""The sandbox-wide environment: this server's own, plus the variables the sandbox was created with.

The server starts when the image's template is made, long before any sandbox exists, so the
variables of `Sandbox.create(..., {envs})` cannot be in its environment. The sandbox's router
(shellbase's E2B API) writes them to ENV_FILE when it makes the sandbox:

    {"version": 1, "envs": {"NAME": "value", ...}}

It is read again whenever it changed (by mtime, size and inode), at the start of each execution
and of each kernel. A missing file is no variables; one that cannot be read or parsed is logged
and counts as none. Names that are not shell variable names are skipped (every kernel must be
able to set them).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Optional

from .commands import ENV_NAME

log = logging.getLogger(__name__)

ENV_FILE = "/run/shellbase/sandbox-envs.json"
VERSION = 1


class SandboxEnv:
    def __init__(self, own: dict[str, str], path: str = ENV_FILE) -> None:
        self.own = own
        self.path = path
        self._lock = threading.Lock()
        self._seen: Optional[tuple[int, int, int]] = None
        self._file: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        """The sandbox-wide variables now: the server's own, overridden by the file's."""
        return {**self.own, **self._read()}

    def _read(self) -> dict[str, str]:
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._seen, self._file = None, {}
                return {}
            except OSError as e:
                log.warning("cannot stat %s: %s", self.path, e)
                return self._file
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key != self._seen:
                self._seen, self._file = key, self._parse()
            return self._file

    def _parse(self) -> dict[str, str]:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            log.warning("ignoring %s: %s", self.path, e)
            return {}
        if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("envs"), dict):
            log.warning("ignoring %s: not {\"version\": %d, \"envs\": {...}}", self.path, VERSION)
            return {}
        return {k: v for k, v in doc["envs"].items()
                if isinstance(k, str) and isinstance(v, str) and ENV_NAME.fullmatch(k)}
