"""Disk faults x restart: does the real broker lose an acknowledged commit or bring back a change
it answered with an error?

    python -m tests.bench.disk_faults              # every plan, a table on stdout
    python -m tests.bench.disk_faults --only fsync-once --json
    python -m tests.bench.disk_faults --repeat 5     # sums over five runs per plan

For each fault plan the real broker (`python -m coordinator`) starts with
`REBALANCED_FAULT_PLAN` (see `storage/fs.py`), armed by a file once every group has some
acknowledged commits. Four wire clients then keep committing ever higher offsets of their
groups, and each deletes one more group (two as their first request after the arming),
recording every answer: NONE (acknowledged), an error
code, or no answer (the connection broke: outcome unknown). A fail-stop plan ends with the
broker exiting by itself; the others are stopped. The broker is restarted on the same data
directory without the plan and without `--repair`, and every group is fetched:

* lost: an acknowledged commit (or deletion) that is not there;
* resurrected: a commit answered with an error that is there, or a deletion answered with an
  error whose group is gone;
* repair needed: the restart refused to start without `--repair`.
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coordinator.settings import defaults
from coordinator.testkit.process import RebalancedBroker
from tests.broker_process import BrokerProcess
from tests.integration.workers.offset_committer import WireClient, _string

TOPIC = "t"
PARTITIONS = 2
CLIENTS = 4
GROUPS_PER_CLIENT = 4
FIRST_OFFSETS = 5  # acknowledged before the plan is armed
LAST_OFFSET = 40
DELETE_GROUPS = 42
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: a broker starting.
_STARTING = (14, 15, 16)

# name -> (rules, fail-stop expected). `armed_by` is filled in per run; paths are substrings.
_GROUP_LOG = "__consumer_offsets"
PLANS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "fsync-once": ([{"op": "fsync", "path": _GROUP_LOG, "times": 1}], True),
    "fsync-always": ([{"op": "fsync", "path": ".log"}], True),
    "fsync-once+ftruncate-always": ([{"op": "fsync", "path": _GROUP_LOG, "times": 1},
                                     {"op": "truncate", "path": _GROUP_LOG}], True),
    "fsync-always+ftruncate-always": ([{"op": "fsync", "path": ".log"},
                                       {"op": "truncate", "path": _GROUP_LOG}], True),
    # Nothing on the disk can be made durable or cut any more.
    "every-fsync+ftruncate-always": ([{"op": "fsync"}, {"op": "fsync_dir"},
                                      {"op": "truncate"}], True),
    "torn-write+ftruncate-once": ([{"op": "write", "path": _GROUP_LOG, "times": 1,
                                    "errno": "ENOSPC", "partial": 20},
                                   {"op": "truncate", "path": _GROUP_LOG, "times": 1}], True),
    "enospc-once": ([{"op": "write", "path": _GROUP_LOG, "times": 1, "errno": "ENOSPC"}],
                    False),
    "enospc-while-full": ([{"op": "write", "path": _GROUP_LOG, "times": 30,
                            "errno": "ENOSPC", "partial": 10}], False),
}

# Plans the test kit's `fail_group_log` expresses exactly (the next group-log fsync or write on
# a `__consumer_offsets` path fails, with EIO or ENOSPC): with `run_plan(..., kit=True)` the
# broker is the kit's, armed through its control endpoint instead of the environment.
KIT_PLANS: dict[str, dict[str, Any]] = {
    "fsync-once": {"op": "fsync", "times": 1},
    "enospc-once": {"op": "write", "times": 1},
}


@dataclass
class Outcome:
    plan: str
    acknowledged: int = 0
    error_answered: int = 0
    unanswered: int = 0
    exit_code: int | None = None
    exit_codes: list[int | None] = field(default_factory=list)  # of every run (--repeat)
    offline_lines: int = 0
    repair_needed: bool = False
    lost: int = 0
    resurrected: int = 0
    details: list[str] = field(default_factory=list)


@dataclass
class _Client:
    """One connection's record: per (group, partition) the acknowledged offset and the offsets
    answered with an error; per deleted group whether the deletion was acknowledged."""

    acked: dict[tuple[str, int], int] = field(default_factory=dict)
    errored: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    deleted: dict[str, bool | None] = field(default_factory=dict)  # None: no answer
    # Commits and deletions: acknowledged, answered with an error, unanswered.
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])


def delete_group(client: WireClient, group: str) -> int:
    """DeleteGroups v0 of one group; its error code."""
    response = client.request(DELETE_GROUPS, 0, struct.pack(">i", 1) + _string(group))
    pos = 4 + 4  # throttle time, results count
    pos += 2 + struct.unpack_from(">h", response, pos)[0]
    return int(struct.unpack_from(">h", response, pos)[0])


def _commit_groups(index: int) -> list[str]:
    return [f"c{index}-{i}" for i in range(GROUPS_PER_CLIENT)]


def _run_client(broker: BrokerProcess | RebalancedBroker, index: int, armed: threading.Event,
                ready: threading.Barrier, record: _Client) -> None:
    groups = _commit_groups(index)
    doomed = f"d{index}"
    try:
        client = WireClient("127.0.0.1", broker.port, timeout=5.0)
    except OSError:
        ready.abort()
        return
    offset = 0
    try:
        for offset in range(1, LAST_OFFSET + 1):
            if offset == FIRST_OFFSETS + 1:
                ready.wait(120)  # every client is this far: arm the plan
                armed.wait(120)
            # Half the clients delete their group first thing once armed, half a little later.
            if offset == FIRST_OFFSETS + 1 + (index % 2) * 2:
                record.deleted[doomed] = None
                record.counts[2] += 1  # until answered
                record.deleted[doomed] = delete_group(client, doomed) == 0
                record.counts[2] -= 1
                record.counts[0 if record.deleted[doomed] else 1] += 1
            for group in groups + ([doomed] if offset == 1 else []):
                for partition in range(PARTITIONS):
                    key = (group, partition)
                    try:
                        code = client.offset_commit(group, TOPIC, partition, offset)
                        deadline = time.monotonic() + 30
                        while (offset <= FIRST_OFFSETS and code in _STARTING
                               and time.monotonic() < deadline):
                            time.sleep(0.05)  # before the plan: wait for the group log to load
                            code = client.offset_commit(group, TOPIC, partition, offset)
                    except OSError:
                        record.counts[2] += 1
                        raise
                    if code == 0:
                        record.acked[key] = offset
                        record.counts[0] += 1
                    else:
                        record.errored.setdefault(key, set()).add(offset)
                        record.counts[1] += 1
    except (OSError, threading.BrokenBarrierError):
        pass
    finally:
        client.close()


def _create_topic(broker: BrokerProcess | RebalancedBroker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS,
                                            replication_factor=1)])
    futures[TOPIC].result(15)


def run_plan(name: str, workdir: Path, *, kit: bool = False) -> Outcome:
    """One run of the plan; `kit`: on the test kit's broker, armed by its control endpoint
    (only the `KIT_PLANS`)."""
    rules, _fail_stop = PLANS[name]
    outcome = Outcome(name)
    broker: BrokerProcess | RebalancedBroker
    if kit:
        # The group log's partitions as a broker started without the kit's settings has them.
        kit_broker = RebalancedBroker(workdir / "kit", warm=False, settings={
            "offsets.topic.num.partitions": defaults()["offsets.topic.num.partitions"]})
        data = kit_broker.data_dir / "data"
        restart_settings = kit_broker.settings
        broker = kit_broker

        def arm() -> None:
            kit_broker.control.fail_group_log(**KIT_PLANS[name])
    else:
        arm_file = workdir / "arm"
        data = workdir / "data"
        restart_settings = {}
        env_broker = BrokerProcess(data)
        env_broker.env["REBALANCED_FAULT_PLAN"] = json.dumps(
            [{**rule, "armed_by": str(arm_file)} for rule in rules])
        broker = env_broker

        def arm() -> None:
            arm_file.touch()
    broker.start()
    records = [_Client() for _ in range(CLIENTS)]
    try:
        _create_topic(broker)
        armed = threading.Event()
        ready = threading.Barrier(CLIENTS + 1)
        threads = [threading.Thread(target=_run_client, args=(broker, i, armed, ready, r))
                   for i, r in enumerate(records)]
        for thread in threads:
            thread.start()
        try:
            ready.wait(120)
            arm()
        finally:
            armed.set()
        for thread in threads:
            thread.join(60)
        outcome.exit_code = _exit_code(broker, 10)
        if outcome.exit_code is None:
            broker.stop()
            outcome.exit_code = _exit_code(broker, 0)
    finally:
        broker.kill()
    log_text = broker.log_text()
    outcome.offline_lines = log_text.count('"log offline"')
    for record in records:
        outcome.acknowledged += record.counts[0]
        outcome.error_answered += record.counts[1]
        outcome.unanswered += record.counts[2]

    restarted = BrokerProcess(data, settings=restart_settings)
    try:
        restarted.start()
    except RuntimeError:
        outcome.repair_needed = True
        restarted = BrokerProcess(data, settings=restart_settings)
        restarted.flags = ["--repair"]
        restarted.start()
    try:
        _check(restarted, records, outcome)
    finally:
        restarted.stop()
    return outcome


def _exit_code(broker: BrokerProcess | RebalancedBroker, timeout: float) -> int | None:
    """The broker's exit status once it has exited by itself within `timeout`, else None."""
    deadline = time.monotonic() + timeout
    while True:
        if isinstance(broker, BrokerProcess):
            code = None if broker.proc is None else broker.proc.poll()
        else:
            code = broker.exit_code
        if code is not None or time.monotonic() >= deadline:
            return code
        time.sleep(0.05)


def _check(broker: BrokerProcess, records: list[_Client], outcome: Outcome) -> None:
    client = WireClient("127.0.0.1", broker.port, timeout=10.0)
    try:
        for index, record in enumerate(records):
            for group in [*_commit_groups(index), f"d{index}"]:
                found = _fetch(client, group)
                for partition in range(PARTITIONS):
                    key = (group, partition)
                    committed = found.get(partition, -1)
                    acked = record.acked.get(key, -1)
                    deleted = record.deleted.get(group, False) if group.startswith("d") else False
                    if deleted is True:
                        if committed != -1:
                            outcome.lost += 1
                            outcome.details.append(f"{key}: deleted, still {committed}")
                        continue
                    if (deleted is False and group in record.deleted and committed == -1
                            and acked != -1):
                        outcome.resurrected += 1
                        outcome.details.append(f"{key}: refused deletion happened")
                        continue
                    if committed < acked and deleted is not None:
                        outcome.lost += 1
                        outcome.details.append(f"{key}: acknowledged {acked}, found {committed}")
                    if committed in record.errored.get(key, ()):
                        outcome.resurrected += 1
                        outcome.details.append(f"{key}: refused {committed} came back")
    finally:
        client.close()


def _fetch(client: WireClient, group: str) -> dict[int, int]:
    deadline = time.monotonic() + 15
    while True:
        found = client.offset_fetch(group, TOPIC, list(range(PARTITIONS)))
        if all(error == 0 for _, error in found.values()):
            return {p: offset for p, (offset, _) in found.items()}
        if time.monotonic() > deadline:  # the group log still loading
            raise AssertionError(f"OffsetFetch of {group}: {found}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(PLANS))
    parser.add_argument("--repeat", type=int, default=1, help="runs per plan, summed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    outcomes = []
    for name in args.only or list(PLANS):
        total = Outcome(name)
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="disk-faults-") as tmp:
                run = run_plan(name, Path(tmp))
            for counter in ("acknowledged", "error_answered", "unanswered", "offline_lines",
                            "lost", "resurrected"):
                setattr(total, counter, getattr(total, counter) + getattr(run, counter))
            total.exit_codes.append(run.exit_code)
            total.repair_needed |= run.repair_needed
            total.details += run.details
        outcomes.append(total)
    if args.json:
        print(json.dumps([asdict(o) for o in outcomes], indent=2))
        return
    print("| plan | acked | error-answered | unanswered | exit codes | offline lines | lost | "
          "resurrected | --repair needed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        codes = ",".join(sorted({str(c) for c in o.exit_codes}))
        print(f"| {o.plan} | {o.acknowledged} | {o.error_answered} | {o.unanswered} | "
              f"{codes} | {o.offline_lines} | {o.lost} | {o.resurrected} | "
              f"{'yes' if o.repair_needed else 'no'} |")
        for line in o.details[:5]:
            print(f"    {line}")


if __name__ == "__main__":
    main()
