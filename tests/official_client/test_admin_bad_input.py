"""Every admin route answers bad bodies and bad path parameters with a 4xx that names the problem, never a 500.

The routes come from the broker's own app (so a new route is covered the day it is added); each is called on a
real standalone broker with a table of malformed bodies, and with path parameters that are invalid names.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from broker.http import build_app

BAD_BODIES = [
    b"{not json",
    b"null",
    b"[]",
    b'"a string"',
    b"-1",
    b"1e400",
    b'{"a": ' * 200 + b"1" + b"}" * 200,  # deep nesting
    json.dumps({"adminRoles": "not-a-list", "allowedClusters": 7, "retentionTimeInMinutes": "x",
                "retentionSizeInMB": [], "auth_policies": 5, "serviceUrl": 3}).encode(),
    json.dumps(["produce", 7, None]).encode(),
    b"x" * (2 * 1024 * 1024),  # over the body limit
]
GOOD_PARAMS = {"tenant": "public", "ns": "default", "topic": "bad-input-topic", "bundle": "0x00000000_0x40000000",
               "sub": "s", "timestamp": "0", "role": "someone", "policy": "retention", "cluster": "standalone"}
BAD_PARAMS = {"tenant": "bad$tenant", "ns": "bad/../ns", "topic": "%00", "bundle": "0xzz_0x10",
              "timestamp": "not-a-number", "role": "x" * 5000, "policy": "no-such-policy", "cluster": "bad name",
              "sub": "%00"}


def _routes():
    app = build_app(service=None)
    seen = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path and route.method in ("GET", "PUT", "POST", "DELETE") and (route.method, path) not in seen:
            seen.add((route.method, path))
            yield route.method, path


ROUTES = sorted(_routes())


def _call(broker, method: str, path: str, body: bytes | None):
    req = urllib.request.Request(f"{broker.web_url}{path}", data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _fill(path: str, params: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: urllib.request.quote(params.get(m.group(1), GOOD_PARAMS.get(m.group(1), "x")), safe=""), path)


@pytest.mark.parametrize("method, path", [r for r in ROUTES if r[0] in ("PUT", "POST")])
def test_bad_bodies_get_a_4xx(standalone, method, path):
    url = _fill(path, GOOD_PARAMS)
    for body in BAD_BODIES:
        status, answer = _call(standalone, method, url, body)
        assert status < 500, f"{method} {url} with {body[:40]!r}: {status} {answer[:300]!r}"


@pytest.mark.parametrize("method, path", [r for r in ROUTES if "{" in r[1]])
def test_bad_path_parameters_get_a_4xx(standalone, method, path):
    for name in re.findall(r"\{(\w+)\}", path):
        url = _fill(path, {name: BAD_PARAMS.get(name, "%00")})
        status, answer = _call(standalone, method, url, b"{}" if method in ("PUT", "POST") else None)
        assert status < 500, f"{method} {url}: {status} {answer[:300]!r}"
