"""The lines of an execution's stream, and the mapping from a Jupyter MIME bundle to a `result`.

Every line is one JSON object with a `type`:
  number_of_executions {execution_count}   the cell's In[n]
  stdout | stderr      {text, timestamp}   timestamp: ISO 8601, UTC
  result               {is_main_result, text?, html?, ..., extra?}
  error                {name, value, traceback}   traceback: one string
  keepalive, end_of_execution
A `result` carries only the known fields below (the SDK puts any other key in `Result.extra`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

Event = dict[str, Any]

# MIME type -> result field. Anything else goes, keyed by its MIME type, into `extra`.
MIME_FIELDS: dict[str, str] = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}

# Binary formats arrive base64-encoded; Jupyter may wrap or end them with newlines.
_BASE64_FIELDS = {"png", "jpeg", "pdf"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def strip_quotes(text: str) -> str:
    """Remove one pair of enclosing quotes: the repr of a string ('x' or "x") comes back bare."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def result(bundle: dict[str, Any], is_main_result: bool) -> Event:
    event: Event = {"type": "result", "is_main_result": is_main_result}
    extra: dict[str, Any] = {}
    for mime, value in bundle.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
            continue
        if field == "text" and isinstance(value, str):
            value = strip_quotes(value)
        elif field in _BASE64_FIELDS and isinstance(value, str):
            value = "".join(value.split())
        elif field in ("data", "chart") and isinstance(value, str):
            # A formatter may hand the E2B types over as JSON text; the SDK expects the object.
            try:
                value = json.loads(value)
            except ValueError:
                pass
        event[field] = value
    if extra:
        event["extra"] = extra
    return event


def stream(name: str, text: str) -> Event:
    return {"type": name, "text": text, "timestamp": now()}


def error(name: str, value: str, traceback: str) -> Event:
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


NUMBER = "number_of_executions"


def execution_count(count: int) -> Event:
    return {"type": NUMBER, "execution_count": count}


KEEPALIVE: Event = {"type": "keepalive"}
END: Event = {"type": "end_of_execution"}
