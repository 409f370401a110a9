"""One SparkSession for every Spark test: local[2], UI off, bound to 127.0.0.1."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.skip("Spark tests need java on PATH (a JDK 17)")
    pyspark = pytest.importorskip("pyspark", reason="install the forensics extra")
    assert pyspark
    from forensics.session import get_session

    session = get_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
