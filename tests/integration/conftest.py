from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()
