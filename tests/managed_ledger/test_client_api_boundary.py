"""The managed ledger and the broker know the ledger client only by its API (storage.client.api).

Walks their imports with ``ast``: importing ``storage.client`` itself is allowed for
``api`` and ``ClientConfig`` only; any other name (LedgerClient, LedgerHandle, ...)
or any other module of the package is the implementation.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_MODULES = {"storage.client.api"}
ALLOWED_FROM_PACKAGE = {"api", "ClientConfig"}


def _violations(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "storage.client":
                out += [f"{path}: from storage.client import {a.name}" for a in node.names if a.name not in ALLOWED_FROM_PACKAGE]
            elif node.module.startswith("storage.client.") and node.module not in ALLOWED_MODULES:
                out.append(f"{path}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            out += [f"{path}: import {a.name}" for a in node.names
                    if a.name.startswith("storage.client") and a.name not in ALLOWED_MODULES]
    return out


def test_the_managed_ledger_and_the_broker_import_only_the_client_api():
    files = sorted((ROOT / "storage" / "managed_ledger").rglob("*.py")) + sorted((ROOT / "broker").rglob("*.py"))
    assert len(files) > 20
    assert [v for f in files for v in _violations(f)] == []


def test_the_walk_sees_a_concrete_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from storage.client import LedgerClient\nfrom storage.client.ledger_handle import LedgerHandle\n"
                   "import storage.client.client\nfrom storage.client import api, ClientConfig\n")
    assert len(_violations(bad)) == 3
