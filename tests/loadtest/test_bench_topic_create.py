"""The broker bench's idle-topic creation rides out a bundle split: "look the topic up again" is tried again, and a
409 after such a try counts as created; any other error stops the bench."""

from __future__ import annotations

import http.server
import threading
import urllib.error

import pytest

from loadtest.bench.broker import _create_topic


def _server(answers: list[tuple[int, bytes]]):
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            seen.append(self.path)
            code, body = answers.pop(0)
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


SPLIT = (500, b'{"reason": "bundle public/default/0x80000000_0xa0000000 is being unloaded; look the topic up again"}')


@pytest.mark.parametrize("answers, tries", [
    ([(204, b"")], 1),
    ([SPLIT, SPLIT, (204, b"")], 3),
    ([SPLIT, (409, b'{"reason": "topic exists"}')], 2),  # the refused try had made it after all
])
def test_a_split_is_ridden_out(answers, tries):
    server, seen = _server(list(answers))
    try:
        _create_topic(f"http://127.0.0.1:{server.server_port}/admin/v2/persistent/public/default/idle-1")
    finally:
        server.shutdown()
    assert len(seen) == tries


@pytest.mark.parametrize("answer", [(409, b'{"reason": "topic exists"}'), (500, b'{"reason": "PersistenceError: x"}')])
def test_other_errors_stop_the_bench(answer):
    server, _ = _server([answer])
    try:
        with pytest.raises(urllib.error.HTTPError):
            _create_topic(f"http://127.0.0.1:{server.server_port}/admin/v2/persistent/public/default/idle-1")
    finally:
        server.shutdown()
