"""Where things live in the metadata store: BookKeeper's layout, so zkCli.sh shows familiar nodes.

Ledger metadata uses BookKeeper's hierarchical ledger manager: the ledger id,
zero-padded to 10 digits, splits into ``/ledgers/<2>/<4>/L<4>`` so no znode
ever has more than 10,000 children.
"""

LEDGERS_ROOT = "/ledgers"
AVAILABLE = "/ledgers/available"
READONLY = "/ledgers/available/readonly"
COOKIES = "/ledgers/cookies"
IDGEN = "/ledgers/idgen"
INSTANCE_ID = "/ledgers/INSTANCEID"
UNDER_REPLICATION = "/ledgers/underreplication"

# Children of /ledgers that are not ledger-id levels.
RESERVED = frozenset({"available", "cookies", "idgen", "INSTANCEID", "underreplication", "LAYOUT"})


def ledger_path(ledger_id: int) -> str:
    if ledger_id < 0:
        raise ValueError(f"ledger id must be >= 0, got {ledger_id}")
    digits = f"{ledger_id:010d}"
    return f"{LEDGERS_ROOT}/{digits[:2]}/{digits[2:6]}/L{digits[6:]}"


def ledger_id_from_path(path: str) -> int:
    """Inverse of ledger_path. Raises ValueError for a path that is not a ledger node."""
    parts = path.rstrip("/").split("/")
    if len(parts) != 5 or parts[1] != "ledgers" or not parts[4].startswith("L"):
        raise ValueError(f"not a ledger metadata path: {path!r}")
    return int(parts[2] + parts[3] + parts[4][1:])


def available_path(bookie_id: str) -> str:
    return f"{AVAILABLE}/{bookie_id}"


def readonly_path(bookie_id: str) -> str:
    return f"{READONLY}/{bookie_id}"


def cookie_path(bookie_id: str) -> str:
    return f"{COOKIES}/{bookie_id}"
