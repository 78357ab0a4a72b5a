"""The console's browser tests: one headless Debian chromium (through chromium-driver and Selenium) shared by the
session, and a check after every test that the page logged no JavaScript error."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Flags this machine needs: no sandbox (root), no GPU, and nothing that reaches beyond loopback.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,800")


def js_errors(entries: list[dict]) -> list[dict]:
    """Errors the page's JavaScript raised or logged, and any console file that failed to load. (API answers
    such as a 404 the page shows in words are the page working, not a JS error.)"""
    return [e for e in entries if e.get("level") == "SEVERE"
            and (e.get("source") in ("javascript", "console-api") or "/console/" in e.get("message", ""))]


@pytest.fixture(scope="session")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail("chromium and chromium-driver are needed (make test installs them: apt-get install chromium "
                    "chromium-driver)")
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


# Form controls without a label or accessible name, and buttons or links without text, on the current page.
UNNAMED = """return [...document.querySelectorAll("input, select, textarea, button, a[href]")]
  .filter((e) => e.offsetParent !== null || e.closest("dialog[open]"))
  .filter((e) => ["INPUT", "SELECT", "TEXTAREA"].includes(e.tagName)
    ? !(e.labels && e.labels.length) && !e.getAttribute("aria-label")
    : !e.innerText.trim() && !e.getAttribute("aria-label"))
  .map((e) => e.outerHTML.slice(0, 120));"""


@pytest.fixture
def page(browser):
    """The shared browser, its console log drained before the test; after it, the log is checked for JS errors
    and the page it ended on for unlabelled controls."""
    browser.get_log("browser")
    yield browser
    errors = js_errors(browser.get_log("browser"))
    assert not errors, f"the console logged JavaScript errors: {errors}"
    if browser.current_url.startswith("http"):
        unnamed = browser.execute_script(UNNAMED)
        assert not unnamed, f"controls without a label or name: {unnamed}"


@pytest.fixture(scope="module", params=["single-process", "two-workers"])
def console_standalone(request, tmp_path_factory):
    """The standalone the browser tests drive, both ways it runs: one process (``--single-process``, the harness's
    default), and a supervisor with two broker workers (what a bare ``broker standalone`` and ``make run`` give
    on two cores), where the topic or bundle a test acts on may be served by the worker that is not serving the
    page."""
    from storage.testing.processes import BrokerProcess

    workers = 2 if request.param == "two-workers" else None
    broker = BrokerProcess(tmp_path_factory.mktemp(f"console-{request.param}") / "data", workers=workers)
    broker.start(timeout_s=90)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """Where the tests save a screenshot of each main page: a session tmp dir, or $MAGNETAR_CONSOLE_SCREENSHOTS
    (docs/console/ to refresh the images docs/console.md shows)."""
    chosen = os.environ.get("MAGNETAR_CONSOLE_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
