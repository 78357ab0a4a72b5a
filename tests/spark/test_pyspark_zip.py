"""Bytecode added to a zip like Spark's pyspark.zip is what zipimport then runs (no compile from source)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

import pytest

from connectors.spark.pyspark_zip import add_bytecode


def _rewrite(path, changes: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist()}
    items.update(changes)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in items.items():
            z.writestr(name, data)


def test_zipimport_runs_the_added_bytecode_and_a_second_run_adds_nothing(tmp_path):
    path = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("zpkg/__init__.py", "A = 1\n")
        z.writestr("zpkg/mod.py", "B = 2\n")
        z.writestr("zpkg/data.txt", "not python")
    assert add_bytecode(path) == 2
    assert add_bytecode(path) == 0
    assert sorted(zipfile.ZipFile(path).namelist()) == ["zpkg/__init__.py", "zpkg/__init__.pyc", "zpkg/data.txt",
                                                         "zpkg/mod.py", "zpkg/mod.pyc"]
    # Change the source and keep the bytecode: an import that compiled the source would see 99.
    _rewrite(path, {"zpkg/mod.py": b"B = 99\n"})
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(path)!r})
        import zpkg.mod
        print(zpkg.A, zpkg.mod.B, zpkg.mod.__file__.endswith("mod.pyc"))
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60).stdout
    assert out.split() == ["1", "2", "True"]


def test_a_module_that_does_not_compile_leaves_the_zip_as_it_was(tmp_path):
    path = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("zpkg/__init__.py", "A = (\n")
    before = path.read_bytes()
    with pytest.raises(SyntaxError):
        add_bytecode(path)
    assert path.read_bytes() == before and not (tmp_path / "pyspark.zip.tmp").exists()
