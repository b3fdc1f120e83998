"""Decoding and encoding of custody's JSON wire format into dataclasses.

Each dataclass field names its JSON member in its metadata (``wire``), so
the Python names stay snake_case while the wire keeps custodyd's camelCase.
Members a newer custodyd adds are ignored on decode; the package's tests
check, against a real daemon's schemas and wire types, that none is missing.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import re
import sys
import typing
from typing import Any, Dict, Optional, Type, TypeVar

T = TypeVar("T")


def wire(name: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose JSON member is ``name``."""
    kw: Dict[str, Any] = {"metadata": {"wire": name}}
    if default is not dataclasses.MISSING:
        kw["default"] = default
    if factory is not dataclasses.MISSING:
        kw["default_factory"] = factory
    return dataclasses.field(**kw)


def wire_names(cls: type) -> Dict[str, str]:
    """The dataclass's JSON member names mapped to its field names."""
    return {f.metadata.get("wire", f.name): f.name for f in dataclasses.fields(cls)}


_FRACTION = re.compile(r"\.(\d+)")


def parse_time(s: str) -> _dt.datetime:
    """An RFC 3339 time as custodyd writes it (nanoseconds, ``Z``)."""
    s = s.replace("Z", "+00:00").replace("z", "+00:00")
    # Python before 3.11 takes at most microseconds.
    s = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], s, count=1)
    return _dt.datetime.fromisoformat(s)


def format_time(t: _dt.datetime) -> str:
    s = t.isoformat()
    return s.replace("+00:00", "Z")


def _hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def decode(tp: Any, value: Any) -> Any:
    """value (parsed JSON) as the Python type tp."""
    if value is None:
        return None
    tp = _unwrap_optional(tp)
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (list, typing.List):
        (item,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            raise TypeError(f"expected a JSON array, got {type(value).__name__}")
        return [decode(item, v) for v in value]
    if origin in (dict, typing.Dict):
        _, item = typing.get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise TypeError(f"expected a JSON object, got {type(value).__name__}")
        return {k: decode(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_wire(tp, value)
    if tp is bytes:
        return base64.b64decode(value)
    if tp is _dt.datetime:
        return parse_time(value)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(tp, type) and not isinstance(value, tp):
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value


def from_wire(cls: Type[T], obj: Any) -> T:
    """A dataclass instance from a JSON object; unknown members are ignored."""
    if not isinstance(obj, dict):
        raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(obj).__name__}")
    hints = _hints(cls)
    kw: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        name = f.metadata.get("wire", f.name)
        if name in obj:
            try:
                kw[f.name] = decode(hints[f.name], obj[name])
            except (TypeError, ValueError) as e:
                raise TypeError(f"{cls.__name__}.{name}: {e}") from None
    return cls(**kw)  # type: ignore[call-arg]


def encode(value: Any) -> Any:
    """value as JSON-ready data; dataclass fields that are None are left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_wire(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, _dt.datetime):
        return format_time(value)
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def to_wire(obj: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if v is None:
            continue
        out[f.metadata.get("wire", f.name)] = encode(v)
    return out


def field_type(cls: type, field_name: str) -> Optional[Any]:
    """The dataclass (or list-of-dataclass item) a field holds, if any."""
    tp = _unwrap_optional(_hints(cls)[field_name])
    if typing.get_origin(tp) in (list, typing.List):
        tp = _unwrap_optional(typing.get_args(tp)[0])
    return tp if dataclasses.is_dataclass(tp) else None
