"""A bookie's network location, ``/zone/upgradeDomain``: what the bookie is started with and registers,
and what the ledger client's zone-aware placement reads back from the registration.

Both sides parse it with this one function, so the bookie refuses at start a location the client could
not place.
"""

from __future__ import annotations

# BookKeeper's default rack; a bookie started without --network-location, or registered without one, has it.
DEFAULT_NETWORK_LOCATION = "/default-zone/default-upgradedomain"


def parse_network_location(location: str) -> tuple[str, str]:
    """'/zone/upgradeDomain' -> (zone, upgrade_domain). Raises ValueError."""
    parts = location.split("/")
    if len(parts) != 3 or parts[0] != "" or not parts[1] or not parts[2]:
        raise ValueError(f"network location must look like /zone/upgradeDomain, got {location!r}")
    return parts[1], parts[2]
