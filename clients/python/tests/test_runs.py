"""Runs under hand-issued grants, through the client, against a real custodyd."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from conftest import custody
from custody_client import Client, errors, events, types


def test_status(client: Client) -> None:
    st = client.status()
    assert st.runner_id and st.runner_public_key.startswith("-----BEGIN PUBLIC KEY-----")
    assert st.policy.digest and st.policy.digest.startswith("sha256:")
    assert st.quarantine.quarantined is False
    keys = client.keys()
    assert [k.pem for k in keys.runners if k.current] == [st.runner_public_key]
    assert [k.pem for k in keys.issuers if k.current] == [st.issuer_public_key]


def test_admit_granted(client: Client, phase) -> None:
    ans = client.admit(phase("fine", "true"))
    assert ans.admitted is True, ans.checks
    assert ans.plan, "an admitted dry run carries its plan"
    assert ans.checks and ans.refusals() == []


def _extract(tar_bytes: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tf:
        for m in tf.getmembers():
            assert not m.name.startswith("/") and ".." not in Path(m.name).parts, m.name
        tf.extractall(dest)


def test_run_stream_result_receipt_verify(client: Client, env, phase, issue, workdir: Path) -> None:
    g = issue(phase("evidence", "echo hello; echo warn >&2; echo built > /out/artifact.txt; mkdir /out/d; echo x > /out/d/y"))
    seen = []
    out, err = b"", b""
    with client.run(g) as stream:
        for ev in stream:
            seen.append(type(ev))
            if isinstance(ev, events.Stdout):
                out += ev.data
            elif isinstance(ev, events.Stderr):
                err += ev.data
    # The stream: started first, output, the receipt before the result, the result last.
    assert seen[0] is events.Started and seen[-1] is events.Finished
    assert seen.index(events.ReceiptReady) < seen.index(events.Finished)
    assert out == b"hello\n" and err == b"warn\n"
    res = stream.result
    assert isinstance(res, types.Result) and res.ok and res.exit_code == 0 and res.run_id == stream.run_id
    assert res.actor == "ci-bot" and res.image == env["CUSTODY_TEST_IMAGE"] and res.unqualified is True
    assert res.output is not None and res.output.digest.startswith("sha256:")
    assert sorted(f.path for f in res.output.files) == ["artifact.txt", "d/y"]
    assert res.cleanup is not None and res.cleanup.verified
    assert res.streams is not None and res.streams.stdout.sha256 == hashlib.sha256(out).hexdigest()

    # The recorded result and receipt are the stream's.
    again = client.result(stream.run_id)
    assert again.run_id == res.run_id and again.output.digest == res.output.digest and again.status == "ok"
    rc = client.receipt(stream.run_id)
    assert rc.envelope == stream.receipt.envelope and rc.bundle == stream.receipt.bundle
    assert rc.runner_public_key == client.status().runner_public_key
    st = rc.statement()
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    signed = json.dumps(st)
    assert res.grant_id and res.grant_id in signed, "the receipt binds the grant"
    assert res.output.digest.split(":", 1)[1] in signed, "the receipt binds the output digest"

    # The kept logs are the streamed bytes, whole.
    assert client.log(stream.run_id, "stdout") == out
    assert client.log(stream.run_id, "stderr") == err

    # custody verify accepts the receipt with the outputs fetched through the client...
    receipt = workdir / "receipt.json"
    rc.write(receipt)
    outputs = workdir / "outputs"
    _extract(client.outputs(stream.run_id), outputs)
    assert (outputs / "artifact.txt").read_bytes() == b"built\n"
    ok = custody(env, "verify", str(receipt), "--trust", env["CUSTODY_TEST_TRUST"], "--outputs", str(outputs), check=False)
    assert ok.returncode == 0, ok.stdout.decode() + ok.stderr.decode()
    # ...and refuses it once an output byte changed (exit 2: not authentic).
    (outputs / "artifact.txt").write_bytes(b"forged\n")
    bad = custody(env, "verify", str(receipt), "--trust", env["CUSTODY_TEST_TRUST"], "--outputs", str(outputs), check=False)
    assert bad.returncode == 2 and b"outputs" in bad.stdout, bad.stdout.decode() + bad.stderr.decode()

    # The outputs archive streams into a file as well.
    with open(workdir / "outputs.tar", "wb") as f:
        assert client.outputs(stream.run_id, f) is None
    assert tarfile.is_tarfile(workdir / "outputs.tar")


def test_grant_replays_zero_times(client: Client, phase, issue) -> None:
    g = issue(phase("once", "true"))
    assert client.run(g).wait().ok
    with pytest.raises(errors.ReplayedError) as e:
        client.run(g)
    assert isinstance(e.value, errors.GrantError) and e.value.code == "replayed" and e.value.http_status == 409


def test_failed_workload_is_a_result_not_an_error(client: Client, phase, issue) -> None:
    res = client.run(issue(phase("fails", "exit 3"))).wait()
    assert res.status == types.STATUS_FAILED and res.exit_code == 3


def test_cancel_a_running_phase(client: Client, phase, issue) -> None:
    stream = client.run(issue(phase("cancel", "echo up; exec sleep 600")))
    cancelled = False
    final = None
    for ev in stream:
        if isinstance(ev, events.Stdout) and not cancelled:
            assert ev.data == b"up\n"
            assert stream.run_id in client.status().running
            stream.cancel()
            cancelled = True
        if isinstance(ev, events.Finished):
            final = ev
    assert cancelled and final is not None
    assert final.result.status == types.STATUS_CANCELLED, final.result
    assert final.result.cleanup is not None and final.result.cleanup.verified
    assert client.result(stream.run_id).status == types.STATUS_CANCELLED
    assert stream.run_id not in client.status().running
    # Cancelling it again finds nothing running; an unknown run is not found.
    with pytest.raises(errors.NotFoundError):
        client.cancel("run-that-does-not-exist")


def test_closing_the_stream_cancels_the_run(client: Client, phase, issue) -> None:
    stream = client.run(issue(phase("dropped", "echo up; exec sleep 600")))
    for ev in stream:
        if isinstance(ev, events.Stdout):
            break
    run_id = stream.run_id
    stream.close()  # the client goes away mid-run
    # custodyd notices the dropped connection, kills the run and records it
    # cancelled; the wait is bounded by the phase's own wall time (20s),
    # which would record "timeout" instead.
    res = None
    for _ in range(600):
        try:
            res = client.result(run_id)
        except errors.NotFoundError:
            res = None
        if res is not None and res.status:
            break
        time.sleep(0.1)
    assert res is not None and res.status == types.STATUS_CANCELLED, res
    assert run_id not in client.status().running


def test_not_found(client: Client) -> None:
    with pytest.raises(errors.NotFoundError) as e:
        client.result("no-such-run")
    assert e.value.http_status == 404 and e.value.message
