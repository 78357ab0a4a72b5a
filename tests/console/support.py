"""What the console's tests share: opening a page, reading the page in one script (a poll may redraw it between
two WebDriver calls), clicking in redrawn regions, answering the confirmation dialog, screenshots; the admin REST
the tests check the page against, and switching a bookie read-only."""

from __future__ import annotations

import json
import urllib.request

from storage.testing.waiting import wait_until


def open_console(page, standalone, fragment: str) -> None:
    page.get("about:blank")  # a fresh document each time: no state carried over from the previous page
    page.get(f"http://127.0.0.1:{standalone.http_port}/console/{fragment}")


# Read in one script, so a poll that redraws the page between two WebDriver calls leaves no stale element.
def texts(page, css: str) -> list[str]:
    return page.execute_script("return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", css)


def attrs(page, css: str, name: str) -> list[str]:
    return page.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]))", css, name)


def click_link(page, css: str, text: str | None = None) -> None:
    """Click a link inside a region the poll redraws (found and clicked in one script)."""
    wait_until(lambda: page.execute_script(
        "const a = [...document.querySelectorAll(arguments[0])].find((e) => arguments[1] === null || "
        "e.innerText === arguments[1]); if (a) a.click(); return !!a;", css, text), 15,
        lambda: f"{css} {text or ''} on the page (it shows: {texts(page, '#view')[0][-600:]!r})")


def shot(page, screenshots, name: str) -> None:
    """A screenshot of the whole page at 1280 wide (the window grows to the page's height, then goes back)."""
    for _ in range(2):  # the second look measures at the new width's own layout
        height = page.execute_script("return document.documentElement.scrollHeight")
        page.set_window_size(1280, min(max(height + 120, 800), 2400))
    try:
        page.save_screenshot(str(screenshots / f"{name}.png"))
    finally:
        page.set_window_size(1280, 800)


def admin(standalone, method: str, path: str, body=None, token: str | None = None):
    """Call the broker's REST (a JSON ``body``, a bearer ``token`` when given); its JSON answer, or None."""
    data = None if body is None else json.dumps(body).encode()
    headers = {**({"Content-Type": "application/json"} if data else {}),
               **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{standalone.http_port}{path}", data=data, method=method,
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        raw = answer.read()
    return json.loads(raw) if raw else None


def confirm(page, answer: str = "ok") -> None:
    """Wait for the confirmation dialog an action opens, then press Confirm (``ok``) or Cancel (``cancel``)."""
    wait_until(lambda: page.execute_script("return document.getElementById('confirm').open"), 10, "the dialog")
    page.execute_script("document.getElementById(arguments[0]).click()", f"confirm-{answer}")


def result_of(page, title: str) -> str:
    """The status message of the action called ``title``, once it has one."""
    return wait_until(lambda: next((t for t in texts(page, "#toast:not([hidden])") if t.startswith(f"{title}:")),
                                   None), 30, f"the result of {title}")


def set_bookie_read_only(standalone, bookie_id: str, read_only: bool | None) -> None:
    """Force a standalone bookie read-only (True), writable (False), or back to its own judgement (None), through
    its HTTP API at the address the console's bookie list gives."""
    bookie = next(b for b in admin(standalone, "GET", "/admin/magnetar/v1/bookies")["bookies"]
                  if b["bookieId"] == bookie_id)
    request = urllib.request.Request(f"http://{bookie['httpAddress']}/api/v1/bookie/state/readonly", method="PUT",
                                     data=json.dumps({"readOnly": read_only}).encode())
    urllib.request.urlopen(request, timeout=30).read()
