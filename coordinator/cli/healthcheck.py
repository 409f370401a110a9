"""`rebalanced-healthcheck [HOST:PORT]`: exit 0 when a broker answers an ApiVersions request.

Without an address it checks `$REBALANCED_HEALTHCHECK_ADDRESS`, else every listener in
`$REBALANCED_LISTENERS` (the broker's own setting, so a container whose listener was moved is
checked where it now listens; a wildcard host is checked on loopback), else 127.0.0.1:9092.

A bare TCP connect succeeds as soon as the listening socket exists, even if the event loop is
wedged; a decoded ApiVersions answer (right correlation id, no error, a non-empty list of APIs)
shows the broker is reading, handling and writing requests. Standard library only, so it costs
a few milliseconds and no broker imports. On failure it prints one line and exits 1.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Mapping, Sequence

DEFAULT_ADDRESS = "127.0.0.1:9092"
_API_VERSIONS = 18
_CORRELATION_ID = 0x4EA1
_CLIENT_ID = b"rebalanced-healthcheck"


def api_versions_request() -> bytes:
    """ApiVersions v0 (header v1, empty body): every broker version answers it."""
    header = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(_CLIENT_ID))
    payload = header + _CLIENT_ID
    return struct.pack(">i", len(payload)) + payload


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def check(host: str, port: int, timeout: float = 2.0) -> int:
    """The number of APIs the broker advertises; raises on anything but a healthy answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(api_versions_request())
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        if not 10 <= size <= 1 << 20:
            raise ValueError(f"implausible response size {size}")
        body = _read_exactly(sock, size)
    correlation_id, error_code, api_count = struct.unpack_from(">ihi", body, 0)
    if correlation_id != _CORRELATION_ID:
        raise ValueError(f"correlation id {correlation_id}, expected {_CORRELATION_ID}")
    if error_code != 0:
        raise ValueError(f"ApiVersions error code {error_code}")
    if api_count <= 0:
        raise ValueError("the broker advertises no APIs")
    return int(api_count)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def listener_addresses(listeners: str) -> list[str]:
    """`NAME://host:port,...` (the broker's `listeners`) -> HOST:PORT to check, a wildcard or
    empty host as 127.0.0.1."""
    addresses = []
    for entry in (part.strip() for part in listeners.split(",")):
        if not entry:
            continue
        address = entry.partition("://")[2] or entry
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ValueError(f"listener {entry!r} is not NAME://host:port")
        host = host.strip("[]")
        addresses.append(f"{'127.0.0.1' if host in ('', '0.0.0.0', '::') else host}:{port}")
    return addresses


def default_addresses(environ: Mapping[str, str]) -> list[str]:
    if environ.get("REBALANCED_HEALTHCHECK_ADDRESS"):
        return [environ["REBALANCED_HEALTHCHECK_ADDRESS"]]
    if environ.get("REBALANCED_LISTENERS"):
        return listener_addresses(environ["REBALANCED_LISTENERS"])
    return [DEFAULT_ADDRESS]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print("usage: rebalanced-healthcheck [HOST:PORT]  (default $REBALANCED_HEALTHCHECK_ADDRESS,"
              f" else each of $REBALANCED_LISTENERS, else {DEFAULT_ADDRESS})", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        addresses = args or default_addresses(os.environ)
    except ValueError as exc:
        print(f"rebalanced-healthcheck: REBALANCED_LISTENERS: {exc}", file=sys.stderr)
        return 2
    for address in addresses:
        try:
            host, port = parse_address(address)
            check(host, port)
        except (OSError, ValueError, struct.error) as exc:
            print(f"rebalanced-healthcheck: {address}: unhealthy: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
