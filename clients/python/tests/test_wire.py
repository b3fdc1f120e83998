"""The dataclasses against the wire: the Go wire types of this build and the
JSON Schemas custody prints. A member on one side and not the other fails."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List

import pytest

from custody_client import errors, types
from custody_client._wire import field_type, wire_names

# Each Go wire type a submit-socket client sends or reads, and its dataclass.
BY_GO_NAME = {
    "AdmitRequest": types.AdmitRequest,
    "AdmitResponse": types.AdmitResponse,
    "Check": types.Check,
    "RunRequest": types.RunRequest,
    "PhaseSource": types.PhaseSource,
    "Event": types.WireEvent,
    "Error": types.WireError,
    "Dropped": types.Dropped,
    "Quarantine": types.Quarantine,
    "Status": types.Status,
    "PolicyStatus": types.PolicyStatus,
    "PoolProfile": types.PoolProfile,
    "PoolMiss": types.PoolMiss,
    "OpLogHead": types.OpLogHead,
    "Result": types.Result,
    "Runtime": types.Runtime,
    "Input": types.Input,
    "Output": types.Output,
    "OutputFile": types.OutputFile,
    "LeftOut": types.LeftOut,
    "Streams": types.Streams,
    "StreamDigest": types.StreamDigest,
    "Usage": types.Usage,
    "Cleanup": types.Cleanup,
    "CleanupStep": types.CleanupStep,
    "Receipt": types.Receipt,
    "Keys": types.Keys,
    "PublicKey": types.PublicKey,
    "AuthorizationRef": types.AuthorizationRef,
    "AuthorizationsResponse": types.AuthorizationsResponse,
    "Authorization": types.Authorization,
    "AuthorizedImage": types.AuthorizedImage,
    "AuthorizationCeilings": types.AuthorizationCeilings,
    "AuthorizationLimits": types.AuthorizationLimits,
}


def test_every_wire_type_has_its_dataclass(wire_fields: Dict[str, List[str]]) -> None:
    unmapped = sorted(set(wire_fields) - set(BY_GO_NAME))
    assert not unmapped, f"wire types without a dataclass in custody_client.types: {unmapped}"
    stale = sorted(set(BY_GO_NAME) - set(wire_fields))
    assert not stale, f"dataclasses for types the wire no longer has (or no longer reaches): {stale}"


def assert_members_match(go_name: str, wire_fields: Dict[str, List[str]]) -> None:
    assert go_name in wire_fields, f"the wire has no type {go_name}"
    py = set(wire_names(BY_GO_NAME[go_name]))
    go = set(wire_fields[go_name])
    assert py - go == set(), f"{BY_GO_NAME[go_name].__name__} has members the wire does not: {sorted(py - go)}"
    assert go - py == set(), f"{BY_GO_NAME[go_name].__name__} lacks wire members: {sorted(go - py)}"


@pytest.mark.parametrize("go_name", sorted(BY_GO_NAME))
def test_dataclass_members_match_the_wire(go_name: str, wire_fields: Dict[str, List[str]]) -> None:
    assert_members_match(go_name, wire_fields)


def _resolve(doc: dict, node: dict, schema: Callable[[str], dict]) -> dict:
    ref = node.get("$ref")
    if not ref:
        return node
    if ref.startswith("#/"):
        target = doc
        for part in ref[2:].split("/"):
            target = target[part]
        return _resolve(doc, target, schema)
    if ref == "check.json":
        return schema("check")
    return node  # a document the client keeps as JSON data (the plan)


def _compare(cls: type, doc: dict, node: dict, schema: Callable[[str], dict], where: str, seen: List[str]) -> None:
    node = _resolve(doc, node, schema)
    props = node.get("properties")
    if props is None:
        return
    py = wire_names(cls)
    assert set(py) == set(props), (f"{where} ({cls.__name__}): the schema has {sorted(set(props) - set(py))} "
                                   f"that the dataclass lacks, the dataclass {sorted(set(py) - set(props))} that the schema lacks")
    seen.append(where)
    for member, sub in props.items():
        inner = field_type(cls, py[member])
        if inner is None:
            continue
        sub = _resolve(doc, sub, schema)
        if sub.get("type") == "array" and "items" in sub:
            sub = _resolve(doc, sub["items"], schema)
        _compare(inner, doc, sub, schema, f"{where}.{member}", seen)


@pytest.mark.parametrize("name,cls,wrapper", [
    ("result", types.Result, None),
    ("admit", types.AdmitResponse, None),
    ("check", types.Check, None),
    ("status", types.Status, "status"),
    ("error", types.WireError, "error"),
])
def test_dataclass_members_match_the_schema(name: str, cls: type, wrapper: str, schema: Callable[[str], dict]) -> None:
    doc = schema(name)
    node = doc["properties"][wrapper] if wrapper else doc
    seen: List[str] = []
    _compare(cls, doc, node, schema, name, seen)
    assert seen, f"schema {name} compared nothing"
    if name == "result":
        # The nested objects were compared too, not only the top level.
        assert {"result.runtime", "result.usage", "result.output", "result.cleanup"} <= set(seen), seen


def test_one_exception_class_per_error_code(schema: Callable[[str], dict]) -> None:
    codes = set(schema("error")["properties"]["error"]["properties"]["code"]["enum"]) - {"usage"}  # usage: the CLI's own
    missing = sorted(c for c in codes if c not in errors.BY_CODE)
    assert not missing, f"error codes without an exception class: {missing}"
    for code in codes:
        cls = errors.BY_CODE[code]
        assert issubclass(cls, errors.CustodyError) and cls.code == code
    assert errors.BY_CODE["rate-limited"] is errors.RateLimitedError
    assert errors.BY_CODE["authorization-unknown"] is errors.AuthorizationUnknownError


def test_dataclasses_are_dataclasses() -> None:
    for cls in BY_GO_NAME.values():
        assert dataclasses.is_dataclass(cls), cls
