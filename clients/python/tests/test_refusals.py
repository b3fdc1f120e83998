"""Refusals through the client: per-requirement diagnostics, typed errors."""

from __future__ import annotations

import json

import pytest

from custody_client import Client, errors, types


def test_refused_dry_run_names_each_requirement(client: Client, phase) -> None:
    ans = client.admit(phase("toobig", "true", extra="tmp:\n  maxBytes: 4Gi\n", tier="production"))
    assert ans.admitted is False and ans.plan is None
    refused = {c.requirement: c for c in ans.refusals()}
    # The production tier: this host cannot prove cgroup v2 enforcement.
    prod = refused.get("tier.production.cgroup2.memory")
    assert prod is not None, [str(c) for c in ans.checks]
    assert prod.verdict == types.VERDICT_UNSUPPORTED and prod.detail
    # A ceiling of the operator's policy.
    tmp = refused.get("tmp.maxBytes")
    assert tmp is not None, [str(c) for c in ans.checks]
    assert tmp.verdict == types.VERDICT_NOT_GRANTED and tmp.code and tmp.detail and tmp.fix
    # Every refusal says what it is, why, and the fix.
    assert all(c.code and c.detail and c.fix for c in ans.refusals()), [str(c) for c in ans.refusals()]


def test_unknown_phase_field_is_refused(client: Client, phase) -> None:
    with pytest.raises(errors.RefusedError) as e:
        client.admit(phase("unknownfield", "true", extra="privileged: true\n"))
    assert "privileged" in e.value.message and "fix" in e.value.message and e.value.http_status == 409


def test_dry_run_as_an_actor_i_do_not_submit_for(client: Client, phase) -> None:
    ans = client.admit(phase("stranger", "true"), actor="stranger")
    assert ans.admitted is False
    (check,) = ans.refusals()
    assert check.requirement == "actor" and check.code == "submitter-not-allowed"
    assert "stranger" in check.detail and check.fix


def test_tampered_grant_is_refused_before_launch(client: Client, phase, issue) -> None:
    g = json.loads(issue(phase("tamper", "true")).read_bytes())
    g["signatures"][0]["sig"] = g["signatures"][0]["sig"][::-1]
    with pytest.raises(errors.GrantError) as e:
        client.run(g)
    assert e.value.code in ("tampered", "malformed", "wrong-issuer"), e.value
    assert client.status().running == []


def test_not_a_grant(client: Client) -> None:
    with pytest.raises(errors.MalformedError):
        client.run(b"not json")
