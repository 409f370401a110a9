"""Handlers of the data-plane APIs: topics, Produce, Fetch, ListOffsets, Metadata."""
