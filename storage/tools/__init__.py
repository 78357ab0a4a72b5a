"""Operator tools built on the ledger client: the `bookie shell` commands (they run no bookie themselves)."""
