"""Errors raised while decoding a request; each one closes only the offending connection, but
`AnsweredOverLimits`, which is answered."""

from __future__ import annotations

from typing import Any


class MalformedRequest(ValueError):
    """The frame is not a valid request of the API and version its header names."""


class UnsupportedApi(ValueError):
    """The API key or version is one we do not implement (and cannot answer in its own layout)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version


class AnsweredOverLimits(Exception):
    """A well-formed request over its API's element limit, but within `ANSWERED_ELEMENTS_FACTOR`
    times it: decoded, to be answered with INVALID_REQUEST for each of its elements (Kafka's
    error response for a request it refuses) instead of a closed connection."""

    def __init__(self, header: Any, request: Any, reason: str) -> None:
        super().__init__(reason)
        self.header = header
        self.request = request
        self.reason = reason
