"""The console in a real browser against a `broker standalone` with token authentication and authorization on:
the page itself is open, and every read and action it makes carries the token typed into its Token field, so
each role sees and does exactly what the admin REST allows it -- nothing without a token, everything as a
superuser, its own tenant's topics (and its actions) as a tenant admin, a refusal in words elsewhere."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from broker.security.tokens import create_token
from storage.testing.processes import VENV_BIN, BrokerProcess
from storage.testing.waiting import wait_until
from tests.console.support import admin, attrs, confirm, open_console, result_of, texts


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A standalone with the token provider, authorization on and the superuser role ``root``; its secret key."""
    root = tmp_path_factory.mktemp("console-secured")
    secret = root / "secret.key"
    subprocess.run([str(VENV_BIN / "broker"), "tokens", "create-secret-key", "--output", str(secret)], check=True)
    broker = BrokerProcess(root / "data", env={
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true", "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token",
        "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{secret}", "MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
        "MAGNETAR_BROKER_SUPER_USER_ROLES": "root"})
    broker.start(timeout_s=60)
    yield broker, secret.read_bytes()
    broker.stop()


def type_token(page, token: str) -> None:
    """Type a token into the Token field and submit it (the page keeps it for the tab and refreshes)."""
    field = page.find_element(By.ID, "auth-token")
    field.clear()
    field.send_keys(token + Keys.ENTER)


def test_every_read_and_action_carries_the_typed_token(page, secured):
    broker, key = secured
    root, alice = create_token(key, "root"), create_token(key, "alice")
    admin(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["alice"], "allowedClusters": ["standalone"]},
          token=root)
    admin(broker, "PUT", "/admin/v2/namespaces/acme/ns", token=root)
    admin(broker, "PUT", "/admin/v2/persistent/acme/ns/t", token=root)
    # With authorization on nothing is created at start: the superuser makes public/default, as an operator would.
    admin(broker, "PUT", "/admin/v2/tenants/public", {"adminRoles": [], "allowedClusters": ["standalone"]}, token=root)
    admin(broker, "PUT", "/admin/v2/namespaces/public/default", token=root)
    admin(broker, "PUT", "/admin/v2/persistent/public/default/guarded", token=root)

    open_console(page, broker, "#/cluster")
    try:
        # No token: the page loads, and each panel says why it has no data.
        wait_until(lambda: "HTTP 401" in texts(page, "#health-body")[0], 30, "the health panel's refusal")
        # A superuser's token: the cluster and its three bookies.
        type_token(page, root)
        wait_until(lambda: len(attrs(page, ".bookie[data-bookie-id]", "data-bookie-id")) == 3, 30, "the bookies")

        # A tenant admin: refused the cluster-wide views (in words), served their own tenant's topic.
        type_token(page, alice)
        wait_until(lambda: "HTTP 403" in texts(page, "#bookies")[0], 30,
                   lambda: f"the bookies panel's refusal (it shows {texts(page, '#bookies')})")
        open_console(page, broker, "#/topic/acme/ns/t")
        wait_until(lambda: attrs(page, "#chain .ledger", "data-ledger-id"), 30, "acme's topic's chain")
        page.find_element(By.ID, "action-unload").click()
        confirm(page)
        assert result_of(page, "Unload").startswith("Unload: done (HTTP 204)")

        # ... and refused another tenant's topic: its data, and its actions, with the broker's reason.
        open_console(page, broker, "#/topic/public/default/guarded")
        wait_until(lambda: "HTTP 403" in texts(page, "#subs")[0], 30, "the refusal of public's topic")
        page.find_element(By.ID, "action-terminate").click()
        confirm(page)
        refused = result_of(page, "Terminate")
        assert refused.startswith("Terminate: failed (HTTP 403)"), refused
        guarded = admin(broker, "GET", "/admin/v2/persistent/public/default/guarded/internalStats", token=root)
        assert guarded["state"] != "Terminated"
    finally:
        type_token(page, "")  # the tab forgets the token


@pytest.mark.parametrize("path", ["/console/../admin/v2/tenants", "/console/%2e%2e/admin/v2/tenants",
                                  "/console/%2e%2e%2fadmin%2fv2%2ftenants", "/console//admin/v2/tenants"])
def test_the_open_console_prefix_opens_no_admin_route(secured, path):
    """Only the console's own files are open: a path that starts with /console/ and names an admin route gets
    no data without a token."""
    broker, _ = secured
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}{path}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    assert status in (401, 404) and b"public" not in body, (status, body[:200])
