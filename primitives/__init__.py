"""Kafka's primitive byte encodings, shared by the two leaves `protocol/` and `storage/`.

Both leaves read and write Kafka's variable-length integers, and neither may import the other,
so the one copy lives here, below both. This package imports nothing of ours.
"""
