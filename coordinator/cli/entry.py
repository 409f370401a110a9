"""The `rebalanced` command: the broker, or `rebalanced groups ...` without loading the broker.

Importing the broker (kio's protocol tables) takes most of a second; the operators' commands do
not need it, and `groups describe` should answer within one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["groups"]:
        from coordinator.cli.groups import main as groups_main

        return groups_main(arguments[1:])
    from coordinator.__main__ import main as broker_main

    return broker_main(arguments)
