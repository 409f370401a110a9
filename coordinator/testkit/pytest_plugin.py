"""pytest fixtures of a real rebalanced broker (registered through the `pytest11` entry point).

- `rebalanced_broker`: a broker for one test; `rebalanced_broker_module` and
  `rebalanced_broker_session` share one per module or per session.
- `async_rebalanced_broker`: the same for `async def` tests (pytest-asyncio).
- `@pytest.mark.rebalanced(settings={...}, control=True)` on a test (or module) sets the
  broker's settings for the function-scoped fixtures.

Each yields a `RebalancedBroker`: `.bootstrap` for the clients, `.control` for faults, virtual
time and waiters. Brokers are forked from a warm parent started once per test session, as soon
as the collected tests are known to use one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from coordinator.testkit.process import RebalancedBroker, prewarm

FIXTURES = ("rebalanced_broker", "rebalanced_broker_module", "rebalanced_broker_session",
            "async_rebalanced_broker")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rebalanced(settings=None, control=True): settings of the test's broker")


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(name in FIXTURES for item in session.items
           for name in getattr(item, "fixturenames", ())):
        prewarm()


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("rebalanced")
    if marker is None:
        return {}
    return {key: marker.kwargs[key] for key in ("settings", "control") if key in marker.kwargs}


@pytest.fixture
def rebalanced_broker(request: pytest.FixtureRequest,
                      tmp_path: Any) -> Iterator[RebalancedBroker]:
    with RebalancedBroker(tmp_path / "rebalanced", **_options(request)) as broker:
        yield broker


@pytest.fixture(scope="module")
def rebalanced_broker_module(request: pytest.FixtureRequest,
                             tmp_path_factory: pytest.TempPathFactory
                             ) -> Iterator[RebalancedBroker]:
    with RebalancedBroker(tmp_path_factory.mktemp("rebalanced"),
                          **_options(request)) as broker:
        yield broker


@pytest.fixture(scope="session")
def rebalanced_broker_session(tmp_path_factory: pytest.TempPathFactory
                              ) -> Iterator[RebalancedBroker]:
    with RebalancedBroker(tmp_path_factory.mktemp("rebalanced")) as broker:
        yield broker


async def _async_broker(request: pytest.FixtureRequest,
                        tmp_path: Any) -> AsyncIterator[RebalancedBroker]:
    async with RebalancedBroker(tmp_path / "rebalanced", **_options(request)) as broker:
        yield broker


try:
    import pytest_asyncio
except ImportError:  # pytest-asyncio not installed: no async fixture
    pass
else:
    async_rebalanced_broker = pytest_asyncio.fixture(_async_broker,
                                                     name="async_rebalanced_broker")
