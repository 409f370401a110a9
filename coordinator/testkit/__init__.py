"""A test kit for consumer applications: a real broker in its own process for each test (or
module, or session), with a control handle for faults, virtual time and group waiters.

`from coordinator.testkit import RebalancedBroker`; pytest users get the fixtures of
`coordinator.testkit.pytest_plugin` through the package's `pytest11` entry point. This package
imports nothing of the broker: a test process stays light, the broker runs elsewhere.
"""

from coordinator.testkit.process import RebalancedBroker, free_port

__all__ = ["RebalancedBroker", "free_port"]
