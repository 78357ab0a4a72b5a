"""The console in a real browser (Debian chromium, headless) against a real `broker standalone`, beyond the seed's
demo: every topic and bundle action asks first and shows what the broker answered; the live chart plots the rates
of polled stats; a bookie forced read-only under an open ledger gives that ledger a second fragment, whose ensemble
the chain shows; and every main page reads only the endpoints docs/console.md lists, keeps its text at 4.5:1
contrast and fits a narrow window. Any JavaScript error fails a test (conftest.page)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pulsar
import pytest
from selenium.webdriver.common.by import By

from storage.testing.waiting import wait_until
from tests.console.support import (admin, attrs, click_link, confirm, open_console, result_of, set_bookie_read_only,
                                   shot, texts)

V1 = "/admin/magnetar/v1"
CONSOLE_DOC = Path(__file__).resolve().parents[2] / "docs" / "console.md"
BOOKIES = ("standalone-bookie-a", "standalone-bookie-b", "standalone-bookie-c")


@pytest.fixture(scope="module")
def standalone(console_standalone):
    """Every test here runs against a single-process standalone and against one with two workers (conftest)."""
    return console_standalone


def polled(page, times: int = 1) -> None:
    """Wait until the shown page has refreshed ``times`` times (its first poll runs as it opens)."""
    wait_until(lambda: int(page.execute_script("return document.body.dataset.refreshed || '0'")) >= times, 30,
               f"{times} refresh(es) of the page")


def chart_series(page) -> dict[str, list[tuple[float, float]]]:
    """The live chart's lines: series name -> its points in SVG coordinates (y grows downwards)."""
    lines = page.execute_script("""return [...document.querySelectorAll('#charts polyline')].map(
        (p) => [p.querySelector('title').textContent, p.getAttribute('points')]);""")
    return {name: [tuple(map(float, xy.split(","))) for xy in points.split()] for name, points in lines}


def baseline(page) -> float:
    """The y of the charts' zero line (the first horizontal axis line drawn)."""
    return float(page.execute_script("return document.querySelector('#charts line.axis').getAttribute('y1')"))


def sub_backlog(page, sub: str) -> list[str]:
    return texts(page, f'tr[data-subscription="{sub}"] td.num')[:1]


def test_the_live_chart_and_every_topic_action(page, standalone, client):
    path = "/admin/v2/persistent/public/default/actions"
    admin(standalone, "PUT", f"{path}/subscription/audit")
    producer = client.create_producer("persistent://public/default/actions", batching_enabled=False)
    open_console(page, standalone, "#/topic/public/default/actions")
    polled(page)
    page.execute_script("window.sameDocument = true")  # gone if anything below reloaded the page

    # Messages between two polls: the next poll's difference of msgInCounter is a rate above zero, plotted.
    for i in range(20):
        producer.send(f"message {i}".encode())
    zero = baseline(page)
    wait_until(lambda: any(y < zero for _, y in chart_series(page).get("in", [])), 30, "a rate in above zero")
    wait_until(lambda: any(y < zero for _, y in chart_series(page).get("backlog", [])), 30, "the backlog plotted")
    assert texts(page, "#backlog") == ["20"] and sub_backlog(page, "audit") == ["20"]

    # Reset cursor: after the backlog was skipped, back to the first message of the last 10 minutes.
    admin(standalone, "POST", f"{path}/subscription/audit/skip_all")
    wait_until(lambda: sub_backlog(page, "audit") == ["0"], 30, "the skipped backlog on the page")
    page.find_element(By.ID, "reset-minutes").clear()
    page.find_element(By.ID, "reset-minutes").send_keys("10")
    click_link(page, 'button[data-sub="audit"][data-act="reset"]')
    confirm(page)
    assert result_of(page, "Reset cursor").startswith("Reset cursor: done (HTTP 204)")
    wait_until(lambda: sub_backlog(page, "audit") == ["20"], 30, "the backlog back after the reset")

    # Delete subscription: its row goes.
    click_link(page, 'button[data-sub="audit"][data-act="delete"]')
    confirm(page)
    assert result_of(page, "Delete subscription").startswith("Delete subscription: done (HTTP 204)")
    wait_until(lambda: not attrs(page, "tr[data-subscription]", "data-subscription"), 30, "the row to go")
    assert "audit" not in str(admin(standalone, "GET", f"{path}/subscriptions"))

    # Compact, then Terminate: the chain says so, and the producer is refused.
    page.find_element(By.ID, "action-compact").click()
    confirm(page)
    assert result_of(page, "Compact").startswith("Compact: done (HTTP 204)")
    page.find_element(By.ID, "action-terminate").click()
    confirm(page)
    assert result_of(page, "Terminate").startswith("Terminate: done (HTTP 200)")
    wait_until(lambda: "terminated" in texts(page, "#ledgers")[0], 30, "the chain to say the topic is terminated")
    assert admin(standalone, "GET", f"{path}/internalStats")["state"] == "Terminated"
    # Every change above reached the page by polling, in the same document.
    assert page.execute_script("return window.sameDocument") is True


def test_a_subscriptions_cursor_in_its_row_and_the_rate_out_in_the_chart(page, standalone, client):
    topic = "persistent://public/default/cursors"
    consumer = client.subscribe(topic, "shared-sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    open_console(page, standalone, "#/topic/public/default/cursors")
    polled(page)
    for i in range(5):
        producer.send(f"m{i}".encode())
    received = [consumer.receive(timeout_millis=15_000) for _ in range(5)]
    # Dispatched between two polls: the chart's line out rises above zero too.
    zero = baseline(page)
    wait_until(lambda: any(y < zero for _, y in chart_series(page).get("out", [])), 30, "a rate out above zero")
    consumer.acknowledge(received[1])  # two holes: entries 1 and 3 acknowledged, 0, 2 and 4 not
    consumer.acknowledge(received[3])
    internal = "/admin/v2/persistent/public/default/cursors/internalStats"

    def row() -> dict[str, str]:
        cells = texts(page, 'tr[data-subscription="shared-sub"] td')
        names = ("name", "type", "backlog", "unacked", "markDelete", "read", "ackedRanges", "consumers")
        return dict(zip(names, cells)) if cells else {}

    shown = wait_until(lambda: (r := row()).get("ackedRanges") == "2" and r, 30,
                       lambda: f"two individually acknowledged ranges in the row (it shows {row()})")
    cursor = admin(standalone, "GET", internal)["cursors"]["shared-sub"]
    assert (shown["type"], shown["backlog"], shown["unacked"], shown["consumers"]) == ("Shared", "3", "3", "1")
    assert shown["markDelete"] == cursor["markDeletePosition"] and shown["read"] == cursor["readPosition"]
    # The first message acknowledged too: the mark-delete moves over entries 0 and 1, one range is left.
    consumer.acknowledge(received[0])
    ledger = int(cursor["markDeletePosition"].split(":")[0])
    moved = wait_until(lambda: (r := row()).get("markDelete") == f"{ledger}:1" and r, 30,
                       lambda: f"the mark-delete moved to {ledger}:1 (the row shows {row()})")
    assert (moved["ackedRanges"], moved["backlog"], moved["unacked"]) == ("1", "2", "2")
    consumer.close()


def test_tenants_then_namespaces_then_topics(page, standalone):
    admin(standalone, "PUT", "/admin/v2/tenants/walk", {"adminRoles": [], "allowedClusters": ["standalone"]})
    for ns in ("ns-a", "ns-b"):
        admin(standalone, "PUT", f"/admin/v2/namespaces/walk/{ns}")
    admin(standalone, "PUT", "/admin/v2/persistent/walk/ns-b/t1")
    open_console(page, standalone, "#/topics")
    choose(page, "tenant", "walk")  # a tenant opens at its first namespace
    wait_until(lambda: texts(page, "#topics-count") == ["0 topics; showing 0–0"], 30, "walk/ns-a, empty")
    choose(page, "namespace", "walk/ns-b")
    wait_until(lambda: texts(page, "#topics-rows tr td a") == ["t1"], 30, "walk/ns-b's topic")
    click_link(page, "#topics-rows tr td a", "t1")
    wait_until(lambda: texts(page, "#page-title") == ["Topic persistent://walk/ns-b/t1"], 30, "the topic's page")


def choose(page, select_id: str, value: str) -> None:
    """Pick an option of a select the page fills in after it loads (waiting for the option first)."""
    wait_until(lambda: page.execute_script(
        "const s = document.getElementById(arguments[0]); const o = s && [...s.options].find((o) => o.value === "
        "arguments[1]); if (!o) return false; s.value = arguments[1]; s.dispatchEvent(new Event('change')); "
        "return true;", select_id, value), 30, f"option {value} of #{select_id}")


def test_a_bundle_is_split_then_unloaded_from_the_namespace_page(page, standalone):
    admin(standalone, "PUT", "/admin/v2/namespaces/public/bundles")
    admin(standalone, "PUT", "/admin/v2/persistent/public/bundles/t")  # creating it loads it: its bundle is owned

    def owned() -> list[str]:
        return sorted(b.rsplit("/", 1)[1] for broker in admin(standalone, "GET", f"{V1}/brokers")["brokers"]
                      for b in broker["bundles"] if b.startswith("public/bundles/"))

    bundle = wait_until(owned, 30, "the topic's bundle owned")[0]
    open_console(page, standalone, "#/topics?ns=public%2Fbundles")
    wait_until(lambda: texts(page, f'tr[data-bundle="{bundle}"] td.owner') not in ([], ["not owned"]), 30,
               "the bundle's owner on the page")
    wait_until(lambda: texts(page, '#topics-rows tr[data-topic] .badge') == ["loaded"], 30, "the topic, loaded")
    shown = len(attrs(page, "tr[data-bundle]", "data-bundle"))

    # Split: the owner keeps both halves, and the table has one bundle more.
    click_link(page, f'button[data-bundle="{bundle}"][data-act="split"]')
    confirm(page)
    assert result_of(page, "Split bundle").startswith("Split bundle: done (HTTP 204)")
    wait_until(lambda: len(attrs(page, "tr[data-bundle]", "data-bundle")) == shown + 1, 30, "the two halves shown")
    halves = owned()
    assert len(halves) == 2 and bundle not in halves, halves

    # Unload one half: it is shown as owned by nobody, and no broker reports it.
    half = halves[0]
    owner = f'tr[data-bundle="{half}"] td.owner'
    wait_until(lambda: texts(page, owner) not in ([], ["not owned"]), 30, "the half's owner on the page")
    click_link(page, f'button[data-bundle="{half}"][data-act="unload"]')
    confirm(page)
    assert result_of(page, "Unload bundle").startswith("Unload bundle: done (HTTP 204)")
    wait_until(lambda: texts(page, owner) == ["not owned"], 30, "the half shown as not owned")
    assert half not in owned()


def test_the_namespace_backlog_cleared_then_the_namespace_unloaded_from_its_page(page, standalone, client):
    admin(standalone, "PUT", "/admin/v2/namespaces/public/nsactions")
    topics = [f"persistent://public/nsactions/t{i}" for i in range(2)]
    for topic in topics:
        client.subscribe(topic, "s").close()  # a durable subscription, left behind with a backlog
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        producer.close()

    def backlogs() -> list[int]:
        return [admin(standalone, "GET", f"/admin/v2/persistent/{t.removeprefix('persistent://')}/stats")
                ["subscriptions"]["s"]["msgBacklog"] for t in topics]

    assert backlogs() == [3, 3]
    open_console(page, standalone, "#/topics?ns=public%2Fnsactions")
    wait_until(lambda: len(texts(page, "#topics-rows tr")) == 2, 30, "the namespace's two topics")
    page.find_element(By.ID, "ns-clear-backlog").click()
    confirm(page)
    assert result_of(page, "Clear backlog").startswith("Clear backlog: done (HTTP 204)")
    assert backlogs() == [0, 0]

    def owned() -> list[str]:
        return [b for broker in admin(standalone, "GET", f"{V1}/brokers")["brokers"] for b in broker["bundles"]
                if b.startswith("public/nsactions/")]

    wait_until(owned, 30, "the namespace's bundle owned")
    page.find_element(By.ID, "ns-unload").click()
    confirm(page)
    assert result_of(page, "Unload namespace").startswith("Unload namespace: done (HTTP 204)")
    wait_until(lambda: texts(page, "#topics-rows tr[data-topic] td:nth-child(2)") == ["not loaded here"] * 2, 30,
               "both topics shown as not loaded")
    wait_until(lambda: owned() == [], 30, "no broker reporting the namespace's bundle (its next load report)")


def test_health_turns_red_with_its_reason_when_too_few_bookies_are_writable(page, standalone, screenshots):
    open_console(page, standalone, "#/cluster")
    polled(page)
    forced = BOOKIES[:2]
    for bookie in forced:
        set_bookie_read_only(standalone, bookie, True)
    try:
        wait_until(lambda: texts(page, "#health-status") == ["Failing"], 30,
                   lambda: f"the health verdict Failing (the page shows {texts(page, '#health-body')})")
        findings = texts(page, "#health-body li")
        red = "red bookies: 1 writable bookie, but new ledgers need an ensemble of 2"
        assert any(f.startswith(red) for f in findings), findings
        for bookie in forced:
            assert any(f.startswith(f"amber bookie {bookie}: read-only") for f in findings), findings
        assert attrs(page, ".bookie[data-state]", "data-state") == ["readonly", "readonly", "writable"]
        shot(page, screenshots, "cluster-failing")
    finally:
        for bookie in forced:
            set_bookie_read_only(standalone, bookie, None)
    wait_until(lambda: texts(page, "#health-status") != ["Failing"], 30, "the red finding to go")


def test_a_second_fragment_after_a_bookie_turns_read_only_shows_in_the_chain(page, standalone, client, screenshots):
    producer = client.create_producer("persistent://public/default/fragments", batching_enabled=False)
    producer.send(b"before the ensemble change")
    chain = admin(standalone, "GET", f"{V1}/persistent/public/default/fragments/ledgers")
    ledger = chain["ledgers"][-1]
    ensemble = [b["bookieId"] for b in ledger["metadata"]["fragments"][0]["ensemble"]]
    victim, spare = ensemble[0], next(b for b in BOOKIES if b not in ensemble)
    set_bookie_read_only(standalone, victim, True)
    try:
        # The ledger's writer replaces the read-only bookie with the spare one from the next entry on.
        producer.send(b"after the ensemble change")
        open_console(page, standalone, "#/topic/public/default/fragments")
        box = f'#chain .ledger[data-ledger-id="{ledger["ledgerId"]}"]'
        wait_until(lambda: attrs(page, f"{box} .fragment", "data-first-entry") == ["0", "1"], 30,
                   lambda: f"two fragments in the chain (page shows {texts(page, '#ledgers')})")
        first = attrs(page, f'{box} .fragment[data-first-entry="0"] .chip', "data-bookie-id")
        second = attrs(page, f'{box} .fragment[data-first-entry="1"] .chip', "data-bookie-id")
        assert sorted(first) == sorted(ensemble)
        assert victim not in second and spare in second and len(second) == len(ensemble)
        # Coloured by zone: each chip's colour class is its zone's, and every write set meets the zone rule.
        zones = {b["bookieId"]: b["zone"] for b in admin(standalone, "GET", f"{V1}/bookies")["bookies"]}
        chips = page.execute_script(f"""return [...document.querySelectorAll('{box} .fragment .chip')].map(
            (c) => [c.dataset.bookieId, c.className, c.title]);""")
        assert all(title == f"zone {zones[bookie]}" for bookie, _, title in chips), chips
        assert len({cls for _, cls, _ in chips}) == len({zones[b] for b, _, _ in chips}), chips
        assert attrs(page, f"{box} .fragment", "data-meets-zone-rule") == ["true", "true"]
        shot(page, screenshots, "topic-fragments")
    finally:
        set_bookie_read_only(standalone, victim, None)


# ---- every main page: documented endpoints, contrast, both widths ----------------------------------------------


def documented_reads() -> list[re.Pattern]:
    """The endpoints docs/console.md's page table says each page reads, as patterns over request paths."""
    section = CONSOLE_DOC.read_text().split("## Pages", 1)[1].split("\n\n", 2)[1]
    templates = re.findall(r"`GET (/[^`\s?]+)", section)
    assert len(templates) >= 10, templates
    return [re.compile(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(t)) + "$") for t in templates]


# Text below 4.5:1 against what it is drawn on (3:1 for large text), WCAG 2's contrast ratio.
LOW_CONTRAST = """
const rgba = (s) => { const m = s.match(/[\\d.]+/g).map(Number); return m.length === 3 ? [...m, 1] : m; };
const lum = ([r, g, b]) => [r, g, b]
  .map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
  .reduce((s, c, i) => s + c * [0.2126, 0.7152, 0.0722][i], 0);
const over = (top, under) => top.slice(0, 3).map((c, i) => c * top[3] + under[i] * (1 - top[3]));
function background(e) {
  const layers = [];
  for (; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0) layers.push(c);
    if (c[3] === 1) break;
  }
  return layers.reverse().reduce((under, top) => over(top, under), [255, 255, 255]);
}
const low = [];
for (const e of document.querySelectorAll("body *")) {
  if (e.closest("svg, script, style, option") || !e.getClientRects().length) continue;
  if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
  const style = getComputedStyle(e);
  if (style.visibility !== "visible") continue;
  const bg = background(e);
  const fg = over(rgba(style.color), bg);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  const text = e.textContent.trim().slice(0, 40);
  if (ratio < (large ? 3 : 4.5)) low.push(`${ratio.toFixed(2)}:1 ${e.tagName}.${e.className} "${text}"`);
}
return low;"""

FETCHED = """return performance.getEntriesByType("resource").filter((e) => e.initiatorType === "fetch")
  .map((e) => new URL(e.name).pathname);"""

FOREIGN = """return performance.getEntriesByType("resource").map((e) => e.name)
  .filter((u) => new URL(u).origin !== location.origin);"""


def test_every_main_page_reads_documented_endpoints_keeps_contrast_and_fits_a_narrow_window(page, standalone, client):
    producer = client.create_producer("persistent://public/default/pages", batching_enabled=False)
    for i in range(5):  # an open ledger's entries are readable up to the last add confirmed the bookies know of
        producer.send(f"a page of its own, {i}".encode())
    internal = admin(standalone, "GET", "/admin/v2/persistent/public/default/pages/internalStats")
    ledger_id = internal["ledgers"][-1]["ledgerId"]
    pages = ["#/cluster", "#/topics?ns=public%2Fdefault", "#/topic/public/default/pages", f"#/ledger/{ledger_id}",
             "#/metadata?path=%2Fmanaged-ledgers%2Fpublic%2Fdefault%2Fpersistent%2Fpages"]
    reads = documented_reads()
    fetched: set[str] = set()
    try:
        for width in (1280, 420):
            page.set_window_size(width, 800)
            wait_until(lambda: page.execute_script("return window.innerWidth") <= width, 10, "the window's width")
            for fragment in pages:
                open_console(page, standalone, fragment)
                polled(page)
                wait_until(lambda: "loading…" not in texts(page, "#view")[0], 30, f"{fragment} drawn")
                if fragment.startswith("#/ledger/"):
                    page.find_element(By.ID, "read-first").click()  # the entry's hex and text are checked too
                    wait_until(lambda: texts(page, "#entry .entry-hex"), 30,
                               lambda: f"the first entry (the page shows {texts(page, '#entry')})")
                    assert "a page of its own, 0" in texts(page, "#entry .entry-utf8")[0]
                    page.find_element(By.ID, "read-last").click()
                    wait_until(lambda: "a page of its own, 0" not in texts(page, "#entry")[0]
                               and "a page of its own" in texts(page, "#entry")[0], 30, "the last entry")
                low = page.execute_script(LOW_CONTRAST)
                assert not low, f"{fragment} at {width} px: text below the contrast minimum: {low}"
                assert page.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), \
                    f"{fragment} scrolls sideways at {width} px"
                fetched |= set(page.execute_script(FETCHED))
                # No CDN: every file and request of the page comes from the broker that served it.
                assert page.execute_script(FOREIGN) == [], f"{fragment} loaded from elsewhere"
    finally:
        page.set_window_size(1280, 800)
    undocumented = sorted(p for p in fetched if not any(r.match(urllib.parse.unquote(p)) for r in reads))
    assert not undocumented, f"the console read endpoints docs/console.md does not list: {undocumented}"
    assert len(fetched) >= 10, fetched
