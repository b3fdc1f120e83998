"""Errors mirroring custodyd's stable error codes.

Every answer custodyd refuses carries a ``code``; this module has one
exception class per code, all subclasses of CustodyError, so a caller
branches with ``except`` and never on message text. A code this version
does not know raises CustodyError itself, with the code kept.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type

from ._wire import decode
from .types import Check, Result


class CustodyError(Exception):
    """An answer custodyd refused, or a run that ended in an error.

    code is the wire code, message custodyd's own words, checks the
    per-requirement diagnostics of a refused admission (empty otherwise),
    http_status the HTTP status (None for an error carried by a run's
    stream), and result the run's result when the run got that far.
    """

    code: str = ""

    def __init__(self, message: str, *, code: Optional[str] = None, checks: Optional[List[Check]] = None,
                 http_status: Optional[int] = None, result: Optional[Result] = None,
                 body: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.checks: List[Check] = list(checks or [])
        self.http_status = http_status
        self.result = result
        self.body = body or {}

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}" if self.code else self.message
        for c in self.checks:
            s += f"\n  {c}"
        return s


class ForbiddenError(CustodyError):
    """Not this socket's or this peer's to ask."""
    code = "forbidden"


class RefusedError(CustodyError):
    """Refused before anything ran; checks name each requirement."""
    code = "refused"


class QuarantinedError(CustodyError):
    """The runner takes no work, or a run's cleanup was not verified."""
    code = "quarantined"


class NotFoundError(CustodyError):
    """No such run, or not the caller's."""
    code = "not-found"


class BadRequestError(CustodyError):
    """A malformed request."""
    code = "bad-request"


class PolicyInvalidError(CustodyError):
    """No valid operator policy is in force: nothing is granted."""
    code = "policy-invalid"


class InternalError(CustodyError):
    """The runner failed."""
    code = "internal"


class RateLimitedError(CustodyError):
    """This uid asked too often, or used up a limit; retry_after is the
    number of seconds after which to ask again."""
    code = "rate-limited"

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class AuthorizationUnknownError(CustodyError):
    """The named authorization does not exist, or was revoked."""
    code = "authorization-unknown"


class GrantError(CustodyError):
    """A grant was refused; the subclass names why."""


class MalformedError(GrantError):
    """The grant envelope or statement is not a well-formed custody grant."""
    code = "malformed"


class TamperedError(GrantError):
    code = "tampered"


class WrongIssuerError(GrantError):
    code = "wrong-issuer"


class NotYetValidError(GrantError):
    code = "not-yet-valid"


class ExpiredError(GrantError):
    code = "expired"


class RevokedError(GrantError):
    code = "revoked"


class ReplayedError(GrantError):
    """The grant was already used: a grant launches once."""
    code = "replayed"


class WrongRunnerError(GrantError):
    code = "wrong-runner"


class PolicyChangedError(GrantError):
    code = "policy-changed"


class RuntimeChangedError(GrantError):
    code = "runtime-changed"


class ImageChangedError(GrantError):
    code = "image-changed"


class InputsChangedError(GrantError):
    code = "inputs-changed"


class TargetMismatchError(GrantError):
    code = "target-mismatch"


class NotAdmittedError(GrantError):
    code = "not-admitted"


class ActorNotAllowedError(GrantError):
    code = "actor-not-allowed"


class SubmitterNotAllowedError(GrantError):
    code = "submitter-not-allowed"


class StreamError(CustodyError):
    """A run's stream broke or was not custody's NDJSON (the client's own
    diagnosis, not a code custodyd sent)."""
    code = "stream"


def _all_classes() -> Dict[str, Type[CustodyError]]:
    out: Dict[str, Type[CustodyError]] = {}
    todo = [CustodyError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if "code" in vars(sub) and sub is not StreamError:
                out[sub.code] = sub
    return out


#: The exception class of each code custodyd sends.
BY_CODE: Dict[str, Type[CustodyError]] = _all_classes()


def from_body(body: Any, http_status: Optional[int] = None, retry_after_header: Optional[str] = None,
              result: Optional[Result] = None) -> CustodyError:
    """The exception for an error body ({"code", "message", "checks"})."""
    if not isinstance(body, dict) or not body.get("code"):
        return InternalError(f"custodyd answered HTTP {http_status} without an error code", http_status=http_status,
                             result=result)
    code = str(body["code"])
    message = str(body.get("message", ""))
    checks = decode(Optional[List[Check]], body.get("checks")) or []
    cls = BY_CODE.get(code, CustodyError)
    kw: Dict[str, Any] = {"code": code, "checks": checks, "http_status": http_status, "result": result, "body": body}
    if cls is RateLimitedError:
        return RateLimitedError(message, retry_after=_retry_after(body, retry_after_header), **kw)
    return cls(message, **kw)


def _retry_after(body: Dict[str, Any], header: Optional[str]) -> Optional[float]:
    v = body.get("retryAfterSeconds")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if header:
        try:
            return float(header.strip())
        except ValueError:
            return None  # an HTTP date: custodyd sends seconds
    return None
