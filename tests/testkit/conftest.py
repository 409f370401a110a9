"""The kit's fixtures come from the `pytest11` entry point once the package is installed with
it; an environment installed before the entry point existed gets them here (importing them
again is harmless when the plugin is registered)."""

from coordinator.testkit.pytest_plugin import (  # noqa: F401
    async_rebalanced_broker,
    pytest_collection_finish,
    pytest_configure,
    rebalanced_broker,
    rebalanced_broker_module,
    rebalanced_broker_session,
)
