"""Import `pyspark` from the installed package, with its bytecode, where Spark's zip of it is
the same code.

Spark puts `SPARK_HOME/python/lib/pyspark.zip` first on the path of every Python process it
starts: the driver under spark-submit, and each executor's Python daemon with the workers it
forks. That zip holds no bytecode, and Python never writes bytecode for a module it imports
from a zip, so each of those processes compiled PySpark's modules from source on every start:
0.5 s of CPU for the driver's imports and 0.55 s for each daemon's (BENCHMARKS.md, issue 27).
When PySpark is installed as a package (pip's `pyspark`), SPARK_HOME *is* that package's
directory and the zip is built from its files, so importing the package instead runs the same
code from its compiled bytecode. With a Spark distribution (SPARK_HOME elsewhere) or no such
package, nothing changes.

No PySpark import here: this runs before the first one.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path


def prefer_installed_pyspark() -> bool:
    """Move Spark's `pyspark.zip` behind the installed `pyspark` package on `sys.path` when
    that package is SPARK_HOME itself; True if it was moved. Call before importing pyspark."""
    if "pyspark" in sys.modules:
        return False
    spark_home = os.environ.get("SPARK_HOME")
    if not spark_home:
        return False
    try:
        home = Path(spark_home).resolve()
        spark_zip = home / "python" / "lib" / "pyspark.zip"
        zipped = [entry for entry in sys.path
                  if entry and Path(entry).resolve() == spark_zip]
        if not zipped:
            return False
        rest = [entry for entry in sys.path if entry not in zipped]
        spec = PathFinder.find_spec("pyspark", rest)
        if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != home:
            return False
    except (OSError, ValueError, ImportError):
        return False
    sys.path[:] = rest + zipped  # still there for anything only the zip has
    return True
