"""The forensics job on a journal and group log recorded from a real, scripted broker run.

`scenario.record` drives the real broker with librdkafka consumers in their own processes: a
late joiner, a graceful close, a SIGKILL and a static member's restart. The report must name
each rebalance's cause and culprit; the same run's `__consumer_offsets-*` directories alone
(as a Kafka broker would have them) give the inferred report.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from forensics.cli import main
from forensics.grouplog import GROUP_LOG_COLUMNS, decode_segment, find_segments
from tests.forensics.scenario import GROUP, Expected, record

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Expected]]:
    work = tmp_path_factory.mktemp("scenario")
    expected = record(work)
    yield work / "data", expected


def test_decoder_reads_the_segments_the_broker_wrote(recorded: tuple[Path, Expected]) -> None:
    data, _ = recorded
    rows: list[dict[str, Any]] = [dict(zip(GROUP_LOG_COLUMNS, row, strict=True))
            for path, partition in find_segments(data)
            for row in decode_segment(path, partition)]
    assert rows and {r["record_type"] for r in rows} <= {"offset_commit", "group_metadata"}
    metadata = [r for r in rows if r["record_type"] == "group_metadata"
                and r["group_id"] == GROUP and not r["tombstone"]]
    generations = [r["generation"] for r in metadata]
    assert generations == sorted(generations) and generations[-1] >= 5
    last = metadata[-1]
    assert sorted(m[1] or m[2] for m in last["members"]) == ["late-joiner", "static-0"]
    assigned = sorted(p for m in last["members"] for _, p in m[6])
    assert assigned == list(range(6))
    commits = [r for r in rows if r["record_type"] == "offset_commit" and r["group_id"] == GROUP]
    assert len(commits) > 10 and all(r["commit_timestamp"] > 0 for r in commits)


def test_the_documented_schema_reads_the_journal_the_broker_wrote(
        spark: Any, recorded: tuple[Path, Expected], tmp_path: Path) -> None:
    """docs/events.md names `forensics.schema.JOURNAL_DDL` as the Spark schema of the journal
    for anyone reading it themselves: every line the broker wrote fits it."""
    from pyspark.sql import functions as F

    from forensics.schema import CORRUPT_COLUMN, JOURNAL_DDL

    data, _ = recorded
    for n, path in enumerate(p for p in (data / "events").iterdir() if p.suffix == ".jsonl"):
        # Spark skips hidden files (the active one) even when named: read copies
        shutil.copyfile(path, tmp_path / f"journal-{n}.jsonl")
    frame = spark.read.schema(JOURNAL_DDL).json(str(tmp_path)).cache()
    assert frame.count() > 10
    assert frame.filter(F.col(CORRUPT_COLUMN).isNotNull() | F.col("ts").isNull()).count() == 0


def damaged_copy(data: Path, target: Path) -> tuple[Path, Path]:
    """The recorded run plus what a crash and a newer broker leave behind: a torn journal line,
    an unknown event type and a torn batch header at the end of a segment."""
    shutil.copytree(data, target, ignore=shutil.ignore_patterns("*.lock"))
    journal = sorted((target / "events").glob("events-*.jsonl"))[0]
    with journal.open("a", encoding="utf-8") as f:
        f.write('{"v": 1, "event_type": "rebalance_sta\n')
        f.write('{"v": 1, "event_type": "future_event", "ts": 1, "group_id": "g"}\n')
    segment = next(p for p in sorted(target.glob("__consumer_offsets-*/*.log"))
                   if p.stat().st_size > 0)
    with segment.open("ab") as f:
        f.write(b"\x00" * 20)
    return journal, segment


def test_report_names_each_rebalance_cause_and_culprit(
        spark: Any, recorded: tuple[Path, Expected], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    recording, expected = recorded
    data = tmp_path / "data"
    torn_journal, torn_segment = damaged_copy(recording, data)
    out = tmp_path / "out"
    assert main(["--data", str(data), "--out", str(out)]) == 0
    assert str(out / "report.html") in capsys.readouterr().out

    rebalances = pd.read_parquet(out / "rebalances")
    ours = rebalances[rebalances["group_id"] == GROUP].sort_values("start_ts")
    found = list(zip(ours["cause"], ours["culprit_client_id"], strict=True))
    for cause, culprit in expected.rebalances:
        assert (cause, culprit) in found, (cause, culprit, found)
    # Only the scripted changes rebalanced: the static restart did not.
    assert found[-len(expected.rebalances):] == expected.rebalances, found
    stable = ours[ours["outcome"] == "stabilized"]
    assert (stable["duration_ms"] >= 0).all() and (stable["join_ms"] >= 0).all()
    assert stable["partitions_moved"].notna().all()
    assert ours["commit_gap_ms"].notna().any()
    # The gap around each rebalance per partition, from the group log's commit records.
    around = pd.read_parquet(out / "rebalance_commit_gaps")
    around = around[around["group_id"] == GROUP]
    assert (around["source"] == "group_log").all() and around["partition"].notna().all()
    assert around["commit_gap_ms"].notna().any()
    assert pd.read_parquet(out / "commits")["longest_rebalance_gap_ms"].notna().any()

    page = (out / "report.html").read_text(encoding="utf-8")
    for cause, culprit in expected.rebalances:
        assert cause in page and f"<b>{culprit}</b>" in page
    instance, restarted = expected.static_restart
    assert instance in page and restarted in page and "replaced in place" in page
    # Damage is counted and located, never fatal.
    assert "malformed journal lines" in page and torn_journal.name in page
    assert "unknown event type <code>future_event</code>" in page
    assert "corrupted or unreadable batches" in page and torn_segment.name in page
    pngs = list(out.glob("timeline-*.png"))
    assert pngs and all(p.stat().st_size > 5000 for p in pngs)
    sessions = pd.read_parquet(out / "member_sessions")
    causes = dict(zip(sessions["client_id"], sessions["left_cause"], strict=True))
    assert causes["early-b"] == "leave" and causes["early-a"] == "disconnect"
    assert causes["static-s"] == "fenced"
    assert set(pd.read_parquet(out / "group_states")["state"]) >= {"Stable",
                                                                   "PreparingRebalance"}

    # The same run as a Kafka log directory: group log only, nothing invented.
    kafka_dir = tmp_path / "kafka-logs"
    for segment_dir in recording.glob("__consumer_offsets-*"):
        shutil.copytree(segment_dir, kafka_dir / segment_dir.name)
    kafka_out = tmp_path / "kafka-out"
    assert main(["--data", str(kafka_dir), "--out", str(kafka_out), "--timelines", "1"]) == 0
    inferred = pd.read_parquet(kafka_out / "rebalances")
    inferred = inferred[inferred["group_id"] == GROUP]
    assert inferred["inferred"].all() and inferred["start_ts"].isna().all()
    assert inferred["reason"].isna().all() and inferred["join_ms"].isna().all()
    pairs = set(zip(inferred["cause"], inferred["culprit_client_id"], strict=True))
    assert ("member_join", "late-joiner") in pairs
    assert ("member_left", "early-b") in pairs and ("member_left", "early-a") in pairs
    kafka_page = (kafka_out / "report.html").read_text(encoding="utf-8")
    assert "no event journal" in kafka_page and "Not in the records, so not shown" in kafka_page


def test_an_empty_directory_gives_an_empty_report(spark: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--data", str(empty), "--out", str(tmp_path / "out")]) == 0
    assert "nothing to report" in (tmp_path / "out" / "report.html").read_text("utf-8")


def test_command_line_mistakes_get_one_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    with pytest.raises(SystemExit) as exited:
        main(["--data", str(tmp_path)])
    assert exited.value.code == 2
