"""Fixtures of the client's suite: a real custodyd started by the Go test
integration/python_test.go (TestPythonClient), which passes its sockets, its
work directory, the image it imported, a trust file and the wire types of
this build in the environment. A missing variable fails the suite: it is
meant to run under that test (make test), never to skip."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from custody_client import Client

ENV = ["CUSTODY_SUBMIT_SOCKET", "CUSTODY_CONTROL_SOCKET", "CUSTODY_BIN", "CUSTODY_TEST_DIR",
       "CUSTODY_TEST_IMAGE", "CUSTODY_TEST_TRUST", "CUSTODY_TEST_WIRE"]


@pytest.fixture(scope="session")
def env() -> Dict[str, str]:
    missing = [k for k in ENV if not os.environ.get(k)]
    if missing:
        pytest.fail("run this suite through `go test -run TestPythonClient ./integration/` (make test); "
                    "missing: " + ", ".join(missing), pytrace=False)
    return {k: os.environ[k] for k in ENV}


@pytest.fixture
def client(env: Dict[str, str]) -> Client:
    return Client(env["CUSTODY_SUBMIT_SOCKET"])


def custody(env: Dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The custody CLI against the test daemon (the operator's side: the
    client under test never holds the control socket)."""
    cmd = [env["CUSTODY_BIN"], "--control", env["CUSTODY_CONTROL_SOCKET"], "--submit", env["CUSTODY_SUBMIT_SOCKET"], *args]
    p = subprocess.run(cmd, capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout.decode()}{p.stderr.decode()}")
    return p


@pytest.fixture
def workdir(env: Dict[str, str], request: pytest.FixtureRequest) -> Path:
    d = Path(env["CUSTODY_TEST_DIR"]) / "py" / request.node.name
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def phase(env: Dict[str, str], workdir: Path) -> Callable[..., Path]:
    """phase(name, script, extra='', stage='build', tier='development')
    writes a phase file running script in the test image."""

    def make(name: str, script: str, extra: str = "", stage: str = "build", tier: str = "development") -> Path:
        p = workdir / f"{name}.yaml"
        p.write_text(textwrap.dedent(f"""\
            apiVersion: custody.dev/v1alpha1
            kind: Phase
            name: {name}
            stage: {stage}
            tier: {tier}
            image: {json.dumps(env["CUSTODY_TEST_IMAGE"])}
            command: ["/bin/sh", "-c", {json.dumps(script)}]
            output:
              path: /out
            resources:
              memory: 64Mi
              pids: 64
              wallTime: 20s
            """) + extra)
        return p

    return make


@pytest.fixture
def issue(env: Dict[str, str], workdir: Path) -> Callable[[Path], Path]:
    """issue(phase) has the operator issue a grant for it to ci-bot and
    returns the grant file."""

    def grant(phase_path: Path) -> Path:
        out = custody(env, "grant", "issue", str(phase_path), "--actor", "ci-bot", "--ttl", "5m").stdout
        g = workdir / (phase_path.stem + ".grant.json")
        g.write_bytes(out)
        return g

    return grant


@pytest.fixture(scope="session")
def wire_fields(env: Dict[str, str]) -> Dict[str, List[str]]:
    with open(env["CUSTODY_TEST_WIRE"], encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def schema(env: Dict[str, str]) -> Callable[[str], dict]:
    cache: Dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = json.loads(custody(env, "schema", name).stdout)
        return cache[name]

    return get
