"""Magnetar's replicated ledger store: metadata store, bookies and the ledger client."""
