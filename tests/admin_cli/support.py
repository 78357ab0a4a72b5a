"""Run the real `magnetar-admin` console script as a subprocess, as an operator or a script would."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass

from storage.testing.processes import VENV_BIN

ADMIN = str(VENV_BIN / "magnetar-admin")


@dataclass
class Run:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def ok(self) -> "Run":
        assert self.returncode == 0, f"magnetar-admin {' '.join(self.args)} exited {self.returncode}: {self.stderr}"
        return self

    def json(self):
        return json.loads(self.ok().stdout)

    def lines(self) -> list[str]:
        return self.ok().stdout.splitlines()


def run(*args: str, url: str | None = None, env: dict | None = None, timeout_s: float = 60) -> Run:
    """``magnetar-admin [--admin-url URL] ARGS...``; PULSAR_CLIENT_CONF is cleared unless ``env`` sets it."""
    argv = [ADMIN, *(["--admin-url", url] if url else []), *args]
    full_env = {k: v for k, v in os.environ.items() if k != "PULSAR_CLIENT_CONF"}
    full_env.update(env or {})
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=full_env)
    return Run(tuple(args), proc.returncode, proc.stdout, proc.stderr)


class Admin:
    """``magnetar-admin`` pointed at one broker."""

    def __init__(self, url: str, *global_args: str, env: dict | None = None):
        self.url, self.global_args, self.env = url, global_args, env

    def __call__(self, *args: str) -> Run:
        return run(*self.global_args, *args, url=self.url, env=self.env)
