"""Rebalance forensics: a PySpark job over the broker's event journal and group log.

Never imported by the broker; install with the `forensics` extra. See docs/forensics.md.
"""
