"""Operators' commands: `rebalanced groups ...` (see `groups.py`)."""
