"""The operators' view of a running broker: Prometheus metrics and the live group page."""
