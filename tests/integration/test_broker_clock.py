"""The broker reads one injectable clock: its group runtime's deadlines come from it too."""

from __future__ import annotations

from pathlib import Path

from coordinator.runtime.broker import Broker
from coordinator.runtime.clock import ManualClock
from coordinator.settings import defaults


def test_the_group_runtime_reads_the_brokers_clock(tmp_path: Path) -> None:
    clock = ManualClock(now_ms=1_000)
    broker = Broker(defaults().with_overrides({"log.dirs": str(tmp_path)}), clock=clock)
    assert broker.groups.clock is clock
    clock.advance(250)
    assert broker.groups.clock.now_ms() == broker.clock.now_ms() == 1_250


def test_each_broker_has_its_own_refusal_log(tmp_path: Path) -> None:
    first = Broker(defaults().with_overrides({"log.dirs": str(tmp_path / "a")}))
    second = Broker(defaults().with_overrides({"log.dirs": str(tmp_path / "b")}))
    assert first.refusals is not second.refusals
    assert first.refusals.supported == first.served_versions()
