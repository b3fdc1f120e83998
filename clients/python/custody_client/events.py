"""The typed events of a run's stream (NDJSON on the wire)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .types import Dropped, Quarantine, Receipt, Result, WireEvent


@dataclass
class Event:
    """Base class of every event a run's stream yields."""


@dataclass
class Started(Event):
    """The run was admitted and launched; run_id names it from now on."""
    run_id: str


@dataclass
class Stdout(Event):
    """Bytes the workload wrote to its stdout."""
    data: bytes


@dataclass
class Stderr(Event):
    """Bytes the workload wrote to its stderr."""
    data: bytes


@dataclass
class DroppedOutput(Event):
    """This client fell behind: output bytes so far left out of this stream
    (the runner kept them; Client.log fetches the whole copy)."""
    dropped: Dropped


@dataclass
class ReceiptReady(Event):
    """The run's signed receipt, sent before its result."""
    receipt: Receipt


@dataclass
class Finished(Event):
    """The final event: the run's result. error is set when the run ended in
    an error (then the stream raises it after this event), quarantine when
    the run left the runner quarantined, dropped when output was left out."""
    result: Optional[Result]
    error: Optional[Exception] = None
    quarantine: Optional[Quarantine] = None
    dropped: Optional[Dropped] = None


@dataclass
class Unknown(Event):
    """An event type this client does not know (a newer custodyd)."""
    wire: WireEvent
