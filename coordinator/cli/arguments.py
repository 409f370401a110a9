"""What the operators' commands (`rebalanced groups`, `transactions`, `acls`, `users`) share on
their command lines: one-line usage errors and the options that say how to reach a broker."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line and exit 2, as for every other mistake (argparse would print the usage too).
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def required_subcommands(parser: argparse.ArgumentParser, dest: str,
                         metavar: str) -> argparse._SubParsersAction[OneLineParser]:
    """The parser's subcommands, one of which must be given (a usage error in one line)."""
    subcommands = parser.add_subparsers(dest=dest, metavar=metavar, parser_class=OneLineParser)
    subcommands.required = True
    return subcommands


def positive_seconds(text: str) -> float:
    """A `--timeout`: a number of seconds above 0 (a socket cannot wait less)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return seconds


def group_id(text: str) -> str:
    """A GROUP argument: Kafka has no group with an empty id."""
    if not text:
        raise argparse.ArgumentTypeError("a group id cannot be empty")
    return text


def connection_arguments(timeout_s: float) -> OneLineParser:
    """A parent parser: the broker, the client properties of a secured listener, the timeout
    and the output format."""
    common = OneLineParser(add_help=False)
    common.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                        help=f"the broker to talk to (default: {DEFAULT_BOOTSTRAP})")
    common.add_argument("--timeout", type=positive_seconds, default=timeout_s, metavar="SECONDS",
                        help=f"give up on the broker after this long (default: {timeout_s:g})")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--command-config", type=Path, metavar="FILE",
                        help="client properties for a secured listener (security.protocol, "
                             "sasl.*, ssl.*)")
    return common
