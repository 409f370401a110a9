"""The API versions the broker serves, as its ApiVersions answer advertises them.

Built from a broker constructed (not started) with default settings: the table is whatever the
API modules' declarations register, so tests read it the way clients do, not from a copy.
"""

from __future__ import annotations

from functools import cache

from coordinator.runtime.broker import Broker
from coordinator.settings import defaults


@cache
def served_versions() -> dict[int, tuple[int, int]]:
    return Broker(defaults()).served_versions()
