"""A bookie core's Prometheus metrics (all prefixed ``bookie_``), and the reason label of a refused add."""

from __future__ import annotations

import collections

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from storage.latency import percentile

# How many of the latest journal fsyncs ``recent_fsync_ms`` summarises (the console's "fsync latency now").
RECENT_FSYNCS = 256

FAILURE_REASONS = {
    "DigestMismatchError": "digest_mismatch",
    "UnauthorizedError": "unauthorized",
    "LedgerFencedError": "fenced",
    "BookieShuttingDownError": "shutting_down",
    "BookieInternalError": "internal",
}


class BookieMetrics:
    """The core's Prometheus metrics, all prefixed ``bookie_``."""

    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.adds = Counter("bookie_add_entry", "Entries added and acknowledged", registry=r)
        self.add_failures = Counter("bookie_add_entry_failures", "Adds refused or failed", ["reason"], registry=r)
        self.reads = Counter("bookie_read_entry", "Entry read requests", registry=r)
        self.journal_fsync_latency = Histogram(
            "bookie_journal_fsync_latency_seconds",
            "Time to fdatasync one journal group",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.journal_group_size = Histogram(
            "bookie_journal_group_size_records",
            "Journal records made durable by one fsync",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
            registry=r,
        )
        self.journal_bytes = Counter("bookie_journal_written_bytes", "Bytes written to the journal", registry=r)
        self.entry_log_bytes = Counter("bookie_entry_log_written_bytes", "Bytes written to entry logs", registry=r)
        self.write_cache_hits = Counter("bookie_write_cache_hits", "Reads served from the write cache", registry=r)
        self.read_cache_hits = Counter("bookie_read_cache_hits", "Reads served from the read cache", registry=r)
        self.read_cache_misses = Counter("bookie_read_cache_misses", "Reads that went to disk", registry=r)
        self.checkpoint_latency = Histogram(
            "bookie_checkpoint_latency_seconds", "Time to flush ledger storage and move the journal mark", registry=r
        )
        self.compaction_reclaimed = Counter(
            "bookie_compaction_reclaimed_bytes", "Entry log bytes reclaimed by compaction", registry=r
        )
        self.write_cache_bytes = Gauge("bookie_write_cache_bytes", "Bytes in the write cache", registry=r)
        self.write_cache_waits = Counter(
            "bookie_write_cache_waits", "Adds that waited for a flush to make room in the write cache, by entry size "
            "(large: journal_large_record_bytes and up)", ["entry"], registry=r
        )
        self.ledgers = Gauge("bookie_ledgers", "Ledgers this bookie holds", registry=r)
        # The histogram says "since start"; an operator looking at a slow disk wants "lately".
        self._recent_fsync_s: collections.deque[float] = collections.deque(maxlen=RECENT_FSYNCS)

    def recent_fsync_ms(self) -> dict:
        """p50/p99/max of the last RECENT_FSYNCS journal fsyncs in ms (None when there were none), and their count."""
        samples = [s * 1000.0 for s in tuple(self._recent_fsync_s)]  # tuple(): one atomic copy under the GIL
        if not samples:
            return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
        return {"count": len(samples), "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
                "max_ms": max(samples)}

    def observe_group(self, records: int, nbytes: int, fsync_s: float | None) -> None:
        """Journal writer thread callback (prometheus metrics are thread-safe). ``fsync_s`` is None for a group
        written without fsync (journal_sync_data off): the fsync histogram's count is then the fsyncs done."""
        self.journal_group_size.observe(records)
        self.journal_bytes.inc(nbytes)
        if fsync_s is not None:
            self.journal_fsync_latency.observe(fsync_s)
            self._recent_fsync_s.append(fsync_s)
