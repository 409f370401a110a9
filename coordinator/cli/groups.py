"""`rebalanced groups ...`: kafka-consumer-groups.sh for any Kafka-compatible broker.

    rebalanced groups list
    rebalanced groups describe GROUP [--members | --state | --offsets]
    rebalanced groups reset-offsets GROUP (--topic T[:P,...] | --all-topics) --to-... [--execute]
    rebalanced groups delete-offsets GROUP --topic T[:P,...]
    rebalanced groups delete GROUP

Columns and rules follow Kafka's tool; `--json` prints one JSON document instead of a table.
A mistake or a failure prints one `rebalanced groups: error: ...` line and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.cli.admin import AdminError, GroupAdmin, GroupDescription, Member
from coordinator.cli.arguments import (
    OneLineParser,
    connection_arguments,
    group_id,
    required_subcommands,
)
from coordinator.cli.reset import (
    PartitionRange,
    ResetSpec,
    ResetSpecError,
    TopicPartition,
    TopicScope,
    new_offsets,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_scope,
)
from coordinator.cli.security import CommandError, client_config

PROG = "rebalanced groups"
# Kafka's tool refuses to reset or delete offsets of a group that still has members.
INACTIVE_STATES = ("Empty", "Dead")


def argument_parser() -> argparse.ArgumentParser:
    common = connection_arguments(timeout_s=5.0)

    parser = OneLineParser(prog=PROG, allow_abbrev=False,
                           description="Inspect and manage consumer groups, like Kafka's "
                                       "kafka-consumer-groups.sh, over the Kafka protocol.")
    commands = required_subcommands(parser, "command", "COMMAND")

    commands.add_parser("list", parents=[common], allow_abbrev=False, help="list groups")

    describe = commands.add_parser(
        "describe", parents=[common], allow_abbrev=False,
        help="a group's offsets and lag (default), members, or state")
    describe.add_argument("group", metavar="GROUP", type=group_id)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_const", dest="view", const="offsets",
                      help="committed offsets, log-end offsets and lag per partition (default)")
    view.add_argument("--members", action="store_const", dest="view", const="members",
                      help="members with their client id, host and partitions")
    view.add_argument("--state", action="store_const", dest="view", const="state",
                      help="coordinator, assignor, state and member count")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: list each member's partitions")

    reset = commands.add_parser(
        "reset-offsets", parents=[common], allow_abbrev=False,
        help="move a stopped group's committed offsets (dry run unless --execute)")
    reset.add_argument("group", metavar="GROUP", type=group_id)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the earliest offset")
    how.add_argument("--to-latest", action="store_true", help="the log-end offset")
    how.add_argument("--to-current", action="store_true", help="the committed offset")
    how.add_argument("--to-offset", type=int, metavar="OFFSET", help="this offset")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="the committed offset plus N (negative moves back)")
    how.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                     help="the first offset at or after this time (UTC unless a zone is given)")
    how.add_argument("--by-duration", metavar="PnDTnHnMnS",
                     help="the first offset at or after now minus this ISO-8601 duration")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="show the new offsets without changing anything (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")

    delete_offsets = commands.add_parser(
        "delete-offsets", parents=[common], allow_abbrev=False,
        help="delete a group's committed offsets for topics or partitions")
    delete_offsets.add_argument("group", metavar="GROUP", type=group_id)
    delete_offsets.add_argument("--topic", action="append", required=True,
                                metavar="TOPIC[:P,...]", help="repeatable")

    delete = commands.add_parser("delete", parents=[common], allow_abbrev=False,
                                 help="delete groups that have no members")
    delete.add_argument("groups", metavar="GROUP", nargs="+", type=group_id)
    return parser


# output ----------------------------------------------------------------------------------------

def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in r]
                                          for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    return "\n".join(lines)


def _emit(args: argparse.Namespace, document: Any, text: str) -> None:
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=False))
    elif text:
        print(text)


# commands --------------------------------------------------------------------------------------

def cmd_list(admin: GroupAdmin, args: argparse.Namespace) -> int:
    groups = admin.list_groups()
    _emit(args, [{"group": g, "state": s, "type": t} for g, s, t in groups],
          "\n".join(g for g, _, _ in groups) if groups else "")
    return 0


def _existing(admin: GroupAdmin, group_id: str) -> tuple[GroupDescription, dict[TopicPartition,
                                                                                  int]]:
    description, committed = admin.describe_with_offsets(group_id)
    _check_exists(group_id, description, committed)
    return description, committed


def _check_exists(group_id: str, description: GroupDescription,
                  committed: dict[TopicPartition, int]) -> None:
    if description.state in ("Dead", "Unknown") and not description.members and not committed:
        raise AdminError(f"consumer group {group_id!r} does not exist")


def cmd_describe(admin: GroupAdmin, args: argparse.Namespace) -> int:
    view = args.view or "offsets"
    if view in ("state", "members"):
        description, committed = _existing(admin, args.group)
        if view == "state":
            return _describe_state(description, args)
        return _describe_members(description, args)
    description, committed, log_end = admin.describe_with_log_ends(args.group)
    _check_exists(args.group, description, committed)
    owner: dict[TopicPartition, Member] = {}
    for assigned in description.members:
        for tp in assigned.assignment:
            owner[tp] = assigned
    partitions = sorted(set(committed) | set(owner))
    rows: list[dict[str, Any]] = []
    for tp in partitions:
        current = committed.get(tp)
        end = log_end.get(tp)
        member = owner.get(tp)
        rows.append({
            "group": args.group, "topic": tp[0], "partition": tp[1],
            "current_offset": current, "log_end_offset": end,
            "lag": (end - current) if current is not None and end is not None and end >= 0
            else None,
            "consumer_id": member.member_id if member else None,
            "host": member.host if member else None,
            "client_id": member.client_id if member else None,
        })
    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
               "CONSUMER-ID", "HOST", "CLIENT-ID"]
    text = table(headers, [list(r.values()) for r in rows])
    if not description.members:
        text = f"Consumer group '{args.group}' has no active members.\n\n" + text
    _emit(args, {"group": args.group, "state": description.state, "partitions": rows}, text)
    return 0


def _describe_state(description: GroupDescription, args: argparse.Namespace) -> int:
    node, host, port = description.coordinator
    document = {"group": description.group_id, "coordinator": {"id": node, "host": host,
                                                               "port": port},
                "assignment_strategy": description.protocol, "state": description.state,
                "type": description.group_type, "members": len(description.members)}
    text = table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                 [[description.group_id, f"{host}:{port} ({node})", description.protocol or "",
                   description.state, len(description.members)]])
    _emit(args, document, text)
    return 0


def _describe_members(description: GroupDescription, args: argparse.Namespace) -> int:
    members = [{"group": description.group_id, "consumer_id": m.member_id,
                "group_instance_id": m.group_instance_id, "host": m.host,
                "client_id": m.client_id, "partitions": len(m.assignment),
                "assignment": [f"{t}:{p}" for t, p in m.assignment]}
               for m in description.members]
    headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = [[m["group"], m["consumer_id"], m["group_instance_id"], m["host"], m["client_id"],
             m["partitions"]] for m in members]
    if args.verbose:
        headers.append("ASSIGNMENT")
        for row, member in zip(rows, description.members, strict=True):
            row.append(_compact(member.assignment))
    text = table(headers, rows)
    if not members:
        text = f"Consumer group '{description.group_id}' has no active members."
    _emit(args, {"group": description.group_id, "state": description.state,
                 "members": members}, text)
    return 0


def _compact(assignment: Sequence[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(by_topic.items())) or "-"


def _scoped_partitions(scopes: Sequence[TopicScope], topics: dict[str, int]
                       ) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for scope in scopes:
        count = topics.get(scope.topic)
        if count is None:
            raise AdminError(f"topic {scope.topic!r} does not exist")
        wanted = scope.partitions if scope.partitions is not None else tuple(range(count))
        for partition in wanted:
            if partition >= count:
                raise AdminError(f"partition {scope.topic}:{partition} does not exist "
                                 f"({scope.topic} has {count} partitions)")
            out.append((scope.topic, partition))
    return sorted(set(out))


def _reset_spec(args: argparse.Namespace) -> ResetSpec:
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_current:
        return ResetSpec("current")
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise ResetSpecError(f"invalid --to-offset {args.to_offset}: must be >= 0")
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec("timestamp", parse_datetime_ms(args.to_datetime))
    return ResetSpec("timestamp", int(time.time() * 1000) - parse_duration_ms(args.by_duration))


def _refuse_if_active(description: GroupDescription, action: str) -> None:
    if description.state not in INACTIVE_STATES or description.members:
        raise AdminError(
            f"{action} only when group '{description.group_id}' is inactive, but its current "
            f"state is {description.state} with {len(description.members)} member(s); stop its "
            "consumers first")


def cmd_reset(admin: GroupAdmin, args: argparse.Namespace) -> int:
    spec = _reset_spec(args)  # a bad date or duration fails before any request
    scopes = [parse_topic_scope(t) for t in args.topic or ()]
    description, committed = _existing_or_new(admin, args.group)
    _refuse_if_active(description, "offsets can be reset")
    if args.all_topics:
        partitions = sorted(committed)
        if not partitions:
            raise AdminError(f"group {args.group!r} has no committed offsets; name the topics "
                             "with --topic")
        topics = admin.topics()
        missing = sorted({t for t, _ in partitions if t not in topics})
        if missing:
            raise AdminError(f"topic {missing[0]!r} does not exist")
    else:
        partitions = _scoped_partitions(scopes, admin.topics())
    earliest = admin.list_offsets(partitions, "earliest")
    latest = admin.list_offsets(partitions, "latest")
    ranges = {tp: PartitionRange(earliest[tp], latest[tp]) for tp in partitions}
    by_time = (admin.list_offsets(partitions, "timestamp", spec.value)
               if spec.kind == "timestamp" else None)
    targets = new_offsets(spec, partitions, ranges, committed, by_time)
    if args.execute:
        admin.alter_offsets(args.group, targets)
    rows = [{"group": args.group, "topic": t, "partition": p, "new_offset": o}
            for (t, p), o in sorted(targets.items())]
    text = table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [list(r.values()) for r in rows])
    if not args.execute:
        text += "\n\nDry run: nothing changed. Add --execute to commit these offsets."
    _emit(args, {"group": args.group, "executed": bool(args.execute), "partitions": rows}, text)
    return 0


def _existing_or_new(admin: GroupAdmin, group_id: str
                     ) -> tuple[GroupDescription, dict[TopicPartition, int]]:
    """Reset may create a group's offsets (Kafka allows it for a group id never used)."""
    return admin.describe_with_offsets(group_id)


def cmd_delete_offsets(admin: GroupAdmin, args: argparse.Namespace) -> int:
    scopes = [parse_topic_scope(t) for t in args.topic]
    _, committed = _existing(admin, args.group)
    partitions: list[TopicPartition] = []
    for scope in scopes:
        if scope.partitions is None:
            found = [tp for tp in committed if tp[0] == scope.topic]
            if not found:
                raise AdminError(f"group {args.group!r} has no committed offsets for topic "
                                 f"{scope.topic!r}")
            partitions.extend(found)
        else:
            partitions.extend((scope.topic, p) for p in scope.partitions)
    answers = admin.delete_offsets(args.group, sorted(set(partitions)))
    rows = [{"topic": t, "partition": p, "status": error or "Successful"}
            for (t, p), error in sorted(answers.items())]
    _emit(args, {"group": args.group, "partitions": rows},
          table(["TOPIC", "PARTITION", "STATUS"], [list(r.values()) for r in rows]))
    failed = [r for r in rows if r["status"] != "Successful"]
    if failed:
        print(f"{PROG}: error: {len(failed)} partition(s) not deleted: {failed[0]['status']}",
              file=sys.stderr)
        return 1
    return 0


def cmd_delete(admin: GroupAdmin, args: argparse.Namespace) -> int:
    answers = admin.delete_groups(args.groups)
    rows = [{"group": g, "status": error or "Deleted"} for g, error in answers.items()]
    _emit(args, rows, "\n".join(
        f"Deletion of group '{r['group']}': {r['status']}" for r in rows))
    failed = [r for r in rows if r["status"] != "Deleted"]
    if failed:
        print(f"{PROG}: error: group {failed[0]['group']!r} not deleted: {failed[0]['status']}",
              file=sys.stderr)
        return 1
    return 0


COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "reset-offsets": cmd_reset,
    "delete-offsets": cmd_delete_offsets,
    "delete": cmd_delete,
}


def _check_before_connecting(args: argparse.Namespace) -> None:
    """Mistakes in the options are reported without waiting for a broker."""
    if args.command == "reset-offsets":
        _reset_spec(args)
    for text in getattr(args, "topic", None) or ():
        parse_topic_scope(text)


def main(argv: Sequence[str]) -> int:
    parser = argument_parser()
    args = parser.parse_args(list(argv))
    try:
        _check_before_connecting(args)
    except ResetSpecError as exc:
        parser.error(str(exc))  # a mistake in the options: one line and exit 2, as argparse's
    admin: GroupAdmin | None = None
    try:
        try:
            security = client_config(args.command_config)
        except CommandError as exc:
            raise AdminError(str(exc)) from None
        admin = GroupAdmin(args.bootstrap_server, args.timeout, security)
        return COMMANDS[args.command](admin, args)
    except (AdminError, ResetSpecError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if admin is not None:
            admin.close()
