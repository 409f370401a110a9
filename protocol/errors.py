"""Errors raised while decoding a request; each one closes only the offending connection."""

from __future__ import annotations


class MalformedRequest(ValueError):
    """The frame is not a valid request of the API and version its header names."""


class UnsupportedApi(ValueError):
    """The API key or version is one we do not implement (and cannot answer in its own layout)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
