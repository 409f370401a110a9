"""`--follow --once`: the closed journal files are streamed, kept in OUT/_journal, and the
report is built from them (the active file is left to the batch run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from forensics.cli import main
from tests.bench.forensics_bench import write_journal


def test_follow_once_builds_the_report_from_the_closed_files(spark: Any,
                                                             tmp_path: Path) -> None:
    data = tmp_path / "data"
    events = write_journal(data / "events", 3000, groups=5)
    (data / "events" / ".events-active.jsonl").write_text("not read in this mode\n")
    out = tmp_path / "out"
    assert main(["--data", str(data), "--out", str(out), "--follow", "--once",
                 "--timelines", "1"]) == 0
    kept = sorted(p.name for p in (out / "_journal").iterdir())
    assert kept == sorted(p.name for p in (data / "events").glob("events-*.jsonl"))
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "malformed" not in page  # the active file's garbage was not read
    rebalances = pd.read_parquet(out / "rebalances")
    assert events == 3000 and len(rebalances) > 0
    assert set(rebalances["group_id"]) <= {f"group-{g:03d}" for g in range(5)}
