"""A synchronous client of custodyd's submit socket (HTTP over a unix socket)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import IO, Any, Dict, Iterator, List, Optional, Union

from . import errors, events
from ._wire import from_wire, to_wire
from .types import (DEFAULT_SUBMIT_SOCKET, AdmitRequest, Authorization, AuthorizationsResponse, AdmitResponse, Keys, PhaseSource, Receipt, Result,
                    RunRequest, Status, WireEvent)

# Bounds on what the client reads, as custody's own client: totals, not
# lines, since a result lists every output file.
MAX_STREAM_BYTES = 1 << 30
MAX_RESPONSE_BYTES = 256 << 20
MAX_LOG_BYTES = 16 << 20


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over a unix socket."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("custodyd", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                s.settimeout(self.timeout)
            s.connect(self.socket_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


GrantLike = Union[bytes, str, Dict[str, Any], "os.PathLike[str]"]


class Client:
    """A client of custodyd's submit socket.

    It can do what the submit socket allows, and nothing more: dry-run a
    phase, run one under a grant or a standing authorization, watch and
    cancel its own runs, and fetch their results, receipts, outputs and
    logs. Every method opens its own connection, so a Client may be shared
    between threads. timeout (seconds) bounds each socket operation; None
    waits as long as a run takes.
    """

    def __init__(self, socket_path: Optional[str] = None, timeout: Optional[float] = None) -> None:
        self.socket_path = socket_path or os.environ.get("CUSTODY_SUBMIT_SOCKET") or DEFAULT_SUBMIT_SOCKET
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.socket_path!r})"

    # -- plumbing --

    def _send(self, method: str, path: str, body: Optional[Any] = None) -> "tuple[UnixHTTPConnection, http.client.HTTPResponse]":
        conn = UnixHTTPConnection(self.socket_path, timeout=self.timeout)
        try:
            data = None if body is None else json.dumps(body).encode("utf-8")
            headers = {"Content-Type": "application/json"} if data is not None else {}
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
            except OSError as e:
                raise ConnectionError(
                    f"cannot reach custodyd at {self.socket_path}: {e}; fix: check that custodyd runs and that this is "
                    "its submit socket (pass socket_path or set CUSTODY_SUBMIT_SOCKET)") from e
            if resp.status // 100 != 2:
                raw = resp.read(4 << 20)
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = None
                raise errors.from_body(parsed, resp.status, resp.getheader("Retry-After"))
            return conn, resp
        except BaseException:
            conn.close()
            raise

    def _json(self, method: str, path: str, body: Optional[Any] = None) -> Any:
        conn, resp = self._send(method, path, body)
        try:
            raw = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(raw) > MAX_RESPONSE_BYTES:
                raise errors.StreamError(f"{method} {path}: the answer is longer than {MAX_RESPONSE_BYTES} bytes")
            return json.loads(raw) if raw.strip() else None
        finally:
            conn.close()

    @staticmethod
    def _run_path(run_id: str, *rest: str) -> str:
        parts = [urllib.parse.quote(run_id, safe="")] + [urllib.parse.quote(r, safe="") for r in rest]
        return "/v1/runs/" + "/".join(parts)

    # -- the API --

    def status(self) -> Status:
        """The runner's identity, policy, quarantine and this caller's runs."""
        return from_wire(Status, self._json("GET", "/v1/status"))

    def admit(self, phase: Union[PhaseSource, str, "os.PathLike[str]"], actor: Optional[str] = None) -> AdmitResponse:
        """Dry-run admission of a phase (a PhaseSource or a phase file's path).

        A refusal is an answer, not an exception: admitted is False and
        checks say, requirement by requirement, what stopped it and the fix.
        """
        if not isinstance(phase, PhaseSource):
            phase = PhaseSource.from_file(phase)
        return from_wire(AdmitResponse, self._json("POST", "/v1/admit", to_wire(AdmitRequest.of(phase, actor))))

    def run(self, grant: GrantLike) -> "RunStream":
        """Submit a grant (its envelope as bytes, text or parsed JSON, or the
        path of a grant file) and return the run's stream.

        A grant refused before launch raises here (a GrantError subclass,
        with checks when admission refused). Iterate the stream for events,
        or call wait() for the result.
        """
        return self._start(RunRequest(grant=_grant_json(grant)))

    def run_authorized(self, authorization: str, phase: Union[PhaseSource, str, "os.PathLike[str]"]) -> "RunStream":
        """Run a phase under the operator's standing authorization named
        authorization: custodyd admits it, checks it against the
        authorization's envelope, mints a single-use grant and launches it.

        Refusals raise here: AuthorizationUnknownError (no such
        authorization, or revoked), ForbiddenError (this uid is not one of
        its submitters), RefusedError with checks (outside the envelope or
        not admitted), RateLimitedError with retry_after.
        """
        if not isinstance(phase, PhaseSource):
            phase = PhaseSource.from_file(phase)
        return self._start(RunRequest(authorization=authorization, phase=phase))

    def _start(self, req: RunRequest) -> "RunStream":
        conn, resp = self._send("POST", "/v1/runs", to_wire(req))
        return RunStream(self, conn, resp)

    def result(self, run_id: str) -> Result:
        """The recorded result of one of this caller's runs."""
        return from_wire(Result, self._json("GET", self._run_path(run_id)))

    def receipt(self, run_id: str) -> Receipt:
        """The signed receipt of one of this caller's runs."""
        return from_wire(Receipt, self._json("GET", self._run_path(run_id, "receipt")))

    def outputs(self, run_id: str, dest: Optional[IO[bytes]] = None) -> Optional[bytes]:
        """A run's retained outputs as a tar archive: written to dest (a
        binary file) when given, else returned as bytes."""
        conn, resp = self._send("GET", self._run_path(run_id, "outputs"))
        try:
            if dest is None:
                return resp.read()
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    return None
                dest.write(chunk)
        finally:
            conn.close()

    def log(self, run_id: str, stream: str = "stdout") -> bytes:
        """A finished run's kept stdout or stderr, whole (as its result's
        streams digest it), however much a stream left out."""
        if stream not in ("stdout", "stderr"):
            raise ValueError(f"stream {stream!r}: give stdout or stderr")
        conn, resp = self._send("GET", self._run_path(run_id, "logs", stream))
        try:
            data = resp.read(MAX_LOG_BYTES + 1)
        finally:
            conn.close()
        if len(data) > MAX_LOG_BYTES:
            raise errors.StreamError(f"run {run_id} {stream}: custodyd sent more than the {MAX_LOG_BYTES} bytes a run keeps")
        return data

    def cancel(self, run_id: str) -> None:
        """Cancel one of this caller's runs: the runner kills its whole
        process tree and records a cancelled result."""
        self._json("POST", self._run_path(run_id, "cancel"))

    def authorizations(self) -> List[Authorization]:
        """The standing authorizations this uid may run under: actor,
        stages, images, ceilings, egress and credentials, input roots,
        limits and what is left of them, validity window."""
        return from_wire(AuthorizationsResponse, self._json("GET", "/v1/authorizations")).authorizations

    def keys(self) -> Keys:
        """The runner's public keys, current and retired."""
        return from_wire(Keys, self._json("GET", "/v1/keys"))


def _grant_json(grant: GrantLike) -> Any:
    if isinstance(grant, dict):
        return grant
    if isinstance(grant, os.PathLike):
        with open(grant, "rb") as f:
            grant = f.read()
    if isinstance(grant, str) and not grant.lstrip().startswith("{"):
        with open(grant, "rb") as f:  # a path given as text
            grant = f.read()
    try:
        return json.loads(grant)
    except ValueError as e:
        raise errors.MalformedError(f"the grant is not JSON: {e}; give the envelope custody grant issue printed",
                                    code="malformed") from None


class RunStream:
    """A run's stream: iterate it for typed events (Started, Stdout,
    Stderr, DroppedOutput, ReceiptReady, Finished), or call wait().

    Closing the stream before the result (close(), or leaving a with
    block) drops the connection, which custodyd treats as a cancellation of
    the run. After the final event, run_id, result and receipt hold what
    the stream carried; an error the run ended in is raised once the
    Finished event carrying it has been yielded.
    """

    def __init__(self, client: Client, conn: UnixHTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._client = client
        self._conn = conn
        self._resp = resp
        self._read = 0
        self._done = False
        self.run_id: Optional[str] = None
        self.result: Optional[Result] = None
        self.receipt: Optional[Receipt] = None
        self.error: Optional[errors.CustodyError] = None
        self.stdout_bytes = 0
        self.stderr_bytes = 0

    def __enter__(self) -> "RunStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Drop the connection (a run still going is cancelled)."""
        self._done = True
        self._conn.close()

    def cancel(self) -> None:
        """Ask custodyd to cancel this run; the stream then ends with its
        cancelled result."""
        if self.run_id is None:
            raise errors.StreamError("the run has not started: nothing to cancel")
        self._client.cancel(self.run_id)

    def __iter__(self) -> Iterator[events.Event]:
        while not self._done:
            line = self._resp.readline(MAX_STREAM_BYTES - self._read + 1)
            self._read += len(line)
            if self._read > MAX_STREAM_BYTES:
                self.close()
                raise errors.StreamError(f"the run's stream is longer than {MAX_STREAM_BYTES} bytes")
            if not line:
                self.close()
                raise errors.StreamError(
                    f"run {self.run_id or '(not started)'}: the stream ended without a result; "
                    "fetch it with Client.result(run_id)")
            if not line.strip():
                continue
            try:
                ev = from_wire(WireEvent, json.loads(line))
            except (ValueError, TypeError) as e:
                self.close()
                raise errors.StreamError(f"the run's stream sent a line that is not an event: {e}") from None
            typed = self._typed(ev)
            yield typed
            if isinstance(typed, events.Finished):
                self.close()
                if typed.error is not None:
                    raise typed.error

    def _typed(self, ev: WireEvent) -> events.Event:
        if ev.type == "started":
            self.run_id = ev.run_id
            return events.Started(run_id=ev.run_id or "")
        if ev.type == "stdout":
            self.stdout_bytes += len(ev.data or b"")
            return events.Stdout(data=ev.data or b"")
        if ev.type == "stderr":
            self.stderr_bytes += len(ev.data or b"")
            return events.Stderr(data=ev.data or b"")
        if ev.type == "dropped" and ev.dropped is not None:
            return events.DroppedOutput(dropped=ev.dropped)
        if ev.type == "receipt":
            self.receipt = Receipt(envelope=ev.receipt or {}, bundle=ev.bundle or {},
                                   runner_public_key=(ev.data or b"").decode("utf-8"))
            return events.ReceiptReady(receipt=self.receipt)
        if ev.type in ("result", "error"):
            self.result = ev.result
            err: Optional[errors.CustodyError] = None
            if ev.error is not None:
                err = errors.from_body(to_wire(ev.error), result=ev.result)
            elif ev.quarantine is not None:
                err = errors.QuarantinedError("the run's cleanup was not verified: " + (ev.quarantine.reason or ""),
                                              result=ev.result)
            elif ev.type == "error":
                err = errors.InternalError("the run ended in an error", result=ev.result)
            self.error = err
            return events.Finished(result=ev.result, error=err, quarantine=ev.quarantine, dropped=ev.dropped)
        return events.Unknown(wire=ev)

    def wait(self) -> Result:
        """Read the stream to its end and return the run's result (raising
        the error it ended in, if any, with .result set)."""
        for _ in self:
            pass
        if self.result is None:
            raise errors.StreamError(f"run {self.run_id}: the stream ended without a result")
        return self.result
