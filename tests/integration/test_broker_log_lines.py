"""The broker's log lines as an operator reads them: an info line is in the log within a
fraction of a second while the broker runs on, and SIGHUP stops the broker as cleanly as
SIGTERM, with its last lines written."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.broker_process import BrokerProcess


def wait_for_line(broker: BrokerProcess, event: str, timeout: float = 3.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in broker.log_text().splitlines():
            if line.startswith("{") and json.loads(line).get("event") == event:
                return json.loads(line)
        time.sleep(0.02)
    raise AssertionError(f"no {event!r} line within {timeout} s:\n{broker.log_text()[-2000:]}")


def test_an_info_line_is_in_the_log_while_the_broker_runs_on(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000)
        try:
            admin.create_topics([NewTopic("t", 1, 1)])
        finally:
            admin.close()
        line = wait_for_line(broker, "topic created", timeout=2.0)
        assert line["topic"] == "t"
        assert broker.proc is not None and broker.proc.poll() is None
    finally:
        broker.stop()


def test_sighup_stops_the_broker_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGHUP)
    assert broker.proc.wait(10) == 0
    events = [json.loads(line).get("event") for line in broker.log_text().splitlines()
              if line.startswith("{")]
    assert "broker stopped" in events


def test_a_broker_started_ignoring_sighup_keeps_ignoring_it(tmp_path: Path) -> None:
    """As under `nohup`: the terminal closing does not stop it."""
    broker = BrokerProcess(tmp_path / "data")
    broker.command = [sys.executable, "-c",
                      "import runpy, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
                      "sys.argv[0] = 'coordinator'; "
                      "runpy.run_module('coordinator', run_name='__main__', alter_sys=True)"]
    broker.env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this source tree
    broker.start()
    try:
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert broker.proc.poll() is None
    finally:
        broker.stop()
    assert broker.proc.returncode == 0


def test_a_configuration_warning_is_written_in_the_chosen_format(tmp_path: Path) -> None:
    """`--log.format console`: the warning about a server.properties key the broker does not
    use is a console line too, not the JSON of the format before the settings were read."""
    properties = tmp_path / "server.properties"
    properties.write_text("log.retention.hours=5\n")
    broker = BrokerProcess(tmp_path / "data")
    broker.flags = ["--config", str(properties), "--log.format", "console"]
    broker.start()
    try:
        lines = broker.log_text().splitlines()
        warning = next(line for line in lines if "settings not used by this broker" in line)
        assert not warning.startswith("{") and "log.retention.hours" in warning
    finally:
        broker.stop()
