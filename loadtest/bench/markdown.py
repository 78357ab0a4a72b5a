"""docs/BENCHMARKS.md from the results of ``python -m loadtest.bench all``: method, machine, figures, charts.

Every table row puts a figure beside the reference measured in the same run; targets say met or not met
from the numbers, never by hand. Charts are PNGs drawn with matplotlib's Agg backend.
"""

from __future__ import annotations

from pathlib import Path

from loadtest.bench import explanations as explain
from loadtest.bench.hostile_report import hostile_section as _hostile
from loadtest.bench.hostile_report import hostile_targets as _hostile_targets
from loadtest.bench.markdown_cells import floor_pct as _floor_pct
from loadtest.bench.markdown_cells import number as _n
from loadtest.bench.markdown_cells import reproduce as _reproduce
from loadtest.bench.markdown_cells import size_text as _size
from loadtest.bench.markdown_cells import table as _table
from loadtest.bench.markdown_cells import verdict as _verdict
from loadtest.bench.page import NEMESIS_HEADING, existing_section, run_time
from loadtest.bench.peers import STREAM_TARGETS

CHART_SIZES = "bench-throughput-by-size.png"
CHART_CDF = "bench-latency-cdf.png"
SYSTEMS = {"magnetar": "Magnetar + magnetar client", "pulsar_client": "Magnetar + pulsar-client",
           "pulsar_client_deep": "Magnetar + pulsar-client, 50,000 pending",
           "pulsar_client_no_fsync": "Magnetar + pulsar-client, journal fsync off",
           "nats_jetstream": "NATS JetStream (nats-py)", "rabbitmq_stream": "RabbitMQ stream (rstream)",
           "rabbitmq_quorum": "RabbitMQ quorum queue (aio-pika)"}
# Rows of `bench peers` beyond the two headline Magnetar drivers: each over each peer in a table of its own.
MAGNETAR_VARIANTS = ("pulsar_client_no_fsync", "pulsar_client_deep")
PEERS = ("nats_jetstream", "rabbitmq_stream", "rabbitmq_quorum")


# ---- charts ---------------------------------------------------------------------------


def _charts(results: dict, directory: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    peers = results.get("peers", {})
    if "by_size" in peers:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sizes = peers["config"]["sizes"]
        for key, label in ((k, v) for k, v in SYSTEMS.items() if k in peers["by_size"]):
            ax.plot(sizes, [peers["by_size"][key][str(s)]["produce_mb_per_s"] for s in sizes], marker="o", label=label)
        ax.axhline(peers["physical_limit_64k_mb_per_s"], color="grey", linestyle="--",
                   label="physical limit: disk 64 KiB fdatasync MB/s / (Qw x 2)")
        ax.axhline(peers["journal_only_limit_64k_mb_per_s"], color="grey", linestyle=":",
                   label="journals only: disk 64 KiB fdatasync MB/s / Qw")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [f"{s // 1024} KiB" if s >= 1024 else f"{s} B" for s in sizes])
        ax.set_xlabel("message size")
        ax.set_yscale("log")  # the page-cache peers and the fsync-bound ones differ by 1,000x
        ax.set_ylabel("produce MB/s (log)")
        ax.set_title("Produce throughput by message size (one run, one host)")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(directory / CHART_SIZES, dpi=110)
        plt.close(fig)
        drawn.append(CHART_SIZES)
    broker = results.get("broker", {})
    curves = [(broker.get("latency", {}).get("publish_cdf_ms"), "publish (send -> receipt)"),
              (broker.get("e2e", {}).get("e2e_cdf_ms"), "end to end (send -> receive)")]
    if any(points for points, _ in curves):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for points, label in curves:
            if points:
                ax.plot([ms for _, ms in points], [q for q, _ in points], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("latency from the scheduled send time, ms (log)")
        ax.set_ylabel("percentile")
        ax.set_title("Latency CDF at a steady 1,000 msg/s (open loop), pulsar-client")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(directory / CHART_CDF, dpi=110)
        plt.close(fig)
        drawn.append(CHART_CDF)
    return drawn


# ---- sections -----------------------------------------------------------------------------


def _machine(doc: dict) -> list[str]:
    m = doc["machine"]
    rows = [["CPU", f"{m.get('cpu_model', 'unknown')} x {m['cpus']}"], ["memory", f"{_n(m.get('memory_gib'), 1)} GiB"],
            ["kernel / platform", m["platform"]], ["Python", m["python"]], ["run at (UTC)", m["time"]]]
    disk = doc["results"].get("peers", {}).get("disk_512b") or doc["results"].get("broker", {}).get("disk_512b")
    if disk:
        rows.append(["disk", f"{_n(disk['fsyncs_per_s'])} fdatasync/s of 512 B (p50 {_n(disk['fsync_p50_ms'], 2)} ms), "
                             "measured in this run"])
    timing = doc["results"].get("timing", {})
    if timing:
        total = sum(t["seconds"] for t in timing.values())
        loads = [t["load_1m_at_start"] for t in timing.values()]
        rows += [["run time", f"{total / 60:.0f} min: " + ", ".join(f"{name} {t['seconds']:.0f} s" for name, t in timing.items())],
                 ["load average (1 min) as each suite started",
                  f"{min(loads):.1f}" + (f" to {max(loads):.1f}" if max(loads) > min(loads) else "")]]
    return ["## Machine", "", *_table(["", ""], rows)]


def _targets(r: dict) -> list[str]:
    rows = []

    def row(what: str, measured: str, target: str, ok: bool) -> None:
        rows.append([what, measured, target, _verdict(ok)])

    peers, broker, ledger, failover, client = (r.get(k, {}) for k in ("peers", "broker", "ledger", "failover", "client"))
    if "ratio_magnetar_to_nats" in peers:
        for key in ("magnetar", "pulsar_client"):
            ratio = peers[f"ratio_{key}_to_nats"]
            row(f"produce 100 B vs NATS JetStream ({SYSTEMS[key]})", f"{ratio:.1f}x", ">= 5x", ratio >= 5)
    for size, target in STREAM_TARGETS.items():
        ratio = peers.get("ratios_by_size", {}).get(size, {}).get("pulsar_client_to_rabbitmq_stream")
        if ratio is not None:
            row(f"produce {_size(int(size))} vs RabbitMQ stream ({SYSTEMS['pulsar_client']})",
                f"{ratio:.2f}x" + _out_of_reach(peers.get("stream_targets", {}).get(size)), f">= {target:g}x",
                ratio >= target)
    if "produce" in broker:
        rate = broker["produce"]["msg_per_s"]
        row("produce 100 B, batching (pulsar-client)", f"{_n(rate)} msg/s", ">= 100,000 msg/s", rate >= 100_000)
    if "latency" in broker:
        x = broker["latency"]
        row("publish p50 at 1,000 msg/s", f"{x['publish_p50_ms']:.2f} ms", "<= 3 ms", x["publish_p50_ms"] <= 3)
        row("publish p99 at 1,000 msg/s", f"{x['publish_p99_ms']:.2f} ms", "<= 10 ms", x["publish_p99_ms"] <= 10)
    if "e2e" in broker:
        p99 = broker["e2e"]["e2e_p99_ms"]
        row("end-to-end p99 at 1,000 msg/s", f"{p99:.2f} ms", "<= 15 ms", p99 <= 15)
    if "catchup" in broker:
        rate = broker["catchup"]["msg_per_s"]
        row(f"catch-up read of {broker['catchup']['backlog']:,}", f"{_n(rate)} msg/s", ">= 100,000 msg/s", rate >= 100_000)
    if "topics" in broker:
        t = broker["topics"]
        row(f"{t['topics']:,} idle topics, broker RSS", f"{_n(t['rss_after_mb'], 1)} MB", "< 1 GiB", t["rss_after_mb"] < 1024)
    if "ratio_64k_to_journal_only_limit" in peers:
        # The verdict uses the strict limit, disk / Qw (as if the journals alone wrote); the entry-log view is context.
        for key, ratio in peers["ratio_64k_to_journal_only_limit"].items():
            loose = peers["ratio_64k_to_physical"][key]
            row(f"64 KiB produce vs physical limit, disk / Qw ({SYSTEMS[key]})",
                f"{_floor_pct(ratio)} (counting entry-log writes too: {loose:.0%})", ">= 50%", ratio >= 0.5)
    if "magnetar" in client:
        ratio, rate = client["produce_ratio"], client["magnetar"]["consume_msg_per_s"]
        if "sync_produce_ratio" in client:
            sync = client["sync_produce_ratio"]
            row("magnetar sync API (magnetar.Client) produce vs pulsar-client", f"{sync:.2f}x", ">= 0.5x", sync >= 0.5)
        row("magnetar client produce vs pulsar-client", f"{ratio:.2f}x", ">= 0.5x", ratio >= 0.5)
        row("magnetar client consume", f"{_n(rate)} msg/s", ">= 100,000 msg/s", rate >= 100_000)
    if "throughput_1k" in ledger:
        rate, steady = ledger["throughput_1k"]["entries_per_s"], ledger["steady_1000_per_s"]["add_p99_ms"]
        row("ledger 1 KiB adds", f"{_n(rate)} entries/s", ">= 15,000", rate >= 15_000)
        row("ledger adds p99 at a steady 1,000/s", f"{steady:.2f} ms", "<= 10 ms", steady <= 10)
        ratio = ledger["ratio_64k_to_physical"]
        row("ledger 64 KiB adds vs physical limit, disk / (Qw x 2)", f"{ratio:.0%}", ">= 50%", ratio >= 0.5)
    if "kill9_to_first_ack_s" in failover:
        k, g = failover["kill9_to_first_ack_s"], failover["unload_publish_gap_s"]
        row(f"kill -9 of the owner -> first ack (max; broker defaults, session {failover['session_timeout_s']:g} s)",
            f"{k['max']:.2f} s (p50 {k['p50']:.2f} s)", "<= 5 s", k["max"] <= 5)
        row("graceful unload publish gap (p99)", f"{g['p99']:.2f} s", "<= 1 s", g["p99"] <= 1)
    spark = r.get("spark", {})
    for label, part in (("cold", spark), ("warm", spark.get("warm"))):
        if part and "ratio" in part:
            row(f"Spark source vs Spark's rate source, {label} query", f"{part['ratio']:.2f}", ">= 0.5", part["ratio"] >= 0.5)
    rows += _hostile_targets(r.get("hostile", {}))
    rows.append(["locust, 50 users for 10 minutes", "not part of `all`", "zero failures, flat latency",
                 "`make test-slow` (tests/loadtest/test_locust_soak.py)"])
    return ["## Targets", "", *_table(["target", "measured", "target value", "verdict"], rows)]


def _ledger(r: dict) -> list[str]:
    if "throughput_1k" not in r:
        return []
    rows = [[f"1 KiB adds, window {w} in flight", f"{_n(x['entries_per_s'])} entries/s",
             f"p50 {_n(x['add_p50_ms'], 1)} / p99 {_n(x['add_p99_ms'], 1)} ms",
             f"window / rate = {_n(x['littles_law_ms'], 1)} ms (Little's law)"]
            for w, x in r.get("window_1k", {}).items()]
    if not rows:  # results from before the window sweep
        rows.append(["1 KiB adds (closed loop)", f"{_n(r['throughput_1k']['entries_per_s'])} entries/s",
                     f"p50 {_n(r['throughput_1k']['add_p50_ms'], 1)} ms",
                     f"disk {_n(r['disk_1k']['fsyncs_per_s'])} fdatasync/s of 1 KiB"])
    if "simpletest_1k" in r:
        s = r["simpletest_1k"]
        rows.append([f"`bookie shell simpletest` loop ({s['entries']:,} adds, window {s['window']:,})",
                     f"{_n(s['entries_per_s'])} entries/s", f"p50 {_n(s['add_p50_ms'], 1)} ms",
                     f"{r['simpletest_to_sustained']:.2f}x the sustained rate above"])
    rows += [
        ["64 KiB adds", f"{_n(r['throughput_64k']['mb_per_s'], 1)} MB/s", f"p50 {_n(r['throughput_64k']['add_p50_ms'], 1)} ms",
         f"physical {_n(r['physical_limit_64k_mb_per_s'], 1)} MB/s: ratio {r['ratio_64k_to_physical']:.2f}"],
        ["steady 1,000/s of 1 KiB (open loop), bookie defaults", f"p99 {_n(r['steady_1000_per_s']['add_p99_ms'], 2)} ms",
         f"p50 {_n(r['steady_1000_per_s']['add_p50_ms'], 2)} ms",
         f"disk fdatasync of 1 KiB p50 {_n(r['disk_1k']['fsync_p50_ms'], 2)} / p99 {_n(r['disk_1k']['fsync_p99_ms'], 2)} ms"
         + (f"; the generator sent late by p50 {_n(r['steady_1000_per_s']['send_lateness_p50_ms'], 2)} ms"
            if "send_lateness_p50_ms" in r["steady_1000_per_s"] else "")],
    ]
    if "steady_1000_per_s_flush_when_empty" in r:
        e = r["steady_1000_per_s_flush_when_empty"]
        rows.append(["steady 1,000/s, bookies with `journal_flush_when_queue_empty`", f"p99 {_n(e['add_p99_ms'], 2)} ms",
                     f"p50 {_n(e['add_p50_ms'], 2)} ms", "alternating rounds with the row above, same run"])
    return ["## Ledger store", "",
            "Three `bookie start` processes in three zones and a real ZooKeeper; the ledger client in this process, "
            "E3/Qw2/Qa2, journal fdatasync on. The closed loop runs at several windows of adds in flight: each "
            "add's latency is what a ledger user with that window sees, and in a closed loop the median is about "
            "window / rate, so a large window buys throughput with queueing, not slower adds. `bookie shell "
            "simpletest` runs the same loop for a 1,000-add burst, which ends before the bookies reach a steady "
            "state. The steady run is open loop: each add's latency counts from its scheduled time. The physical "
            "limit is the disk's fdatasync'd 64 KiB write bandwidth divided by Qw x 2 (journal and entry log).", "",
            *_table(["measure", "value", "latency", "reference (same run)"], rows), _reproduce("ledger"), ""]


def _broker(r: dict) -> list[str]:
    if "produce" not in r:
        return []
    disk = r["disk_512b"]
    rows = [["produce 100 B, batching", f"{_n(r['produce']['msg_per_s'])} msg/s", "",
             f"disk {_n(disk['fsyncs_per_s'])} fdatasync/s: {r['produce']['msg_per_s'] / disk['fsyncs_per_s']:.0f} messages per fsync"]]
    for key, prefix, label in (("latency", "publish", "publish at 1,000 msg/s"), ("e2e", "e2e", "end-to-end at 1,000 msg/s")):
        if key in r:
            x = r[key]
            rows.append([label, f"{x['messages']:,} messages",
                         f"p50 {_n(x[f'{prefix}_p50_ms'], 2)} / p99 {_n(x[f'{prefix}_p99_ms'], 2)} / "
                         f"p99.9 {_n(x[f'{prefix}_p999_ms'], 2)} / max {_n(x[f'{prefix}_max_ms'], 2)} ms",
                         f"fdatasync 512 B p50 {_n(disk['fsync_p50_ms'], 2)} ms"])
    if "catchup" in r:
        rows.append([f"catch-up read of {r['catchup']['backlog']:,}", f"{_n(r['catchup']['msg_per_s'])} msg/s", "", ""])
    if "topics" in r:
        t = r["topics"]
        rows.append([f"{t['topics']:,} idle topics", f"{_n(t['rss_after_mb'], 1)} MB RSS", "",
                     f"{_n(t['mb_per_1000_topics'], 1)} MB per 1,000 topics"])
    return ["## Broker", "",
            "The official `pulsar-client` against `broker standalone` (3 bookies, E2/Qw2/Qa2, fsync on), 100-byte "
            "messages, batching on. Fixed-rate runs use an open-loop schedule: latency counts from each message's "
            "scheduled send time, so a stall is charged to every message it delays (no coordinated omission).", "",
            *_table(["measure", "value", "latency", "reference (same run)"], rows),
            _reproduce("broker") + " The same against ZooKeeper, 3 bookie processes and `broker start`: "
            "`python -m loadtest.bench broker-cluster`.", "", f"![latency CDF]({CHART_CDF})", ""]


def _client(r: dict) -> list[str]:
    if "magnetar" not in r:
        return []
    official = f"{_n(r['official']['msg_per_s'])} msg/s"
    rows = []
    if "sync_produce_msg_per_s" in r["magnetar"]:
        rows.append(["produce, sync API (`magnetar.Client`)", f"{_n(r['magnetar']['sync_produce_msg_per_s'])} msg/s",
                     official, f"{r['sync_produce_ratio']:.2f}"])
    rows += [["produce, asyncio API", f"{_n(r['magnetar']['produce_msg_per_s'])} msg/s", official,
              f"{r['produce_ratio']:.2f}"],
             ["consume", f"{_n(r['magnetar']['consume_msg_per_s'])} msg/s",
              f"{_n(r['official']['consume_msg_per_s'])} msg/s", f"{r['consume_ratio']:.2f}"]]
    rounds = r["config"].get("rounds", 1)
    return ["## The magnetar client beside pulsar-client", "",
            f"{r['config']['messages']:,} messages of 100 B per producer with batching against `broker standalone`, "
            "each producer on its own topic: no callback per message, `max_pending_messages=50,000`, "
            "`block_if_queue_full=True`, then `flush()`; the rate counts what the broker stored (topic stats "
            f"`msgInCounter`). The three producers run in turn, {rounds} round(s): each rate is the median over "
            "rounds, each ratio the median of the rounds' ratios. Consume: each client drains a batched backlog "
            f"of {r['config'].get('consume_messages', r['config']['messages']):,}.", "",
            *_table(["measure", "magnetar", "pulsar-client (reference)", "ratio"], rows), _reproduce("client"), ""]


def _out_of_reach(need: dict | None) -> str:
    """Why a stream target cannot be met on this machine, from what the run measured, or nothing."""
    if not need:
        return ""
    why = []
    if need["client_cores"] is not None and need["client_cores"] > need["cores"]:
        why.append(f"the client alone would need {need['client_cores']:.1f} cores of {need['cores']}")
    if need["vs_disk"] > 1:
        why.append(f"{need['vs_disk']:.1f}x the disk's fsync'd bandwidth")
    return f" (out of reach here: {'; '.join(why)})" if why else ""


def _stream_needs(r: dict) -> list[str]:
    """What each RabbitMQ stream target would take, from the run's own figures."""
    needs = r.get("stream_targets")
    if not needs:
        return []
    rows = [[_size(int(size)), f"{n['target']:g}x", f"{_n(n['msg_per_s'])} msg/s ({_n(n['mb_per_s'], 1)} MB/s)",
             "" if n["client_cpu_us_per_msg"] is None else f"{n['client_cpu_us_per_msg']:.2f} µs",
             "" if n["client_cores"] is None else f"{n['client_cores']:.1f} of {n['cores']}",
             f"{n['vs_disk']:.2f}x"] for size, n in needs.items()]
    return ["What the RabbitMQ stream targets would take, from this run's figures. The official client's CPU per "
            "message is the least its own process (the C++ client's threads and the Python loop feeding it) spent "
            "per message in any pulsar-client row of that size; times the target rate, it is the cores the client "
            "alone would need, before the broker and its bookies get any. Every Magnetar confirm waits for a "
            "journal fsync, so the target's bytes over the disk's fdatasync'd 64 KiB bandwidth must stay below 1 "
            "even for a single copy.", "",
            *_table(["size", "target", "the target's rate", "pulsar-client CPU per message",
                     "cores the client alone needs", "target bytes / disk fsync bandwidth"], rows)]


def _peers(r: dict) -> list[str]:
    if "by_size" not in r:
        return []
    sizes = r["config"]["sizes"]
    systems = [k for k in SYSTEMS if k in r["by_size"]]
    rows = [[f"{s:,} B", *(f"{_n(r['by_size'][k][str(s)]['produce_mb_per_s'], 1)} MB/s "
                           f"({_n(r['by_size'][k][str(s)]['produce_msg_per_s'])} msg/s)" for k in systems)]
            for s in sizes]
    peers = [p for p in PEERS if p in r["by_size"]]
    ratios = r.get("ratios_by_size")
    ratio_rows = [[f"{s:,} B", *(f"{ratios[str(s)][f'{m}_to_{p}']:.2f}x" for m in ("pulsar_client", "magnetar")
                                 for p in peers)] for s in sizes] if ratios else []
    variants = [m for m in MAGNETAR_VARIANTS if m in r["by_size"]]
    variant_rows = [[f"{s:,} B", SYSTEMS[m], *(f"{ratios[str(s)][f'{m}_to_{p}']:.2f}x" for p in peers)]
                    for s in sizes for m in variants] if ratios else []
    fsyncs = r["config"].get("fsyncs")
    fsync_line = ("Which rows fsync before they confirm: " + "; ".join(
        f"{SYSTEMS[k]}: {'yes' if fsyncs[k] else '**no**'}" for k in SYSTEMS if k in fsyncs and k in r["by_size"])
        + ". The durable rows are the headline; the fsync-off row makes the promise the RabbitMQ stream makes "
        "(confirmed from the page cache), so that column compares like with like. What bounds each row: "
        "docs/ledger-store.md, \"One disk\". "
        "Magnetar's producers keep the peers' window of "
        f"{r['config'].get('window', 512)} unconfirmed messages in batches of at most "
        f"{r['config'].get('magnetar_batch', 64)}, as the stream driver does, except the "
        f"{_n(r['config'].get('deep_window', 50_000))}-pending row, the other suites' setting.") if fsyncs else ""
    rabbit = ("RabbitMQ 3.10 (Debian `rabbitmq-server`, one node started by the bench) as the durable peer: a "
              "stream over the stream protocol (rstream, publish confirms, batches of "
              f"{r['config'].get('rabbitmq_stream_batch', 64)} under the same window) and a quorum queue over AMQP "
              "(aio-pika, persistent messages, publisher confirms). A quorum queue fdatasyncs its write-ahead log "
              "before it confirms; a stream confirms once the chunk is written to the OS, without fsync (RabbitMQ "
              "leans on replication for streams, and one node has none), so the stream too is a weaker promise "
              "than Magnetar's. The quorum queue's rate in messages stays within a small factor from 100 B to "
              "16 KiB: a per-message cost (aio-pika awaits one confirm per publish, in Python, and the queue "
              "appends each to its Raft log), not bytes, bounds it there. ") if "rabbitmq_stream" in r["by_size"] else ""
    above_disk = [s for s in sizes if "rabbitmq_stream" in r["by_size"]
                  and r["by_size"]["rabbitmq_stream"][str(s)]["produce_mb_per_s"] > r["disk_64k"]["mb_per_s"]]
    if above_disk:
        rabbit += (f"At {', '.join(_size(s) for s in above_disk)} the stream confirms faster than this disk takes "
                   f"fdatasync'd 64 KiB writes ({_n(r['disk_64k']['mb_per_s'], 1)} MB/s): those confirms are for the "
                   "page cache. ")
    return ["## Peers and physical limits", "",
            "One run: NATS JetStream (Debian `nats-server`, file storage) driven by `nats-py` with a sliding window of "
            f"{r['config']['nats_window']} publishes in flight; " + rabbit + "Magnetar (`broker standalone --single-process`, "
            "E2/Qw2/Qa2, batching on; journal fsync on except in the row that says off) with the magnetar client and "
            "with `pulsar-client`. JetStream has no "
            "per-message fsync (it syncs every 2 minutes by default), so the comparison favours NATS on durability. "
            f"Sizes above 100 B send {r['config']['sweep_bytes'] / 1e6:,.0f} MB each; each peer keeps "
            f"{r['config'].get('window', r['config']['nats_window'])} messages in flight.", "",
            *_table(["size", *(SYSTEMS[k] for k in systems)], rows),
            *(["Magnetar's produce rate over each peer's, same size, same run:", "",
               *_table(["size", *(f"{'pulsar-client' if m == 'pulsar_client' else 'magnetar'} / {SYSTEMS[p]}"
                                  for m in ("pulsar_client", "magnetar") for p in peers)], ratio_rows)]
              if ratio_rows else []),
            *(["The other Magnetar rows over each peer, same size, same run:", "",
               *_table(["size", "Magnetar", *(f"/ {SYSTEMS[p]}" for p in peers)], variant_rows)]
              if variant_rows else []),
            *([fsync_line, ""] if fsync_line else []),
            *_stream_needs(r),
            f"Machine limits in the same run: disk fdatasync {_n(r['disk_512b']['fsyncs_per_s'])}/s of 512 B and "
            f"{_n(r['disk_64k']['mb_per_s'], 1)} MB/s of 64 KiB blocks"
            + (f" at the start, {_n(r['disk_512b_end']['fsyncs_per_s'])}/s and {_n(r['disk_64k_end']['mb_per_s'], 1)} "
               "MB/s at the end" if "disk_64k_end" in r else "")
            + f"; loopback TCP {_n(r['loopback_tcp_mb_per_s'])} MB/s. "
            "Physical limit for 64 KiB messages: two bookies on this disk each write every byte to their journal "
            f"and their entry log, so disk / (Qw 2 x 2) = {_n(r['physical_limit_64k_mb_per_s'], 1)} MB/s, as the "
            "ledger suite counts it; counting the journals alone, disk / Qw = "
            f"{_n(r['journal_only_limit_64k_mb_per_s'], 1)} MB/s.", "",
            _reproduce("peers"), "", f"![throughput by message size]({CHART_SIZES})", ""]


def _failover(r: dict) -> list[str]:
    if "kill9_to_first_ack_s" not in r:
        return []
    rows = []
    for label, x in (("broker defaults", r), ("tuned", r.get("tuned_session"))):
        if x is None:
            continue
        k, g = x["kill9_to_first_ack_s"], x["unload_publish_gap_s"]
        rows += [[f"kill -9 of the owner -> first acknowledged publish ({label}, session {x['session_timeout_s']:g} s)",
                  f"{k['p50']:.2f} s", f"{k['max']:.2f} s",
                  "Pulsar's default session timeout alone is 30 s (apache/pulsar#9297: 51-100 s reconnects)"],
                 [f"graceful bundle unload -> longest publish gap ({label})", f"{g['p50']:.2f} s", f"{g['max']:.2f} s", ""]]
    return ["## Failover", "",
            "A real ZooKeeper, 3 bookie processes and 3 `broker start` processes, first with the broker's defaults, "
            f"then with a short session timeout; {r['trials']} trials of each event in each; the producer enters "
            "through a broker that does not own the topic.", "",
            *_table(["event", "p50", "max", "reference"], rows),
            _reproduce("failover") + " `MAGNETAR_BENCH_FAILOVER_SESSION_S` sets the tuned row's session timeout.", ""]


def _recovery(r: dict) -> list[str]:
    if "kill_to_replicated_s" not in r:
        return []
    return ["## Autorecovery", "",
            f"A real ZooKeeper and 4 bookie processes in 3 zones, autorecovery in every bookie (recovery delay 2 s, "
            f"session 2 s). {_n(r['ledger_data_mb'])} MiB of ledger data in 64 KiB entries over 32 closed E2/Qw2/Qa2 "
            f"ledgers; the bookie holding the most ({_n(r['victim_held_mb'])} MiB) is killed with -9. Each copied "
            "entry is read from a survivor, written (journal fsync) to the new bookie and read back.", "",
            *_table(["phase", "seconds", "reference"], [
                ["kill -9 -> first under-replication mark (session expiry + delay)", f"{r['detection_s']:.2f}",
                 "lower bound: 2 s session + 2 s delay"],
                ["first mark -> fully replicated", f"{r['repair_s']:.2f}", ""],
                ["kill -9 -> fully replicated", f"{r['kill_to_replicated_s']:.2f}", ""]]),
            *_table(["figure", "MB/s"], [
                [f"re-replication ({_n(r['rereplicated_mb'])} MiB copied)", _n(r["rereplication_mb_per_s"], 1)],
                ["disk: 64 KiB appends + fdatasync (same run)", _n(r["disk_fsync_64k_mb_per_s"], 1)],
                ["disk: 1 MiB appends + fdatasync (same run)", _n(r["disk_fsync_1m_mb_per_s"], 1)]]),
            _reproduce("recovery") + " `MAGNETAR_BENCH_RECOVERY_MB` sets the amount of data.", ""]


def _spark(r: dict) -> list[str]:
    if "magnetar_source" not in r:
        return []
    rows = []
    for label, part in (("cold", r), ("warm", r.get("warm"))):
        if part is None:  # results written before the warm query was measured
            continue
        m, ref = part["magnetar_source"], part["rate_source"]
        rows += [[label, "magnetar", f"{m['rows']:,}", f"{m['seconds']:.2f}", _n(m["rows_per_s"])],
                 [label, "rate-micro-batch (reference)", f"{ref['rows']:,}", f"{ref['seconds']:.2f}",
                  _n(ref["rows_per_s"])],
                 [label, "ratio", "", "", f"{part['ratio']:.2f}"]]
    if "sessions" in r["config"]:
        method = ("Each source runs in a fresh SparkSession (a driver process and JVM of its own), the session's start "
                  "left out of both. The cold query is the session's first: for both the JVM loads and compiles the "
                  "streaming engine, and for ours Spark also starts Python processes that import pyspark, pyarrow "
                  "and the connector. The warm one is the session's second, on a second backlog, as every "
                  "micro-batch of a long-running query after the first.")
    else:  # results written before 2026-11-25
        method = ("Both ran in one session, ours first, so our cold query also paid the session's first-query "
                  "costs.")
    return ["## Spark source", "",
            f"A {r['config']['backlog']:,}-message backlog drained by a streaming query in local[2] into the `noop` "
            f"sink, beside Spark's `rate-micro-batch` source into the same sink. {method}", "",
            *_table(["query", "source", "rows", "seconds", "rows/s"], rows), _reproduce("spark"), ""]


def _tls(r: dict) -> list[str]:
    rows = [[key.rsplit("_", 1)[0].replace("official", "pulsar-client").replace("magnetar_sync", "magnetar (sync API)"),
             f"{v['message_bytes']:,} B", _n(v["plain_msg_per_s"]), _n(v["tls_msg_per_s"]), _n(v["tls_mb_per_s"], 1),
             f"{v['ratio']:.2f}"] for key, v in r.items() if key != "config" and isinstance(v, dict)]
    if not rows:
        return []
    return ["## TLS", "",
            "The client suite's produce loop over `pulsar+ssl://` beside `pulsar://` on the same `broker standalone`, "
            f"plain and TLS alternating within each of {r['config']['rounds']} rounds; {r['config']['tls']}. "
            "Medians over rounds; the ratio is the median of the rounds' TLS / plain.", "",
            *_table(["client", "message", "plain msg/s", "TLS msg/s", "TLS MB/s", "TLS / plain"], rows),
            _reproduce("tls"), ""]


def _compaction(r: dict) -> list[str]:
    if "compaction_msg_per_s" not in r:
        return []
    c = r["config"]
    return ["## Compaction", "",
            f"A topic of {c['messages']:,} messages ({c['value_bytes']} B values over {c['keys']:,} keys, batched) "
            "read from the earliest message without `read_compacted` (the reference), compacted by one run over "
            f"REST, then read through the compacted view; medians over {c['rounds']} rounds, ratios the median of "
            "the rounds' ratios.", "",
            *_table(["measure", "msg/s", "vs catch-up"], [
                ["catch-up read (reference)", _n(r["catchup_msg_per_s"]), "1.00"],
                ["compaction run (broker's run time)", _n(r["compaction_msg_per_s"]), f"{r['compaction_to_catchup']:.2f}"],
                ["compacted read", _n(r["compacted_read_msg_per_s"]), f"{r['compacted_read_to_catchup']:.2f}"]]),
            f"A complete table (latest value per key) takes {r['table_time_speedup']:.0f}x less time through the "
            "compacted view than by catching up.", _reproduce("compaction"), ""]


CORES_PHASES = {"produce": "produce, batches of up to 1,000", "catchup": "catch-up read",
                "produce-small": "produce, batches of 10"}


def _cores(r: dict) -> list[str]:
    if "model" not in r:
        return []
    c = r["config"]
    labels = [k for k in r if isinstance(r[k], dict) and "label" in r[k]]
    rows = []
    for label in labels:
        d = r[label]
        for phase, what in CORES_PHASES.items():
            if phase not in d:
                continue
            p = d[phase]
            cpu = p["worker_cpu_s_per_m"] or p["single_process_cpu_s_per_m"]
            rows.append([label + (" (reference)" if label == "1-worker" else ""), what, _n(p["msg_per_s"]),
                         f"{p['ratio_to_1_worker']:.2f}", " / ".join(_n(v / 1000) + "k" for v in p["rounds_msg_per_s"]),
                         _n(cpu, 1), _n(p["bookie_cpu_s_per_m"], 1), _n(p["client_cpu_s_per_m"], 1)])
    model_rows = []
    has_more = any("n_workers_more_bookies" in m for by_cores in r["model"].values() for row in by_cores.values()
                   for m in row.values())
    for phase, by_cores in r["model"].items():
        for n, row in by_cores.items():
            for disk, m in row.items():
                if phase == "catchup" and disk == "this_disk":
                    continue
                more = m.get("n_workers_more_bookies")  # absent from results of before --bookies existed
                model_rows.append([CORES_PHASES.get(phase, phase), n, "this disk" if disk == "this_disk" else "CPU only",
                                   f"{_n(m['one_worker']['msg_per_s'])} ({m['one_worker']['bound_by']})",
                                   f"{_n(m['n_workers']['msg_per_s'])} ({m['n_workers']['bound_by']})",
                                   f"{m['ratio']:.2f}",
                                   *([f"{_n(more['msg_per_s'])} ({more['bound_by']}), --bookies {more['bookies']}",
                                      f"{m['ratio_more_bookies']:.2f}"] if more else [])])
    return ["## Use every core: broker workers", "",
            f"`broker standalone --workers K` (3 bookie processes, K broker-worker processes, E2/Qw2/Qa2, fsync on) "
            f"with K = 1 (the reference) and K = {r['cores']} (one per core), and `--single-process`, each fresh, "
            f"round-robin over {c['rounds']} rounds (medians). {c['topics']} topics, as many owned by each worker, "
            f"one official-client process per topic started together, {c['message_bytes']} B messages, "
            f"{c['messages_per_topic']:,} per topic (a tenth of that with batches of 10). CPU is each process's "
            "user + system time over the phase, per million messages.", "",
            *_table(["deployment", "phase", "msg/s", "vs 1 worker", "rounds", "broker CPU s/M", "bookies CPU s/M",
                     "clients CPU s/M"], rows),
            f"The model (below) takes the 1-worker run's CPU per message: a worker and a bookie are each one "
            f"Python thread, so msg/s ≤ workers / worker cost, ≤ bookies / bookie cost (3 bookie processes, or "
            f"`--bookies B`), ≤ cores / (worker + bookie cost), and for produce ≤ the disk's fsync'd bandwidth "
            f"({_n(r['disk_64k']['mb_per_s'])} MB/s in 64 KiB writes, this run) / (100 B x Qw 2 journals); clients "
            "run elsewhere. The last two columns give the bookies their share of the cores: `--bookies B` with B "
            "the fewest (at least 3) for which the bookies stop being the bound.", "",
            *_table(["phase", "cores", "disk", "1 worker msg/s (bound)", "one worker per core msg/s (bound)",
                     "ratio", *(["one worker per core, more bookies msg/s (bound)", "ratio"] if has_more else [])],
                    model_rows),
            _reproduce("cores"), ""]


NOTES = [
    "## Reading these figures", "",
    "- **One disk holds every fsync stream.** Bookie journals and entry logs share the disk with the "
    "reference measurements; production bookies put the journal on its own device. A latency run right after "
    "a throughput run queues behind the write-back of the earlier run, which is why the ledger suite runs its "
    "steady-rate phase first.",
    "- **Ratios above 1 against the disk references** mean the references are single-stream: several bookies "
    "fsync concurrently and the virtual disk serves parallel streams faster than one. They remain the "
    "yardstick for how close to the hardware a figure is, but not a hard ceiling here.",
    "- **Client-side costs.** The official client's Python wrapper carries a callback on one send in 100: a "
    "callback per message costs a GIL hand-off from its C++ thread and caps the *client* near 30k msg/s.",
    "- **Everything runs on one 2-core host**: brokers, bookies, ZooKeeper, the load generator and the peers. "
    "The machine is shared and noisy; compare runs by their ratios, and read a ratio near 1 as a range, not a point: "
    "single rounds of one run spread by tens of percent (the `rounds` column of the cores table shows how far).",
    "",
]


def _nemesis_note(kept: list[str] | None) -> list[str]:
    if not kept:
        return ["No nemesis run on this page yet: `python -m loadtest.nemesis --report docs/` adds its section.", ""]
    return [f"The Nemesis section is not part of `all`: it comes from its own long run of `python -m loadtest.nemesis` "
            f"at {run_time(kept) or 'the time its section states'}, carried over unchanged from the page this one "
            "replaced (`python -m loadtest.nemesis --report-from RESULT.json --report docs/` renders it again from a "
            "saved result).", ""]


def write_report(doc: dict, directory: str | Path, command: str) -> Path:
    """Write DIRECTORY/BENCHMARKS.md and its charts, keeping the Nemesis section of the page it replaces."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "BENCHMARKS.md"
    nemesis = existing_section(path, NEMESIS_HEADING)
    r = doc["results"]
    _charts(r, directory)
    errors = [f"- `{name}` failed: {res['error']}" for name, res in r.items() if isinstance(res, dict) and "error" in res]
    lines = ["# Benchmarks", "",
             f"Generated by `{command}`. Every figure is measured beside a reference taken in the same run on the "
             "same machine, because these machines are shared and noisy: read the ratios first. Raw JSON: "
             "`--out` (default `results/bench-all.json`, not committed). The Machine table says how long each suite "
             "ran; `--rounds N` runs N rounds of the suites that repeat their phases (the ledger's steady run, "
             "client, TLS, compaction, cores), each round with its own reference, for a shorter full run.", "",
             *_nemesis_note(nemesis),
             *(["Suites that failed in this run:", "", *errors, ""] if errors else []),
             *_machine(doc), *_targets(r),
             *_ledger(r.get("ledger", {})), *explain.ledger(r.get("ledger", {})),
             *_broker(r.get("broker", {})), *_client(r.get("client", {})),
             *_peers(r.get("peers", {})), *explain.peers(r.get("peers", {})),
             *_failover(r.get("failover", {})), *explain.failover(r.get("failover", {})),
             *_recovery(r.get("recovery", {})), *_spark(r.get("spark", {})),
             *_tls(r.get("tls", {})), *explain.tls(r.get("tls", {})),
             *_hostile(r.get("hostile", {})), *explain.hostile(r.get("hostile", {})),
             *_compaction(r.get("compaction", {})), *explain.compaction(r.get("compaction", {})),
             *_cores(r.get("cores", {})), *explain.cores(r.get("cores", {})), "",
             *NOTES, *(nemesis or [])]
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
