"""Memory of the group core per one-member classic group, by allocation site (tracemalloc).

    python -m tests.bench.group_memory --groups 2000

Forms `groups` Stable one-member groups through the sans-IO group service (the test context:
JoinGroup twice, SyncGroup, Heartbeat, as a client does), drops what the test context itself
keeps (the requests sent, the replies, the records written), and prints the bytes per group
that are still allocated, then the largest allocation sites. Connections, sockets and the
runtime around the core are not counted: `commit_load idle` measures the whole broker's RSS.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from tests.context import GroupTestContext


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    ctx = GroupTestContext()
    ctx.stable_group(1, group="warm-up")  # imports and first-use caches out of the count
    tracemalloc.start(1)
    gc.collect()
    before = tracemalloc.take_snapshot()
    for i in range(args.groups):
        ctx.stable_group(1, group=f"group-{i}")
    ctx.sent.clear()
    ctx.replies.clear()
    ctx.records.clear()
    ctx.events.clear()
    gc.collect()
    after = tracemalloc.take_snapshot()
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"{args.groups} one-member groups: {total / args.groups:.0f} bytes per group")
    for stat in stats[:args.top]:
        frame = stat.traceback[0]
        print(f"{stat.size_diff / args.groups:8.0f} B {stat.count_diff / args.groups:5.1f} objects"
              f"  {frame.filename}:{frame.lineno}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
