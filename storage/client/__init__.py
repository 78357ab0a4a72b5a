"""Ledger client: create/add/read/recover/close/delete ledgers striped over zone-aware bookie ensembles."""
