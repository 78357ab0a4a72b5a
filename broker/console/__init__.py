"""The operator console's page and the rules behind what it shows (docs/console.md).

The page is plain HTML, CSS and JavaScript in this package's ``static/`` folder (no build step, no CDN),
served at ``/console`` by broker/http/console.py together with the read-only REST it adds under
``/admin/magnetar/v1``; every action the page offers is an existing admin route, so authorization applies
to the console exactly as to the CLI. ``views`` holds the pure functions those endpoints answer with.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
