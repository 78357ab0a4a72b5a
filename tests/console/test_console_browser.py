"""The operator console in a real browser (Debian chromium, headless) against a real `broker standalone`:
the seed's demo step by step -- bookies in three zones, produce, read the ledger id, unload, see the next
ledger in the chain, a ledger's fragments, the metadata tree -- and a 1,000-topic namespace that loads in
under a second. Every test fails on a JavaScript error in the page's console log (conftest.page)."""

from __future__ import annotations

import concurrent.futures
import json
import re

import pytest
from selenium.webdriver.common.by import By

from storage.testing.waiting import wait_until
from tests.console.support import admin, attrs, click_link, confirm, open_console, result_of, shot, texts

STANDALONE_BOOKIES = {"standalone-bookie-a": "zone-a", "standalone-bookie-b": "zone-b", "standalone-bookie-c": "zone-c"}


@pytest.fixture(scope="module")
def standalone(console_standalone):
    """Every test here runs against a single-process standalone and against one with two workers (conftest)."""
    return console_standalone


def test_cluster_page_shows_the_three_bookies_in_zones_a_b_c(page, standalone, client, screenshots):
    # Some traffic first (on a topic of its own), so the bookies have journal fsyncs to show and a broker a bundle.
    client.create_producer("persistent://public/default/cluster-view").send(b"for the cluster page")
    open_console(page, standalone, "#/cluster")
    ids = wait_until(lambda: len(attrs(page, ".bookie[data-bookie-id]", "data-bookie-id")) == 3
                     and attrs(page, ".bookie[data-bookie-id]", "data-bookie-id"), 30, "three bookies on the page")
    zones = dict(zip(ids, attrs(page, ".bookie[data-bookie-id]", "data-zone")))
    assert zones == STANDALONE_BOOKIES
    # Grouped by zone: each zone's box holds its one bookie.
    for zone in ("zone-a", "zone-b", "zone-c"):
        in_zone = attrs(page, f'div.zone[data-zone="{zone}"] .bookie', "data-bookie-id")
        assert in_zone == [f"standalone-bookie-{zone[-1]}"]
    # ... and within its zone by upgrade domain (the standalone puts each bookie in one of its own).
    assert [texts(page, f'div.zone[data-zone="zone-{z}"] h4') for z in "abc"] == [
        [f"upgrade domain ud{i}"] for i in range(3)]
    assert set(attrs(page, ".bookie", "data-state")) == {"writable"}
    # "Healthy" on a quiet machine; a busy shared one may add an amber fsync or disk finding, never a red one.
    assert wait_until(lambda: texts(page, "#health-status"), 30, "the health verdict")[0] in ("Healthy", "Degraded")
    # One leader among the brokers (one per worker).
    wait_until(lambda: texts(page, "tr[data-broker-id] .badge.green") == ["leader"], 30, "exactly one leader")
    # The write quorum's bookies show the fsync latency of that add (the page polls until they have one).
    wait_until(lambda: sum("(last 0)" not in t and "p99 –" not in t for t in texts(page, ".bookie")) >= 2, 30,
               lambda: f"journal fsync latency on two bookies (page shows {texts(page, '.bookie')})")
    wait_until(lambda: any(not re.search(r"(?<!\d)0 bundles", t) for t in texts(page, "tr[data-broker-id]")), 60,
               "a broker with the topic's bundle (its next load report)")
    shot(page, screenshots, "cluster")

    # A narrow window: the page reflows instead of scrolling sideways.
    page.set_window_size(420, 800)
    try:
        wait_until(lambda: page.execute_script("return window.innerWidth") <= 420, 10, "the window to narrow")
        assert page.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        page.save_screenshot(str(screenshots / "cluster-narrow.png"))
    finally:
        page.set_window_size(1280, 800)


def _ledger_ids(page) -> list[int]:
    return [int(x) for x in attrs(page, "#chain .ledger", "data-ledger-id")]


def test_unload_and_produce_show_a_second_ledger_in_the_chain(page, standalone, client, screenshots):
    producer = client.create_producer("persistent://public/default/test")
    producer.send(b"hello console, before the unload")
    open_console(page, standalone, "#/topic/public/default/test")
    first = wait_until(lambda: _ledger_ids(page), 30, "the topic's ledger chain on the page")
    internal = admin(standalone, "GET", "/admin/v2/persistent/public/default/test/internalStats")
    assert first == [ledger["ledgerId"] for ledger in internal["ledgers"]]
    ledger_id = first[-1]

    # An action asks first: cancelled, nothing happens; confirmed, it is done and the page shows it.
    page.find_element(By.ID, "new-sub").send_keys("from-the-console")
    page.find_element(By.ID, "action-create-sub").click()
    confirm(page, "cancel")
    assert "from-the-console" not in admin(standalone, "GET", "/admin/v2/persistent/public/default/test/subscriptions")
    page.find_element(By.ID, "action-create-sub").click()
    confirm(page)
    wait_until(lambda: attrs(page, "#subs tr[data-subscription]", "data-subscription") == ["from-the-console"], 30,
               "the new subscription in the table")

    page.find_element(By.ID, "action-unload").click()
    dialog = page.find_element(By.ID, "confirm")
    wait_until(lambda: dialog.get_attribute("open") is not None, 10, "the confirmation dialog")
    assert "Unload persistent://public/default/test" in page.find_element(By.ID, "confirm-text").text
    page.find_element(By.ID, "confirm-ok").click()
    result = result_of(page, "Unload")
    assert result.startswith("Unload: done (HTTP 204)"), result

    producer.send(b"hello console, after the unload")  # the client reconnects through lookup, then sends
    chain = wait_until(lambda: len(_ledger_ids(page)) >= 2 and _ledger_ids(page), 30,
                       lambda: f"a second ledger in the chain (page shows {_ledger_ids(page)})")
    assert chain[0] == ledger_id and chain[-1] > ledger_id
    # The message sent after the unload is the new ledger's first entry, and the page shows it there.
    assert admin(standalone, "GET", "/admin/v2/persistent/public/default/test/lastMessageId")["ledgerId"] == chain[-1]
    wait_until(lambda: attrs(page, f'#chain .ledger[data-ledger-id="{chain[-1]}"]', "data-entries") == ["1"], 30,
               "the new ledger's entry on the page")
    assert attrs(page, f'#chain .ledger[data-ledger-id="{ledger_id}"]', "data-state") == ["CLOSED"]
    shot(page, screenshots, "topic")

    # The first ledger's fragment view: its ensemble's bookie ids, and its first entry readable.
    click_link(page, f'#chain .ledger[data-ledger-id="{ledger_id}"] a.ledger-link')
    bookies = wait_until(lambda: attrs(page, "#fragments .chip", "data-bookie-id"), 30, "the ledger's fragments")
    assert bookies and set(bookies) <= set(STANDALONE_BOOKIES), bookies
    assert texts(page, "#ledger-state") == ["CLOSED"]
    page.find_element(By.ID, "read-first").click()
    text = wait_until(lambda: texts(page, "#entry .entry-utf8"), 30, "the first entry")[0]
    assert "hello console, before the unload" in text
    shot(page, screenshots, "ledger")

    # A row's action: the subscription's backlog (the message sent after the unload) is cleared. (Last: with
    # nothing left to read in it, the first ledger may then leave the chain.)
    open_console(page, standalone, "#/topic/public/default/test")
    wait_until(lambda: texts(page, 'tr[data-subscription="from-the-console"] td.num')[:1] == ["1"], 30,
               "a backlog of one on the page")
    click_link(page, 'button[data-sub="from-the-console"][data-act="clear"]')
    confirm(page)
    assert result_of(page, "Clear backlog").startswith("Clear backlog: done")
    stats = admin(standalone, "GET", "/admin/v2/persistent/public/default/test/stats")
    assert stats["subscriptions"]["from-the-console"]["msgBacklog"] == 0


def test_metadata_browser_opens_at_managed_ledgers(page, standalone, client, screenshots):
    client.create_producer("persistent://public/default/test").send(b"x")
    open_console(page, standalone, "#/metadata?path=%2Fmanaged-ledgers")
    children = wait_until(lambda: texts(page, "#children a"), 30, "the children of /managed-ledgers")
    assert "public" in children
    assert texts(page, "#crumbs")[0].replace(" ", "") == "//managed-ledgers"
    for name in ("public", "default", "persistent", "test"):
        wait_until(lambda: name in texts(page, "#children a"), 30, f"{name} among the children")
        click_link(page, "#children a", name)
    data = wait_until(lambda: texts(page, "#node-data") and "ledgers" in texts(page, "#node-data")[0]
                      and texts(page, "#node-data")[0], 30, "the topic's managed-ledger node")
    assert json.loads(data)["ledgers"]
    assert int(texts(page, "#node-version")[0]) >= 0
    assert texts(page, "#node-ephemeral") == ["persistent"]
    shot(page, screenshots, "metadata")


def test_a_namespace_of_1000_topics_loads_in_under_a_second(page, standalone, screenshots):
    admin(standalone, "PUT", "/admin/v2/namespaces/public/thousand")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for first in range(0, 1000, 250):
            list(pool.map(lambda i: admin(standalone, "PUT", f"/admin/v2/persistent/public/thousand/t-{i:04d}"),
                          range(first, first + 250)))
            # Unloaded as they go: creating a topic gets slower with every topic loaded, and the list must not
            # need them loaded anyway (it never loads one).
            admin(standalone, "PUT", "/admin/v2/namespaces/public/thousand/unload")
    open_console(page, standalone, "#/topics?ns=public%2Fthousand")
    rendered_ms = wait_until(lambda: page.execute_script("return window.consoleTopicsRenderedMs"), 30,
                             "the first page of topics")
    print(f"1,000-topic namespace: first page rendered {rendered_ms:.0f} ms after navigation")
    assert rendered_ms < 1000, f"the topics page took {rendered_ms:.0f} ms from navigation to its first rows"
    shown = texts(page, "#view")[0]
    assert "1,000 topics; showing 1–50" in shown, shown[:2000]
    assert len(texts(page, "#topics-rows tr")) == 50
    shot(page, screenshots, "topics")
    # A refused action says why: no broker owns these bundles (their topics were unloaded), so none can split one.
    click_link(page, 'button[data-act="split"]')
    confirm(page)
    refused = result_of(page, "Split bundle")
    assert refused.startswith("Split bundle: failed (HTTP 409)") and "not owned by any broker" in refused, refused
    page.find_element(By.ID, "next").click()
    wait_until(lambda: any("showing 51–100" in t for t in texts(page, "#topics-count")), 30, "the second page")
    assert texts(page, "#topics-rows tr td a")[0] == "t-0050"
