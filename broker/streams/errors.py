"""The Stream API's errors on the broker side: one BrokerError subclass carrying a code of the shared table.

The codes and their gRPC statuses are the client's table (magnetar/streams/errors.py), so the two ends
cannot disagree; ``StreamApiError("WriterFenced", ...)`` refuses a code the table does not have.
"""

from __future__ import annotations

from broker.errors import BrokerError
from magnetar.streams.errors import CODES
from storage.errors import PlacementPolicyError


class StreamApiError(BrokerError):
    """An error the Stream API answers with its code (magnetar.streams.errors.CODES)."""

    def __init__(self, code_name: str, message: str, *, redirect: str | None = None):
        if code_name not in CODES:
            raise ValueError(f"unknown stream error code {code_name!r}")
        super().__init__(message)
        self.code_name = code_name
        self.status = CODES[code_name].status
        self.redirect = redirect


def placement_refusal(what: str, exc: BaseException) -> StreamApiError | None:
    """PlacementUnsatisfiable when ``exc`` is, or was raised from, the ledger client's PlacementPolicyError: the
    bookies cannot meet the namespace's placement, which no retry of the client fixes."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, PlacementPolicyError):  # the managed ledger may wrap it
        cause = cause.__cause__ or cause.__context__
    return None if cause is None else StreamApiError("PlacementUnsatisfiable", f"{what}: {cause}")


def invalid(message: str) -> StreamApiError:
    return StreamApiError("InvalidStreamRequest", message)
