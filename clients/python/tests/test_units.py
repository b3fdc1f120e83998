"""Pure logic: the error mapping and the wire decoding (no daemon)."""

from __future__ import annotations

import datetime as dt

from custody_client import errors, types
from custody_client._wire import from_wire, parse_time, to_wire


def test_rate_limited_carries_retry_after() -> None:
    e = errors.from_body({"code": "rate-limited", "message": "slow down", "retryAfterSeconds": 7}, 429, "9")
    assert isinstance(e, errors.RateLimitedError) and e.retry_after == 7.0 and e.http_status == 429
    e = errors.from_body({"code": "rate-limited", "message": "slow down"}, 429, "3")
    assert isinstance(e, errors.RateLimitedError) and e.retry_after == 3.0


def test_refusal_keeps_its_checks() -> None:
    body = {"code": "refused", "message": "no", "checks": [
        {"requirement": "stage", "verdict": "not-granted", "code": "x", "detail": "stage run is not allowed", "fix": "ask"}]}
    e = errors.from_body(body, 409)
    assert isinstance(e, errors.RefusedError) and e.checks[0].requirement == "stage" and e.checks[0].fix == "ask"
    assert "stage: not-granted" in str(e)


def test_unknown_code_is_kept() -> None:
    e = errors.from_body({"code": "something-new", "message": "m"}, 409)
    assert type(e) is errors.CustodyError and e.code == "something-new"
    assert isinstance(errors.from_body(b"junk", 502), errors.InternalError)


def test_times_with_nanoseconds() -> None:
    t = parse_time("2026-12-07T19:04:45.123456789Z")
    assert t == dt.datetime(2026, 12, 7, 19, 4, 45, 123456, tzinfo=dt.timezone.utc)


def test_round_trip_omits_absent_members() -> None:
    r = from_wire(types.RunRequest, {"authorization": "agent", "phase": {"yaml": "YTogYg==", "baseDir": "/w"}})
    assert r.phase is not None and r.phase.yaml == b"a: b" and r.grant is None
    assert to_wire(r) == {"authorization": "agent", "phase": {"yaml": "YTogYg==", "baseDir": "/w"}}


def test_no_daemon_names_the_socket_and_the_fix(tmp_path) -> None:
    import pytest
    from custody_client import Client

    sock = str(tmp_path / "none.sock")
    with pytest.raises(ConnectionError) as e:
        Client(sock).status()
    assert sock in str(e.value) and "CUSTODY_SUBMIT_SOCKET" in str(e.value)
