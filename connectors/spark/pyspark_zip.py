"""Compiled bytecode inside Spark's ``pyspark.zip``, so Spark's Python processes stop compiling pyspark at start.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it starts: the worker
daemon and the workers it forks, the streaming source runner (one per query), the data source planners. zipimport
reads bytecode from a zip but never writes any, and the zip pip installs holds none, so each of those processes
compiled pyspark from source: importing ``pyspark.worker`` took 4.3-6.2 s from the zip against 1.9-2.3 s from the
installed package on the busy 2-core VM, several times per streaming query (docs/spark.md, "Benchmark").

``add_bytecode`` writes an unchecked hash-based ``.pyc`` (PEP 552) beside each ``.py`` of the zip: valid whatever
the zip's timestamps say, which is right for a file nobody edits (reinstalling pyspark replaces the zip, and running
this again adds the bytecode again). ``make venv`` runs it: ``python -m connectors.spark.pyspark_zip``.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import struct
import sys
import warnings
import zipfile
from pathlib import Path

_UNCHECKED_HASH = 0b01  # PEP 552 flags: hash-based, source not checked


def pyspark_zip() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def bytecode(source: bytes, filename: str) -> bytes:
    """A ``.pyc`` file's bytes for ``source``, as zipimport reads them."""
    with warnings.catch_warnings():  # pyspark's own tests hold a few SyntaxWarnings; they are not ours to print
        warnings.simplefilter("ignore")
        code = compile(source, filename, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + struct.pack("<I", _UNCHECKED_HASH) + importlib.util.source_hash(source)
            + marshal.dumps(code))


def add_bytecode(path: Path) -> int:
    """Add a ``.pyc`` for every ``.py`` of the zip at ``path`` that has none; how many were added. The zip is
    replaced in one rename, so a process starting meanwhile reads the old zip or the new one, never a torn one.
    Raises SyntaxError for a module that does not compile (nothing is changed then)."""
    with zipfile.ZipFile(path) as src:
        names = set(src.namelist())
        missing = sorted(n for n in names if n.endswith(".py") and n + "c" not in names)
        if not missing:
            return 0
        tmp = path.with_name(path.name + ".tmp")
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
                for info in src.infolist():
                    data = src.read(info)
                    out.writestr(info, data)
                    if info.filename in missing:
                        pyc = zipfile.ZipInfo(info.filename + "c", info.date_time)
                        pyc.compress_type = zipfile.ZIP_DEFLATED
                        # The name zipimport itself gives the code it compiles, so tracebacks read the same.
                        out.writestr(pyc, bytecode(data, f"{path}{os.sep}{info.filename}"))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return len(missing)


def main() -> int:
    path = pyspark_zip()
    if not path.exists():
        print(f"{path} not found: nothing to do", file=sys.stderr)
        return 0
    print(f"{path}: bytecode added for {add_bytecode(path)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
