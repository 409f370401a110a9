"""Reading the journal (the whole pass) and the group log with Spark, on tiny inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics.datasource import FORMAT_NAME, register
from forensics.reader import Problems, analyse_journal, journal_tables
from tests.forensics.test_grouplog import CASES, key_hex, segment
from tests.unit._batches import make_batch


def test_journal_lines_in_order_with_bad_ones_counted_and_located(spark: Any,
                                                                  tmp_path: Path) -> None:
    directory = tmp_path / "events"
    directory.mkdir()
    good = [json.dumps({"v": 1, "event_type": "group_empty", "ts": 10 + n, "group_id": "g",
                        "generation": n, "to_state": "Empty"}) for n in range(3)]
    torn = '{"v": 1, "event_type": "group_em'
    (directory / "events-0000000000010-000001.jsonl").write_text(
        "\n".join([good[0], torn, good[1]]) + "\n")
    (directory / ".events-active.jsonl").write_text(
        good[2] + "\n" + json.dumps({"v": 1, "event_type": "new_thing", "ts": 1}) + "\n"
        + json.dumps({"v": 2, "event_type": "group_empty", "ts": 1}) + "\n")
    problems = Problems()
    found = journal_tables(analyse_journal(spark, directory).toArrow(), problems)
    states = found.tables["group_states"].to_pylist()
    assert [(s["state"], s["entered"], s["open_since"]) for s in states] == [("Empty", 3, 12)]
    assert problems.malformed_lines == 1
    path, position, text = problems.malformed_examples[0]
    assert path.endswith("events-0000000000010-000001.jsonl")
    assert position == len(good[0]) + 1 and text == torn
    assert problems.unknown_event_types == {"new_thing": 1}
    assert problems.other_versions == {2: 1}
    assert found.summary.events == 3 and found.summary.groups == {"g"}
    assert (found.summary.first_ts, found.summary.last_ts) == (10, 12)


def test_the_data_source_gives_one_partition_per_segment(spark: Any, tmp_path: Path) -> None:
    key = bytes.fromhex(key_hex("OffsetCommitValue"))
    value = bytes.fromhex(next(c["hex"] for c in CASES if c["record"] == "OffsetCommitValue"))
    segment(tmp_path, make_batch([value] * 3, keys=[key] * 3), partition=0)
    segment(tmp_path, make_batch([value] * 2, keys=[key] * 2), partition=7)
    register(spark)
    frame = spark.read.format(FORMAT_NAME).load(str(tmp_path))
    assert frame.rdd.getNumPartitions() == 2
    rows = frame.groupBy("log_partition", "record_type").count().collect()
    assert sorted((r.log_partition, r.record_type, r["count"]) for r in rows) == [
        (0, "offset_commit", 3), (7, "offset_commit", 2)]
