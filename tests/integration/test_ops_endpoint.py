"""`metrics.listener`: /metrics and the group page over real HTTP after a scripted rebalance."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import BrokerProcess, free_port
from tests.integration.group_workers import group_events

pytestmark = pytest.mark.integration

TOPIC = "payments"
GROUP = "ledger"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """Two members join, one commits, one leaves: three rebalances, one removal by leave."""
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("ops") / "data",
                           settings={"metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(20):
            producer.produce(TOPIC, b"v", partition=i % 2)
        assert producer.flush(30) == 0
        members = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                             "client.id": f"ledger-{i}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 500}) for i in range(2)]
        for member in members:
            member.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                len(m.assignment()) == 1 for m in members):
            for member in members:
                message = member.poll(0.1)
                if message is not None and not message.error():
                    member.commit(message=message, asynchronous=False)
        assert all(len(m.assignment()) == 1 for m in members), "the group never split"
        members[0].close()  # LeaveGroup: the survivor rebalances alone
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(members[1].assignment()) != 2:
            members[1].poll(0.1)
        assert len(members[1].assignment()) == 2
        members[1].commit(offsets=[TopicPartition(TOPIC, 0, 3), TopicPartition(TOPIC, 1, 4)],
                          asynchronous=False)
        yield broker, f"http://127.0.0.1:{metrics_port}"
        members[1].close()
    finally:
        broker.stop()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_count_the_scripted_rebalance(scripted: tuple[BrokerProcess, str]) -> None:
    _, base = scripted
    status, content_type, body = get(base + "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    values = samples(body)
    k = "kafka_server_group_coordinator_metrics_"
    assert values[(k + "group_count", (("protocol", "classic"),))] == 1
    assert values[(k + "classic_group_count", (("state", "Stable"),))] == 1
    assert values[(k + "group_completed_rebalance_total", ())] >= 2
    assert values[(k + "offset_commit_total", ())] >= 1
    assert values[("kafka_coordinator_group_groupmetadatamanager_numoffsets", ())] >= 1
    classic = ("protocol", "classic")
    assert values[("rebalanced_rebalances_total", (("cause", "member_leave"), classic))] == 1
    assert values[("rebalanced_rebalances_total", (("cause", "member_join"), classic))] >= 1
    assert values[("rebalanced_members_removed_total", (("cause", "leave"), classic))] == 1
    total = (("group", GROUP), ("phase", "total"))
    assert values[("rebalanced_rebalance_duration_seconds_count", total)] >= 2
    for phase in ("join", "sync"):
        assert values[("rebalanced_rebalance_duration_seconds_count",
                       (("group", GROUP), ("phase", phase)))] >= 2
    assert values[("rebalanced_seconds_since_last_rebalance", (("group", GROUP),))] >= 0
    heartbeats = [v for (name, labels), v in values.items()
                  if name == "rebalanced_requests_total" and ("api", "Heartbeat") in labels]
    assert heartbeats and sum(heartbeats) >= 1
    assert ("rebalanced_offset_commit_latency_seconds_count", ()) in values  # sampled
    assert values[("rebalanced_open_connections", ())] >= 1


def test_metrics_and_the_journal_name_each_rebalance_alike(
        scripted: tuple[BrokerProcess, str]) -> None:
    broker, url = scripted
    deadline = time.monotonic() + 15
    while True:  # the journal and the cached /metrics text catch up within a second or so
        journal = Counter(e["cause"] for e in group_events(broker, GROUP, "rebalance_started"))
        exported = {dict(labels)["cause"]: value
                    for (name, labels), value in samples(get(url + "/metrics")[2]).items()
                    if name == "rebalanced_rebalances_total" and ("protocol", "classic") in labels}
        if exported == journal or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert exported == journal
    assert journal["member_leave"] == 1


class _Page(HTMLParser):
    """Collects each group section's text and its tables' rows."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[str]] = {}
        self.refresh = False
        self.external: list[str] = []
        self._section: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "meta" and attributes.get("http-equiv") == "refresh":
            self.refresh = True
        if tag in ("script", "img", "link") or (tag == "a" and str(
                attributes.get("href", "")).startswith("http")):
            self.external.append(tag)
        if tag == "section":
            self._section = str(attributes.get("id", "")).removeprefix("group-")
            self.sections[self._section] = []
            self._depth = 1
        elif self._section is not None and tag == "section":
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._section is not None:
            self._section = None

    def handle_data(self, data: str) -> None:
        if self._section is not None and data.strip():
            self.sections[self._section].append(data.strip())


def test_page_lists_the_group_and_why_it_last_rebalanced(
        scripted: tuple[BrokerProcess, str]) -> None:
    _, base = scripted
    status, content_type, body = get(base + "/")
    assert status == 200 and content_type.startswith("text/html")
    page = _Page()
    page.feed(body)
    assert page.refresh and not page.external
    text = page.sections[GROUP]
    assert "Stable" in text
    assert "ledger-1" in text  # the survivor's client id, in the members table
    assert f"{TOPIC}-0, {TOPIC}-1" in text  # its assignment
    assert "member_leave" in text  # the cause of the last rebalance
    assert any("LeaveGroup" in t for t in text)  # and Kafka's reason sentence
    assert any(t.startswith("ledger-0 on ") for t in text)  # its culprit, and host
    assert get(base + "/nothing-here")[0] == 404


BROWSERS = ("chromium", "chromium-browser", "chromium-headless-shell", "chrome-headless-shell")


def test_a_screenshot_of_the_page(scripted: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    """One headless page load: the page renders with its styles and draws the timeline."""
    import shutil
    import subprocess

    image = pytest.importorskip("PIL.Image")
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        pytest.skip("no chromium: `make test` installs chromium-headless-shell with apt when it "
                    "runs as root and apt can reach its mirror")
    _, base = scripted
    shot = tmp_path / "page.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1280,900",
                           base + "/"], capture_output=True, timeout=120, check=False)
    assert shot.exists(), done.stderr.decode(errors="replace")[-2000:]
    saved = os.environ.get("REBALANCED_PAGE_SCREENSHOT")
    if saved:  # to look at it: REBALANCED_PAGE_SCREENSHOT=page.png pytest -k screenshot
        shutil.copy(shot, saved)
    with image.open(shot) as picture:
        assert picture.size == (1280, 900)
        colours = {colour for _, colour in picture.convert("RGB").getcolors(1280 * 900) or []}
    # Solid fills the page's stylesheet draws: the Stable state badge, and the join and sync
    # bars of the rebalance timeline. An error page or unstyled text has none of them.
    stable_badge, join_bar, sync_bar = (0xD4, 0xF5, 0xDD), (0xE0, 0xA8, 0x00), (0x1A, 0x73, 0xE8)
    assert {stable_badge, join_bar, sync_bar} <= colours


def test_console_logs_on_request_json_otherwise(tmp_path: Path) -> None:
    for log_format in ("console", "json"):
        broker = BrokerProcess(tmp_path / log_format / "data", settings={"log.format": log_format})
        broker.start()
        deadline = time.monotonic() + 30
        while "broker started" not in broker.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)  # the log is flushed every 100 ms
        broker.stop()
        started = next(line for line in broker.log_text().splitlines()
                       if "broker started" in line)
        if log_format == "json":
            assert started.startswith("{") and '"event": "broker started"' in started
        else:
            assert not started.startswith("{") and "[info" in started and "port=" in started
