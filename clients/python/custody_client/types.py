"""Typed requests and answers of custody's submit socket.

Each class mirrors one of custodyd's wire types member for member; the
package's tests check them against the JSON Schemas custody prints
(``custody schema result|admit|check|status|error``) and against the wire
types of a real daemon's build, so a member added on either side fails them.
Values that are observations (results, receipts) authorize nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ._wire import from_wire, to_wire, wire

DEFAULT_SUBMIT_SOCKET = "/run/custody/submit.sock"


# Admission verdicts (Check.verdict).
VERDICT_GRANTED = "granted"
VERDICT_CHOSEN = "chosen"
VERDICT_UNSUPPORTED = "unsupported"
VERDICT_NOT_GRANTED = "not-granted"

# Run statuses (Result.status).
STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_TIMEOUT = "timeout"
STATUS_OOM = "oom"
STATUS_PIDS_LIMIT = "pids-limit"
STATUS_REFUSED = "refused"
STATUS_CANCELLED = "cancelled"
STATUS_FAILED_TO_START = "failed-to-start"


@dataclass
class Check:
    """One admission requirement and its verdict."""

    requirement: str = wire("requirement", "")
    verdict: str = wire("verdict", "")
    code: str = wire("code", "")
    detail: str = wire("detail", "")
    fix: Optional[str] = wire("fix", None)

    def __str__(self) -> str:
        s = f"{self.requirement}: {self.verdict}"
        if self.detail:
            s += f" ({self.detail})"
        if self.fix:
            s += f"; fix: {self.fix}"
        return s


@dataclass
class PhaseSource:
    """A phase request as the client read it: the exact YAML bytes and the
    absolute directory its relative input sources resolve against."""

    yaml: bytes = wire("yaml")
    base_dir: str = wire("baseDir")
    # For a dry run only: inputs (by index) naming an earlier pipeline
    # stage's output that is not produced yet.
    resolved_at_run: Optional[List[int]] = wire("resolvedAtRun", None)

    @classmethod
    def from_file(cls, path: "os.PathLike[str] | str") -> "PhaseSource":
        """The phase file at path; its directory is the base directory."""
        p = os.path.abspath(os.fspath(path))
        with open(p, "rb") as f:
            data = f.read()
        return cls(yaml=data, base_dir=os.path.dirname(p))

    @classmethod
    def from_text(cls, text: "str | bytes", base_dir: str) -> "PhaseSource":
        """A phase given as YAML text; base_dir must be absolute."""
        if not os.path.isabs(base_dir):
            raise ValueError(f"base_dir {base_dir!r} is not absolute: give the absolute directory relative inputs resolve against")
        data = text.encode("utf-8") if isinstance(text, str) else text
        return cls(yaml=data, base_dir=base_dir)


@dataclass
class AdmitRequest:
    """A dry run of a phase (POST /v1/admit): the phase source's members and
    the actor a grant would be issued to (empty: the one actor this peer
    submits as)."""

    yaml: bytes = wire("yaml")
    base_dir: str = wire("baseDir")
    resolved_at_run: Optional[List[int]] = wire("resolvedAtRun", None)
    actor: Optional[str] = wire("actor", None)

    @classmethod
    def of(cls, phase: PhaseSource, actor: Optional[str] = None) -> "AdmitRequest":
        return cls(yaml=phase.yaml, base_dir=phase.base_dir, resolved_at_run=phase.resolved_at_run, actor=actor or None)


@dataclass
class AdmitResponse:
    """The dry run's decision: every requirement with its verdict, and the
    plan when admitted (as JSON data)."""

    admitted: bool = wire("admitted", False)
    plan: Optional[Dict[str, Any]] = wire("plan", None)
    checks: List[Check] = wire("checks", factory=list)

    def refusals(self) -> List[Check]:
        """The checks that stopped admission: unsupported (the platform cannot
        prove it enforces the requirement) or not-granted (the operator's
        policy does not allow it)."""
        return [c for c in self.checks if c.verdict not in (VERDICT_GRANTED, VERDICT_CHOSEN)]


@dataclass
class RunRequest:
    """POST /v1/runs: a grant envelope, or a phase under a named
    authorization (custodyd mints the single-use grant)."""

    grant: Optional[Any] = wire("grant", None)
    authorization: Optional[str] = wire("authorization", None)
    phase: Optional[PhaseSource] = wire("phase", None)


@dataclass
class PolicyStatus:
    path: str = wire("path", "")
    digest: Optional[str] = wire("digest", None)
    error: Optional[str] = wire("error", None)
    loaded_at: Optional[_dt.datetime] = wire("loadedAt", None)


@dataclass
class Quarantine:
    quarantined: bool = wire("quarantined", False)
    since: Optional[_dt.datetime] = wire("since", None)
    reason: Optional[str] = wire("reason", None)
    run_id: Optional[str] = wire("runId", None)


@dataclass
class PoolMiss:
    field: str = wire("field", "")
    profile: str = wire("profile", "")
    request: str = wire("request", "")


@dataclass
class PoolProfile:
    name: str = wire("name", "")
    size: int = wire("size", 0)
    idle: int = wire("idle", 0)
    state: str = wire("state", "")
    failures: int = wire("failures", 0)
    last_error: Optional[str] = wire("lastError", None)
    last_failure: Optional[_dt.datetime] = wire("lastFailure", None)
    next_try: Optional[_dt.datetime] = wire("nextTry", None)
    hits: int = wire("hits", 0)
    misses: int = wire("misses", 0)
    last_miss: Optional[PoolMiss] = wire("lastMiss", None)


@dataclass
class OpLogHead:
    seq: int = wire("seq", 0)
    last: str = wire("last", "")


@dataclass
class Status:
    """The daemon's view of itself; on the submit socket, running lists the
    caller's own runs."""

    runner_id: str = wire("runnerId", "")
    issuer_id: str = wire("issuerId", "")
    runner_public_key: str = wire("runnerPublicKey", "")
    issuer_public_key: str = wire("issuerPublicKey", "")
    policy: PolicyStatus = wire("policy", factory=PolicyStatus)
    quarantine: Quarantine = wire("quarantine", factory=Quarantine)
    profile: Optional[Dict[str, Any]] = wire("profile", None)
    running: List[str] = wire("running", factory=list)
    pool: List[PoolProfile] = wire("pool", factory=list)
    op_log: Optional[OpLogHead] = wire("opLog", None)
    # The HTTP API's version custodyd serves, "MAJOR.MINOR": a client may
    # rely on every route and field of its major version.
    api_version: str = wire("apiVersion", "")


@dataclass
class Runtime:
    path: str = wire("path", "")
    version: str = wire("version", "")
    sha256: str = wire("sha256", "")


@dataclass
class Input:
    source: str = wire("source", "")
    target: str = wire("target", "")
    digest: str = wire("digest", "")


@dataclass
class OutputFile:
    path: str = wire("path", "")
    sha256: str = wire("sha256", "")
    size: int = wire("size", 0)


@dataclass
class LeftOut:
    # Go-quoted path of an output entry the runner did not retain.
    name: str = wire("name", "")
    reason: str = wire("reason", "")


@dataclass
class Output:
    digest: str = wire("digest", "")
    path: str = wire("path", "")
    files: List[OutputFile] = wire("files", factory=list)
    bytes: int = wire("bytes", 0)
    left_out: Optional[List[LeftOut]] = wire("leftOut", None)
    left_out_total: Optional[int] = wire("leftOutTotal", None)


@dataclass
class StreamDigest:
    sha256: str = wire("sha256", "")
    bytes: int = wire("bytes", 0)
    truncated: bool = wire("truncated", False)


@dataclass
class Streams:
    stdout: StreamDigest = wire("stdout", factory=StreamDigest)
    stderr: StreamDigest = wire("stderr", factory=StreamDigest)


@dataclass
class Usage:
    peak_memory_bytes: int = wire("peakMemoryBytes", 0)
    cpu_time_millis: int = wire("cpuTimeMillis", 0)
    wall_millis: int = wire("wallMillis", 0)
    oom_kills: int = wire("oomKills", 0)
    memory_limit_bytes: int = wire("memoryLimitBytes", 0)
    pids_limit: int = wire("pidsLimit", 0)
    # -1: not watched; None: none.
    pids_limit_hits: Optional[int] = wire("pidsLimitHits", None)


@dataclass
class CleanupStep:
    name: str = wire("name", "")
    ok: bool = wire("ok", False)
    detail: Optional[str] = wire("detail", None)


@dataclass
class Cleanup:
    verified: bool = wire("verified", False)
    steps: List[CleanupStep] = wire("steps", factory=list)


@dataclass
class AuthorizationRef:
    """The standing authorization a run's grant was minted under, and the
    digest of the policy that held it."""

    name: str = wire("name", "")
    policy_digest: str = wire("policyDigest", "")


@dataclass
class Result:
    """What a run produced, recorded after the fact."""

    run_id: str = wire("runId", "")
    grant_id: Optional[str] = wire("grantId", None)
    actor: Optional[str] = wire("actor", None)
    # Set when the grant was minted under a standing authorization.
    authorization: Optional[AuthorizationRef] = wire("authorization", None)
    name: str = wire("name", "")
    stage: Optional[str] = wire("stage", None)
    status: str = wire("status", "")
    exit_code: int = wire("exitCode", 0)
    signal: Optional[str] = wire("signal", None)
    tier: str = wire("tier", "")
    unqualified: bool = wire("unqualified", False)
    runtime: Runtime = wire("runtime", factory=Runtime)
    runtime_sha256: Optional[str] = wire("runtimeSha256", None)
    config_sha256: Optional[str] = wire("configSha256", None)
    gate_sha256: Optional[str] = wire("gateSha256", None)
    seccomp_sha256: Optional[str] = wire("seccompSha256", None)
    user_namespace: bool = wire("userNamespace", False)
    image: str = wire("image", "")
    inputs: List[Input] = wire("inputs", factory=list)
    output: Optional[Output] = wire("output", None)
    usage: Usage = wire("usage", factory=Usage)
    streams: Optional[Streams] = wire("streams", None)
    cleanup: Optional[Cleanup] = wire("cleanup", None)
    refusal: Optional[List[Check]] = wire("refusal", None)
    error: Optional[str] = wire("error", None)
    started: Optional[_dt.datetime] = wire("started", None)
    finished: Optional[_dt.datetime] = wire("finished", None)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


@dataclass
class Receipt:
    """A run's signed receipt as custodyd returns it: the DSSE envelope over
    the in-toto statement, the same as a Sigstore bundle v0.3, and the PEM
    runner key that signed it. Verify it with ``custody verify`` (or cosign)
    against a trust file; this client does not check signatures."""

    envelope: Dict[str, Any] = wire("envelope", factory=dict)
    bundle: Dict[str, Any] = wire("bundle", factory=dict)
    runner_public_key: str = wire("runnerPublicKey", "")

    def statement(self) -> Dict[str, Any]:
        """The in-toto statement the envelope carries, unverified."""
        return json.loads(base64.b64decode(self.envelope["payload"]))

    def write(self, path: "os.PathLike[str] | str", bundle: bool = False) -> None:
        """Write the envelope (or the bundle) as JSON, e.g. for custody verify."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.bundle if bundle else self.envelope, f)


@dataclass
class Dropped:
    """Output bytes a run's stream left out because this client fell behind."""

    stdout: int = wire("stdout", 0)
    stderr: int = wire("stderr", 0)


@dataclass
class WireError:
    """An error as it crosses the wire (see errors.CustodyError)."""

    code: str = wire("code", "")
    message: str = wire("message", "")
    checks: Optional[List[Check]] = wire("checks", None)
    # When to retry a rate-limited request, as the Retry-After header says.
    retry_after_seconds: Optional[int] = wire("retryAfterSeconds", None)


@dataclass
class WireEvent:
    """One NDJSON line of a run's stream, as sent (see events for the typed
    form an iteration yields)."""

    type: str = wire("type", "")
    run_id: Optional[str] = wire("runId", None)
    data: Optional[bytes] = wire("data", None)
    result: Optional[Result] = wire("result", None)
    error: Optional[WireError] = wire("error", None)
    receipt: Optional[Dict[str, Any]] = wire("receipt", None)
    bundle: Optional[Dict[str, Any]] = wire("bundle", None)
    quarantine: Optional[Quarantine] = wire("quarantine", None)
    dropped: Optional[Dropped] = wire("dropped", None)


@dataclass
class AuthorizedImage:
    digest: str = wire("digest", "")
    name: Optional[str] = wire("name", None)


@dataclass
class AuthorizationCeilings:
    """The largest budgets a request under an authorization may ask for."""

    memory_bytes: int = wire("memoryBytes", 0)
    pids: int = wire("pids", 0)
    cpu: float = wire("cpu", 0.0)
    wall_time_millis: int = wire("wallTimeMillis", 0)
    output_bytes: int = wire("outputBytes", 0)
    output_files: int = wire("outputFiles", 0)
    tmp_bytes: int = wire("tmpBytes", 0)
    nofile: int = wire("nofile", 0)


@dataclass
class AuthorizationLimits:
    """Rate and volume limits, or (as Authorization.remaining) what is left
    of them now; a daily limit that is None is none."""

    grants_per_minute: int = wire("grantsPerMinute", 0)
    concurrent_runs: int = wire("concurrentRuns", 0)
    runs_per_day: Optional[int] = wire("runsPerDay", None)
    cpu_seconds_per_day: Optional[int] = wire("cpuSecondsPerDay", None)


@dataclass
class Authorization:
    """A standing authorization this uid may run under, as custodyd lists it."""

    name: str = wire("name", "")
    actor: str = wire("actor", "")
    stages: List[str] = wire("stages", factory=list)
    images: List[AuthorizedImage] = wire("images", factory=list)
    ceilings: AuthorizationCeilings = wire("ceilings", factory=AuthorizationCeilings)
    egress: List[str] = wire("egress", factory=list)
    credentials: List[str] = wire("credentials", factory=list)
    input_roots: List[str] = wire("inputRoots", factory=list)
    pipelines: bool = wire("pipelines", False)
    verifier: bool = wire("verifier", False)
    limits: AuthorizationLimits = wire("limits", factory=AuthorizationLimits)
    remaining: AuthorizationLimits = wire("remaining", factory=AuthorizationLimits)
    not_before: Optional[_dt.datetime] = wire("notBefore", None)
    not_after: Optional[_dt.datetime] = wire("notAfter", None)

    def __post_init__(self) -> None:
        # The wire leaves out a daily remainder of zero (as it leaves out a
        # daily limit that is none): under a daily limit, absent is none left.
        if self.limits.runs_per_day and self.remaining.runs_per_day is None:
            self.remaining.runs_per_day = 0
        if self.limits.cpu_seconds_per_day and self.remaining.cpu_seconds_per_day is None:
            self.remaining.cpu_seconds_per_day = 0


@dataclass
class AuthorizationsResponse:
    authorizations: List[Authorization] = wire("authorizations", factory=list)


@dataclass
class PublicKey:
    id: str = wire("id", "")
    pem: str = wire("pem", "")
    current: bool = wire("current", False)
    not_before: Optional[_dt.datetime] = wire("notBefore", None)
    not_after: Optional[_dt.datetime] = wire("notAfter", None)
    revoked_at: Optional[_dt.datetime] = wire("revokedAt", None)


@dataclass
class Keys:
    """The runner's public keys, current and retired, with their windows."""

    runners: List[PublicKey] = wire("runners", factory=list)
    issuers: List[PublicKey] = wire("issuers", factory=list)


__all__ = [n for n, v in list(globals().items()) if dataclasses.is_dataclass(v)] + [
    "DEFAULT_SUBMIT_SOCKET", "from_wire", "to_wire",
]
