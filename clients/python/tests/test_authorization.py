"""Runs under an operator's standing authorization: the client sends the
phase and the authorization's name, custodyd admits it, checks it against the
authorization's envelope, mints a single-use grant and streams the run.

The Go test's policy holds the authorizations named in the environment:
CUSTODY_TEST_AUTHORIZATION (actor ci-bot, stage build, the test image,
this uid a submitter, four runs at once, room for every run here) and
CUSTODY_TEST_AUTHORIZATION_LIMITED (the same envelope, one run a day)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from conftest import custody
from custody_client import Client, errors, events, types


def _named(var: str) -> str:
    name = os.environ.get(var)
    if not name:
        pytest.fail(f"{var} is not set: the Go test's policy names the authorization", pytrace=False)
    return name


@pytest.fixture(scope="module")
def authorization() -> str:
    return _named("CUSTODY_TEST_AUTHORIZATION")


@pytest.fixture(scope="module")
def limited() -> str:
    return _named("CUSTODY_TEST_AUTHORIZATION_LIMITED")


def test_submit_under_an_authorization(client: Client, env, phase, authorization: str, workdir: Path) -> None:
    seen = []
    with client.run_authorized(authorization, phase("minted", "echo minted; echo ok > /out/r.txt")) as stream:
        out = b""
        for ev in stream:
            seen.append(type(ev))
            if isinstance(ev, events.Stdout):
                out += ev.data
    assert seen[0] is events.Started and seen[-1] is events.Finished and events.ReceiptReady in seen
    assert out == b"minted\n"
    res = stream.result
    assert res is not None and res.ok and res.actor == "ci-bot" and res.grant_id, res
    # The result and the receipt name the authorization and the policy it
    # was minted under.
    assert res.authorization is not None and res.authorization.name == authorization
    assert res.authorization.policy_digest == client.status().policy.digest
    assert client.result(stream.run_id).authorization == res.authorization
    rc = client.receipt(stream.run_id)
    assert rc.envelope == stream.receipt.envelope
    assert authorization in json.dumps(rc.statement()), "the receipt does not name the authorization"
    receipt = workdir / "receipt.json"
    rc.write(receipt)
    outputs = workdir / "outputs"
    with tarfile.open(fileobj=io.BytesIO(client.outputs(stream.run_id))) as tf:
        tf.extractall(outputs)
    v = custody(env, "verify", str(receipt), "--trust", env["CUSTODY_TEST_TRUST"], "--outputs", str(outputs), check=False)
    assert v.returncode == 0, v.stdout.decode() + v.stderr.decode()


def test_each_run_gets_its_own_grant(client: Client, phase, authorization: str) -> None:
    p = phase("twice", "true")
    a = client.run_authorized(authorization, p).wait()
    b = client.run_authorized(authorization, p).wait()
    assert a.ok and b.ok and a.grant_id and b.grant_id and a.grant_id != b.grant_id


def test_cancel_under_an_authorization(client: Client, phase, authorization: str) -> None:
    stream = client.run_authorized(authorization, phase("long", "echo up; exec sleep 600"))
    for ev in stream:
        if isinstance(ev, events.Stdout):
            stream.cancel()
    assert stream.result is not None and stream.result.status == types.STATUS_CANCELLED


def test_outside_the_envelope_is_refused_with_its_checks(client: Client, phase, authorization: str) -> None:
    # The authorization allows the build stage only.
    with pytest.raises(errors.RefusedError) as e:
        client.run_authorized(authorization, phase("wrongstage", "true", stage="test"))
    assert e.value.checks, "a refusal names each requirement"
    stage = [c for c in e.value.checks if "stage" in c.requirement]
    assert stage and all(c.detail for c in stage), [str(c) for c in e.value.checks]
    assert client.status().running == []


def test_unknown_authorization(client: Client, phase) -> None:
    with pytest.raises(errors.AuthorizationUnknownError) as e:
        client.run_authorized("no-such-authorization", phase("unknown", "true"))
    assert e.value.http_status == 403 and "no-such-authorization" in e.value.message


def test_rate_limit_says_when_to_retry(client: Client, phase, limited: str) -> None:
    assert client.run_authorized(limited, phase("first", "true")).wait().ok
    with pytest.raises(errors.RateLimitedError) as e:
        client.run_authorized(limited, phase("second", "true"))
    assert e.value.http_status == 429
    assert e.value.retry_after is not None and e.value.retry_after > 0


def test_list_authorizations(client: Client, env, authorization: str, limited: str) -> None:
    listed = {a.name: a for a in client.authorizations()}
    assert set(listed) == {authorization, limited}, listed
    a = listed[authorization]
    assert isinstance(a, types.Authorization) and a.actor == "ci-bot" and a.stages == ["build"]
    assert [i.digest for i in a.images] == [env["CUSTODY_TEST_IMAGE"]]
    assert a.limits.concurrent_runs == 4 and a.not_before is not None and a.not_after is not None
    assert a.ceilings.memory_bytes > 0 and a.remaining.grants_per_minute <= a.limits.grants_per_minute
    # The limited one was used up by the rate-limit case (they run in file order).
    assert listed[limited].remaining.runs_per_day == 0
