"""`rebalanced faults add|list|remove`: the test control endpoint's fault rules from a shell
(docker-compose setups, suites in other languages). The rule JSON is the one of
coordinator/testkit/faults.py.

    rebalanced faults add '{"match": {"api": "Heartbeat"}, "action": {"type": "drop"}}'
    rebalanced faults list
    rebalanced faults remove 3        (or --all)

The endpoint and token come from --control/--token or REBALANCED_CONTROL (http://HOST:PORT)
and REBALANCED_CONTROL_TOKEN. Exit 2 with one line on a malformed rule or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from coordinator.testkit.control import Control, ControlError


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line and exit 2, as the broker's and the operators' commands do.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _endpoint_options(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--control", default=default or os.environ.get("REBALANCED_CONTROL", ""),
                        help="http://HOST:PORT of test.control.listener "
                        "(default: $REBALANCED_CONTROL)")
    parser.add_argument("--token",
                        default=default or os.environ.get("REBALANCED_CONTROL_TOKEN", ""),
                        help="test.control.token (default: $REBALANCED_CONTROL_TOKEN)")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="rebalanced faults",
                            description="fault rules of a test control endpoint")
    _endpoint_options(parser, None)
    # The same options after the command too (`rebalanced faults list --control URL`), as
    # `rebalanced groups` takes its own; given there, they win.
    after = _OneLineParser(add_help=False)
    _endpoint_options(after, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True,
                                     parser_class=_OneLineParser)
    add = commands.add_parser("add", parents=[after],
                              help="install a rule; prints it with its id")
    add.add_argument("rule", help="the rule as JSON, @FILE, or - for stdin")
    commands.add_parser("list", parents=[after], help="the rules with their matches and hits")
    remove = commands.add_parser("remove", parents=[after], help="remove a rule, or all")
    remove.add_argument("rule_id", nargs="?", type=int)
    remove.add_argument("--all", action="store_true")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv))
    if not args.control:
        parser.exit(2, "rebalanced faults: no endpoint: --control or REBALANCED_CONTROL\n")
    try:
        control = Control(args.control, args.token)
    except ValueError as exc:
        parser.exit(2, f"rebalanced faults: {exc}\n")
    try:
        if args.command == "add":
            text = args.rule
            if text == "-":
                text = sys.stdin.read()
            elif text.startswith("@"):
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            try:
                rule = json.loads(text)
            except ValueError as exc:
                parser.exit(2, f"rebalanced faults: the rule is not JSON: {exc}\n")
            print(json.dumps(control.add_fault(rule).rule))
        elif args.command == "list":
            for rule in control.faults():
                print(json.dumps(rule))
        else:
            if args.all == (args.rule_id is not None):
                parser.exit(2, "rebalanced faults remove: a rule id or --all\n")
            if args.all:
                print(f"removed {control.clear_faults()}")
            else:
                removed = control._call("DELETE", f"/faults/{args.rule_id}", missing_ok=True)
                if removed is None:
                    print(f"rebalanced faults: no rule {args.rule_id}", file=sys.stderr)
                    return 1
                print("removed 1")
    except ValueError as exc:
        print(f"rebalanced faults: {exc}", file=sys.stderr)
        return 2
    except (PermissionError, ControlError, OSError) as exc:
        print(f"rebalanced faults: {exc}", file=sys.stderr)
        return 1
    finally:
        control.close()
    return 0
