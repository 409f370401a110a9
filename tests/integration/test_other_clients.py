"""Other clients' habits against the broker (docs/compatibility.md): sarama, kafkajs and kcat
consume a 20-partition topic produced at 100 records/s as a group of two, commit, and one of the
two is SIGKILLed and replaced (the seeds' scenario, `tests/bench/kafkago_failover.py`, at session
6 s / heartbeat 1 s). Each consumer keeps its library's default client id where it has one, so
the members of a group look alike to the broker. A client that is not installed skips.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bench.kafkago_failover import FAST, GROUP, run_scenario
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import group_events
from tests.integration.kafkago import ProcessWorker
from tests.integration.other_clients import (
    KafkajsWorker,
    KcatWorker,
    SaramaWorker,
    WorkerBuildError,
    build_sarama_worker,
    kafkajs_node_path,
    kcat_version,
)

pytestmark = pytest.mark.integration

Spawn = Callable[[str, str, str], ProcessWorker]
TIMING = {"session_ms": FAST.session_ms, "heartbeat_ms": FAST.heartbeat_ms}


def _consumers(client: str, broker: BrokerProcess, build_dir: Path, log_dir: Path) -> Spawn:
    try:
        if client == "sarama":
            binary = build_sarama_worker(build_dir, cache_dir=build_dir.parent / "go-cache")
            return lambda topic, group, name: SaramaWorker(binary, broker.bootstrap, topic, group,
                                                           name, log_dir, **TIMING)
        if client == "kafkajs":
            modules = kafkajs_node_path()
            return lambda topic, group, name: KafkajsWorker(modules, broker.bootstrap, topic,
                                                            group, name, log_dir, **TIMING)
        kcat_version()
        return lambda topic, group, name: KcatWorker(broker.bootstrap, topic, group, name,
                                                     log_dir, **TIMING)
    except WorkerBuildError as exc:
        pytest.skip(f"{client} not available: {exc}")


@pytest.mark.parametrize("client", ["sarama", "kafkajs", "kcat"])
def test_a_group_of_two_commits_and_fails_over_fast_when_one_is_killed(
        broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path,
        client: str) -> None:
    consumers = _consumers(client, broker, tmp_path_factory.mktemp(client), tmp_path)
    outcome = run_scenario(broker, consumers, FAST, steady_s=3.0, min_window_s=6.0)
    assert not outcome.error, outcome.error
    assert outcome.removals_before_kill == {}, outcome
    assert outcome.live_member_disconnects == 0, outcome
    assert outcome.lost == 0, outcome
    assert outcome.victim_removed_by == "disconnect", outcome
    assert outcome.removals_after_kill == {"disconnect": 1}, outcome
    assert outcome.delay_s is not None and outcome.delay_s < FAST.session_s, outcome
    committers = {e["member_id"] for e in group_events(broker, GROUP, "offsets_committed")}
    assert len(committers) >= 2, "both members of the first generation should have committed"
