"""The real broker process exits non-zero, naming file and position, when its group log does
not load (instead of answering "loading" for ever)."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from tests.broker_process import BrokerProcess
from tests.integration.test_group_log_loading import write_undecodable_commit


def test_an_unloadable_group_log_stops_the_process_non_zero(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_undecodable_commit(data_dir)
    broker = BrokerProcess(data_dir, settings={"offsets.topic.num.partitions": "1"})
    with contextlib.suppress(RuntimeError):  # it may stop before the port is seen open
        broker.start()
    assert broker.proc is not None
    try:
        code = broker.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        broker.stop()
        raise AssertionError("the broker kept running on a group log it cannot load") from None
    output = broker.log_path.read_text()
    assert code != 0
    segment = data_dir / "__consumer_offsets-0" / f"{0:020d}.log"
    assert "group log load failed" in output
    assert f"rebalanced: {segment}: position 0 (offset 0)" in output
