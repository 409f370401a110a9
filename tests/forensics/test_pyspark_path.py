"""Spark's zip of pyspark moves behind the installed package where the two are the same
(`forensics.pyspark_path`), and only there; in fresh interpreters, each with the path a Spark
process gets (the zip first)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("from forensics.pyspark_path import prefer_installed_pyspark as p; moved = p(); "
         "import pyspark; print(moved, pyspark.WHERE)")


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """site-packages with a `pyspark` package that holds Spark's layout (python/lib/pyspark.zip,
    as pip's pyspark does); each copy says where it was imported from."""
    site = tmp_path / "site"
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("WHERE = 'package'\n")
    spark_zip = package / "python" / "lib" / "pyspark.zip"
    with zipfile.ZipFile(spark_zip, "w") as zf:
        zf.writestr("pyspark/__init__.py", "WHERE = 'zip'\n")
    return site, spark_zip


def _probe(spark_home: Path, *path: Path) -> str:
    env = {**os.environ, "SPARK_HOME": str(spark_home),
           "PYTHONPATH": os.pathsep.join([*map(str, path), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_installed_package_is_imported_when_it_is_spark_home(tmp_path: Path) -> None:
    site, spark_zip = _layout(tmp_path)
    assert _probe(site / "pyspark", spark_zip, site) == "True package"


def test_a_spark_distribution_keeps_its_zip(tmp_path: Path) -> None:
    site, _ = _layout(tmp_path)
    distribution = tmp_path / "spark-4"
    (distribution / "python" / "lib").mkdir(parents=True)
    with zipfile.ZipFile(distribution / "python" / "lib" / "pyspark.zip", "w") as zf:
        zf.writestr("pyspark/__init__.py", "WHERE = 'distribution'\n")
    assert _probe(distribution, distribution / "python" / "lib" / "pyspark.zip",
                  site) == "False distribution"


def test_the_zip_alone_is_kept(tmp_path: Path) -> None:
    site, _ = _layout(tmp_path)
    (site / "pyspark" / "__init__.py").unlink()  # Spark's layout without a package in it
    home = (site / "pyspark").rename(tmp_path / "spark-home")
    assert _probe(home, home / "python" / "lib" / "pyspark.zip") == "False zip"
