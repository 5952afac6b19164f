"""Between the wire's camelCase JSON and the SDK's snake_case dataclasses (unknown fields are ignored)."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Mapping, TypeVar

T = TypeVar("T")

#: A JSON object as `json.loads` returns it.
JsonObject = dict[str, object]


def camel(name: str) -> str:
    """`exit_code` -> `exitCode`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake(name: str) -> str:
    """`exitCode` -> `exit_code`."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def from_wire(cls: type[T], data: object) -> T:
    """Builds dataclass `cls` from a JSON object, converting nested dataclasses and lists of them."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs: dict[str, object] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        key = camel(field.name)
        if key in data:
            kwargs[field.name] = _convert(hints[field.name], data[key])
    return cls(**kwargs)


def _convert(tp: object, value: object) -> object:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            if arg is not type(None) and (dataclasses.is_dataclass(arg) or typing.get_origin(arg) is list):
                return _convert(arg, value)
        return value
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(tp)
        return [_convert(item, v) for v in value]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_wire(tp, value)
    return value


def to_wire(options: Mapping[str, object]) -> JsonObject:
    """Keyword options to a camelCase body, without the ones left as None.

    Nested mappings (limits, quotas) get camelCase keys too, except `env`, whose names are the caller's.
    """
    out: JsonObject = {}
    for name, value in options.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and name != "env":
            value = to_wire(value)
        out[camel(name)] = value
    return out
