"""What the figures of docs/BENCHMARKS.md mean: the prose under each section, for the page `bench all --report` writes.

Text that holds for any run is written here once. What depends on the run (how far its rounds spread, what bound
a model row, how late the load generator was) is computed from that run's results, so a regenerated page never
carries an older run's numbers in its explanations. Each function takes one suite's results and returns lines of
Markdown, empty when the suite did not run.
"""

from __future__ import annotations


def _range(values: list[float], digits: int = 2, unit: str = "") -> str:
    low, high = f"{min(values):,.{digits}f}", f"{max(values):,.{digits}f}"
    return (low if low == high else f"{low}-{high}") + unit


def ledger(r: dict) -> list[str]:
    steady = r.get("steady_1000_per_s", {})
    if "send_lateness_p99_ms" not in steady:
        return []
    late = steady["send_lateness_p99_ms"]
    # A generator late by more than a millisecond or two at p99 is sharing its core: the adds' p99 then carries the
    # host's scheduling delay as well as the store's own latency.
    verdict = ("the host was busy, so the steady p99 above measures the machine as much as the bookies; compare it "
               "with a run on a quiet machine" if late > 2.0 else
               "the steady p99 above is the store's, not the load generator's")
    return [f"The load generator itself sent the steady run's adds late by p99 {late:.2f} ms in this run: {verdict}. "
            "Each add's latency counts from its scheduled time, so a late generator is charged to the store, never "
            "hidden.", ""]


ONE_DISK = (
    "Why two copies on one disk: `broker standalone` writes every topic E2/Qw2/Qa2 to three bookies that share this "
    "disk, where Pulsar's own standalone writes E1/Qw1/Qa1. Magnetar keeps two on purpose: the standalone is the "
    "system developers try clients and connectors against, and with two copies every write goes through the write "
    "and ack quorums, zone-aware placement, fencing and autorecovery as in a cluster; two copies also survive one "
    "bookie directory's damage (though not the disk's loss). The price is the one the physical limits above count: "
    "every byte reaches this disk four times (two journals, two entry logs), so large messages are bound by bytes on "
    "the disk and small ones by per-message work. One copy is a configuration key away; the reasoning and a "
    "side-by-side measurement are in docs/ledger-store.md, \"One disk\".")


def peers(r: dict) -> list[str]:
    return [ONE_DISK, ""] if "by_size" in r else []


FAILOVER_BEFORE = (
    "Reference, the same bench on the same machine (2026-11-24), with the code before the take-over of dead owners "
    "(a killed owner's bundles waited for its session to expire): kill -9 -> first acknowledged publish p50 29.89 s / "
    "max 30.03 s with the broker's defaults, p50 2.92 s / max 3.17 s with the 3 s session timeout. How the take-over "
    "works and why it is safe: [broker.md](broker.md), \"Failover after kill -9, with the defaults\".")


def failover(r: dict) -> list[str]:
    return [FAILOVER_BEFORE, ""] if "kill9_to_first_ack_s" in r else []


def tls(r: dict) -> list[str]:
    rows = {k: v for k, v in r.items() if k != "config" and isinstance(v, dict) and v.get("runs")}
    if not rows:
        return []

    def spread(key: str) -> str:
        client = "pulsar-client" if key.startswith("official") else "magnetar"
        ratios = [x["tls"] / x["plain"] for x in rows[key]["runs"] if x["plain"]]
        return f"{client} {rows[key]['message_bytes']:,} B {_range(ratios) if ratios else 'n/a'}"

    small = [k for k, v in rows.items() if v["message_bytes"] < 1024]
    large = [k for k, v in rows.items() if v["message_bytes"] >= 1024]
    lines = []
    if small:
        lines.append("The small-message rows are CPU-bound. The official client does its TLS in its C++ core, beside "
                     "the Python application; the magnetar sync API is Python on the same cores as the broker, so "
                     "the cipher's cost shows there first (where it sits, the client's TLS layer or the broker's, is "
                     "not profiled). TLS / plain per round: "
                     + "; ".join(spread(k) for k in small) + ".")
    if large:
        lines.append("The large-message rows are bound by the replicated fsyncs on the one disk, so their per-round "
                     "spread (" + "; ".join(spread(k) for k in large) + ") is the disk's noise more than "
                     "the cipher's cost.")
    return [" ".join(lines), ""]


def compaction(r: dict) -> list[str]:
    if "compaction_msg_per_s" not in r:
        return []
    c, runs = r["config"], r.get("runs", [])
    spread = (f"The rounds' compaction rates ranged {_range([x['compaction_msg_per_s'] for x in runs], 0, ' msg/s')}. "
              if len(runs) > 1 else "")
    return [spread + "A compaction run costs little more than one read of the topic: its second phase parses only "
            "the entries that hold a key's newest message. The compacted read's entries come from the compacted "
            "ledger through the bookies, never from the broker's entry cache (its per-message rate was "
            f"{r['compacted_read_to_catchup']:.2f} of the catch-up's here). A complete table is "
            f"{r['table_time_speedup']:.0f}x sooner through the view because it holds {c['keys']:,} messages (one "
            f"per key) of the topic's {c['messages']:,}.", ""]


HOSTILE_DEFENCES = [
    "What holds each attack back (the keys are in docs/configuration.md):", "",
    "- **Per-connection command budgets.** Control commands (PRODUCER, SUBSCRIBE, LOOKUP, ...) and wasted work "
    "(refused commands, acks of positions that name no entry) each have a steady rate and a burst; a connection over "
    "its budget waits, and nothing more of it is read or handled meanwhile. This bounds the poison batch count, the "
    "far-future ACKs and the producer creates: the attacker is told the same as before, only slower.",
    "- **Acks of entries the consumer was not sent are paced** per connection (an official consumer acks only what "
    "it was sent and never spends that budget), and one ACK frame is one cursor change and one durable write: the "
    "ACK bomb's ids name real entries, so without the pacing nothing would slow it.",
    "- **A connection that never sends CONNECT is closed** after `connection_timeout_s` (10 s by default).",
    "- **A few frames per connection per loop turn**, so one busy connection cannot hold the event loop; the replies "
    "of one turn go out in one write.",
    "- **The 5 MiB producer writes to a sibling topic.** A topic is one ordered log: on the good client's own topic "
    "each small message completes after the 5 MiB one before it, in Pulsar as here, which would measure the topic's "
    "order, not harm to another client. Large adds travel on their own connection to each bookie, and small journal "
    "records are not held behind a large one in the same group commit. While small adds are flowing, large ones go to "
    "each bookie at most 64 MiB/s, slice by slice (`bookkeeper_client_bulk_add_pace_mb_per_s`), so their bursts leave "
    "room for the small ones; alone they are not paced. It is still the hardest attack: Pulsar has no default against "
    "it (`brokerPublisherThrottlingMaxByteRate` and the `publish-rate` policy are off by default; both exist here and "
    "bound it when set).",
    "",
    "The reference p99 is a few milliseconds on a quiet machine, so a small absolute delay is a large ratio: read the "
    "good client's absolute p99 beside each ratio. Earlier runs, what was profiled and what changed between them: "
    "[hostile-clients.md](hostile-clients.md).", ""]


def hostile(r: dict) -> list[str]:
    return list(HOSTILE_DEFENCES) if "attacks" in r else []


CORES_PHASES = {"produce": "batched produce", "catchup": "catch-up", "produce-small": "batches of 10"}


def _model_ratio(model: dict, phase: str, cores: str, disk: str) -> tuple[float, str] | None:
    row = model.get(phase, {}).get(cores, {}).get(disk)
    return (row["ratio"], row["n_workers"]["bound_by"]) if row else None


def cores(r: dict) -> list[str]:
    if "model" not in r or "1-worker" not in r:
        return []
    n, ref, model, bookies = r["cores"], r["1-worker"], r["model"], r["config"].get("bookies", 3)
    many = r.get(f"{n}-workers")
    produce, small = ref.get("produce", {}), ref.get("produce-small", {})
    lines = ["What the run shows:", ""]
    if many:
        ratios = ", ".join(f"{CORES_PHASES[p]} {many[p]['ratio_to_1_worker']:.2f}x" for p in CORES_PHASES if p in many)
        lines.append(f"- **On this {n}-core box, one worker per core against one worker:** {ratios} (medians of "
                     f"{r['config']['rounds']} round(s); the `rounds` column shows how far single rounds spread).")
    if produce:
        rate = produce["msg_per_s"]
        broker_cores = produce["worker_cpu_s_per_m"] * rate / 1e6
        # A server that keeps under half a core busy is not what bounds the rate on a box with cores to spare.
        headline = ("Batched produce is not bound by the broker." if broker_cores < 0.5 else
                    "Batched produce keeps the broker worker busy.")
        lines.append(
            f"- **{headline}** At the 1-worker produce rate the broker used "
            f"{produce['worker_cpu_s_per_m']:.1f} CPU-seconds per million messages and the {bookies} bookies "
            f"{produce['bookie_cpu_s_per_m']:.1f}, about {produce['worker_cpu_s_per_m'] * rate / 1e6:.2f} and "
            f"{produce['bookie_cpu_s_per_m'] * rate / 1e6:.2f} of a core, while the client processes used "
            f"{produce['client_cpu_s_per_m']:.1f} per million. A batch of 1,000 messages costs the broker one entry"
            + ("; what bounds these rows is the disk's fsync'd journal writes (100 B x Qw 2 per message), the "
               "clients and the shared cores." if broker_cores < 0.5 else "."))
    if small and produce:
        lines.append(
            f"- **Batches of 10** (a hundred times the entries per message) are where the broker's CPU counts: "
            f"{small['worker_cpu_s_per_m']:.1f} CPU-seconds per million against {produce['worker_cpu_s_per_m']:.1f} "
            "batched. On a box this small every extra worker shares the cores with the bookie processes and the "
            "clients, so the gain a free core would give shows only partly.")
    sizes = sorted(next(iter(model.values()), {}), key=int)
    cpu_only = {p: [_model_ratio(model, p, c, "cpu_only") for c in sizes] for p in CORES_PHASES if p in model}
    if sizes and cpu_only:
        described = "; ".join(f"{CORES_PHASES[p]} " + " / ".join(f"{x[0]:.1f}x" for x in v if x)
                              for p, v in cpu_only.items())
        bounds = {x[1] for v in cpu_only.values() for x in v if x}
        disk_bound = _model_ratio(model, "produce", sizes[-1], "this_disk")
        text = (f"- **The model for {' and '.join(sizes)} cores** (table above) uses the 1-worker CPU costs. On CPU "
                f"alone, one worker per core reaches {described} the 1-worker capacity ({' / '.join(sizes)} cores).")
        if disk_bound and disk_bound[1] == "disk":
            text += (f" With one disk like this one, batched produce stays disk-bound ({disk_bound[0]:.1f}x at any "
                     "core count).")
        more = {p: [model[p][c]["cpu_only"].get("n_workers_more_bookies") and
                    (model[p][c]["cpu_only"]["ratio_more_bookies"], model[p][c]["cpu_only"]["n_workers_more_bookies"])
                    for c in sizes] for p in cpu_only}
        if "bookies" in bounds and ref.get("produce-small"):
            costs = ref["produce-small"]
            crossover = bookies * costs["worker_cpu_s_per_m"] / max(costs["bookie_cpu_s_per_m"], 1e-9)
            text += (f" The standalone's {bookies} bookie processes become the limit ({bookies} / bookie cost) once "
                     f"about {max(crossover, 1):.0f} workers run (batches of 10)")
            if all(x for v in more.values() for x in v):
                per_phase = "; ".join(f"{CORES_PHASES[p]} " + " / ".join(
                    f"{ratio:.1f}x (`--bookies {m['bookies']}`)" for ratio, m in v) for p, v in more.items())
                text += (". **`broker standalone --bookies B`** lifts that limit: with B the bookies' share of the "
                         "cores (the fewest, at least 3, with B / bookie cost ≥ cores / (worker + bookie cost)), the "
                         f"cores themselves become the bound and the ratio grows with them: {per_phase} on CPU alone "
                         f"({' / '.join(sizes)} cores).")
                if disk_bound and disk_bound[1] == "disk":
                    text += (" Batched produce on one disk like this one stays disk-bound whatever B is: the bookies "
                             "then need more disks, not more processes.")
            else:
                text += ", so a bigger server needs more bookie processes, or bookies on more disks, before more workers pay."
        text += (" The model counts server CPU only; the measured rates sit below its ceilings, bounded by the disk, "
                 "the shared cores and the clients' own per-message cost.")
        lines.append(text)
    return [*lines, ""]

