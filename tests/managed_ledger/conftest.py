"""Managed-ledger tests run on the in-process cluster of the ledger-client tests (real bookies, memory:// store)."""

from tests.client.conftest import cluster, wait_until  # noqa: F401  (fixture and helper re-used, not copied)
