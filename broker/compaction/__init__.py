"""Topic compaction: the latest value per key in a compacted ledger, its horizon, and reads through it."""
