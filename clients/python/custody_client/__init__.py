"""custody_client: a Python client of custodyd's submit socket.

Standard library only. See Client for the calls, events for what a run's
stream yields, errors for the exception of each error code custodyd sends.
"""

from . import errors, events
from .client import Client, RunStream, UnixHTTPConnection
from .errors import CustodyError
from .types import (DEFAULT_SUBMIT_SOCKET, AdmitResponse, Authorization, Check, Keys, PhaseSource, Receipt, Result, Status)

__version__ = "0.1.0"

__all__ = [
    "Client", "RunStream", "UnixHTTPConnection", "CustodyError", "errors", "events",
    "DEFAULT_SUBMIT_SOCKET", "AdmitResponse", "Authorization", "Check", "Keys", "PhaseSource", "Receipt", "Result", "Status",
]
