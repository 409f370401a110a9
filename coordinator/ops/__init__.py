"""The operators' view of a running broker: Prometheus metrics and the live group page.

Nothing here holds the broker: the page and `/metrics` read `view.BrokerView`, which the runtime
implements (`coordinator/runtime/ops_view.py`), and the request counters and rebalance history
(`metrics/`) are fed by the runtime. `tests/unit/test_layering.py` keeps it so.
"""
