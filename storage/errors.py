"""The storage layer's one exception hierarchy.

Every error that crosses a storage boundary is a ``StorageError``. Errors that
travel on the bookie wire carry a numeric ``code``; ``for_code`` maps a code
from a response frame back to its class, so the client raises exactly what
the bookie reported. kazoo, OSError and lmdb errors are translated into this
hierarchy where they enter (``raise ... from``), never re-exported.

``retriable`` says whether the same request may succeed if tried again (on
another bookie, or after an ensemble change); callers decide on that flag,
not on class names.
"""

from __future__ import annotations

_BY_CODE: dict[int, type["StorageError"]] = {}


def register(code: int):
    """Class decorator: bind a wire status code to an error class."""

    def bind(cls: type["StorageError"]) -> type["StorageError"]:
        if code in _BY_CODE:
            raise ValueError(f"status code {code} already bound to {_BY_CODE[code].__name__}")
        cls.code = code
        _BY_CODE[code] = cls
        return cls

    return bind


def for_code(code: int, message: str = "") -> "StorageError":
    """The exception instance for a status code received on the wire."""
    cls = _BY_CODE.get(code, StorageError)
    err = cls(message or cls.__doc__ or f"status {code}")
    if cls is StorageError:
        err.code = code
    return err


class StorageError(Exception):
    """Storage error."""

    code: int = -1
    retriable: bool = False


# ---- metadata store ------------------------------------------------------


class MetadataError(StorageError):
    """Metadata store error."""


@register(101)
class NoNodeError(MetadataError):
    """No such node in the metadata store."""


@register(102)
class NodeExistsError(MetadataError):
    """Node already exists in the metadata store."""


@register(103)
class BadVersionError(MetadataError):
    """Conditional write failed: the node's version changed."""


@register(104)
class NotEmptyError(MetadataError):
    """Node has children and cannot be deleted."""


@register(105)
class SessionExpiredError(MetadataError):
    """Metadata store session expired: ephemeral nodes are gone."""


@register(106)
class MetadataConnectionError(MetadataError):
    """Metadata store connection lost."""

    retriable = True


@register(107)
class BadArgumentsError(MetadataError):
    """Invalid arguments for a metadata store operation."""


@register(108)
class NoChildrenForEphemeralsError(MetadataError):
    """Ephemeral nodes may not have children."""


# ---- bookie wire status codes --------------------------------------------


class BookieError(StorageError):
    """Bookie error."""


@register(1)
class NoSuchLedgerError(BookieError):
    """No such ledger."""


@register(2)
class NoSuchEntryError(BookieError):
    """No such entry."""


@register(3)
class LedgerFencedError(BookieError):
    """Ledger is fenced: a recovery has taken it over from this writer."""


@register(4)
class LedgerClosedError(BookieError):
    """Ledger is closed; it accepts no more entries."""


@register(5)
class BookieReadOnlyError(BookieError):
    """Bookie is read-only and refuses writes."""

    retriable = True


@register(6)
class DigestMismatchError(BookieError):
    """Entry digest does not match its contents."""

    retriable = True


@register(7)
class UnauthorizedError(BookieError):
    """Wrong ledger password (master key)."""


class WrongLedgerPasswordError(UnauthorizedError):
    """The password given to open a ledger is not the one in its metadata (checked by the client, before
    any bookie is asked; a bookie that refuses a key answers UnauthorizedError itself)."""


@register(8)
class MalformedRequestError(BookieError):
    """Malformed request frame."""


@register(9)
class FrameTooLargeError(BookieError):
    """Frame exceeds the maximum frame size."""


@register(10)
class BookieTimeoutError(BookieError):
    """Request to a bookie timed out."""

    retriable = True


@register(11)
class BookieUnavailableError(BookieError):
    """Bookie is unreachable or closed the connection."""

    retriable = True


@register(12)
class BookieInternalError(BookieError):
    """Bookie failed internally while serving the request."""

    retriable = True


@register(13)
class EntryCorruptedOnDiskError(BookieError):
    """The bookie's stored copy of the entry is corrupt (bit rot)."""

    retriable = True


@register(14)
class BookieShuttingDownError(BookieError):
    """Bookie is shutting down."""

    retriable = True


@register(15)
class BadRequestError(BookieError):
    """A request field is outside its bound (BookKeeper's EBADREQ); the request is refused, the connection stays."""


# ---- client side ---------------------------------------------------------


class LedgerClientError(StorageError):
    """Ledger client error."""


@register(201)
class NotEnoughBookiesError(LedgerClientError):
    """Not enough bookies available to form the ensemble."""

    retriable = True


@register(202)
class PlacementPolicyError(LedgerClientError):
    """No ensemble satisfies the placement policy (zone rules)."""


@register(203)
class InvalidQuorumError(LedgerClientError):
    """Ensemble, write quorum and ack quorum must satisfy E >= Qw >= Qa >= 1."""


@register(204)
class LedgerRecoveryError(LedgerClientError):
    """Ledger recovery could not complete."""

    retriable = True


@register(205)
class ReadEntryError(LedgerClientError):
    """No replica could serve the entry."""

    retriable = True


@register(206)
class WriteError(LedgerClientError):
    """Entry could not be written to enough bookies."""

    retriable = True


@register(207)
class LedgerMetadataError(LedgerClientError):
    """Ledger metadata is missing or invalid."""


@register(208)
class ClientClosedError(LedgerClientError):
    """The ledger client or handle is closed."""


@register(209)
class ReplicationError(LedgerClientError):
    """A ledger could not be re-replicated this time (no good copy, no replacement bookie, a race lost)."""

    retriable = True


@register(210)
class TooManyPendingAddsError(LedgerClientError):
    """The ledger handle already has its maximum of adds in flight (BookKeeper's TooManyRequests)."""

    retriable = True


# ---- bookie start-up -----------------------------------------------------


class BookieStartupError(StorageError):
    """Bookie refused to start."""


@register(301)
class CookieMismatchError(BookieStartupError):
    """Bookie cookie does not match its directories or the metadata store."""


# ---- managed ledger ------------------------------------------------------


class ManagedLedgerError(StorageError):
    """Managed ledger error."""


@register(401)
class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner took this managed ledger over: it accepts no more writes."""


@register(402)
class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger (or cursor) is closed."""


@register(403)
class ManagedLedgerNotFoundError(ManagedLedgerError):
    """No managed ledger with that name."""


@register(404)
class CursorNotFoundError(ManagedLedgerError):
    """No cursor with that name."""


@register(405)
class InvalidManagedLedgerNameError(ManagedLedgerError):
    """The managed ledger or cursor name is not valid."""


@register(406)
class ManagedLedgerConfigError(ManagedLedgerError):
    """The managed ledger configuration is not valid."""


@register(407)
class CursorStateCorruptError(ManagedLedgerError):
    """A persisted cursor state cannot be decoded."""


class ManagedLedgerStateError(ManagedLedgerError):
    """A managed ledger or cursor was asked to make a state transition its table forbids (a bug, not an input)."""
