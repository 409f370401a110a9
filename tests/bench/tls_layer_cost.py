"""What the broker's TLS layer costs per request, in one process, away from the load generator.

    python -m tests.bench.tls_layer_cost

A client `SSLObject` and the broker's `TlsLayer` (a TLS 1.3 listener context with a throwaway
CA's ECDSA P-256 certificate, as `security_cost` uses) finish a handshake over memory; then
each request is a 60-byte record the layer decrypts and hands to the connection's protocol,
which answers 20 bytes that the layer encrypts and writes. Reported: CPU per request of the
whole layer, and of its OpenSSL calls alone (BIO write, `read`, `write`, BIO read), the best
of `repeat` batches of `requests` (process CPU time: other processes on the machine only add
to the worst batches). The end-to-end `security_cost` figure adds what the machine does around
it (wake-ups, caches shared with the load generator's own TLS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

from protocol.tls import TlsLayer
from tests.tls_material import Pki

REQUEST = b"x" * 60
RESPONSE = b"y" * 20


class _MemoryTransport:
    """The TCP side of the layer: keeps what the layer writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 9092) if name == "peername" else default


class _Answering(asyncio.Protocol):
    transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(RESPONSE)


class _Layer(TlsLayer):
    __slots__ = ()

    def handshake_completed(self) -> asyncio.Protocol | None:
        return _Answering()


def _contexts(root: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki = Pki.create(root / "pki")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.options |= ssl.OP_NO_RENEGOTIATION
    server.load_cert_chain(str(pki.issue("server", server=True, CN="localhost")))
    return server, ssl.create_default_context(cafile=str(pki.ca_path))


async def measure(requests: int, repeat: int) -> dict[str, Any]:
    server_context, client_context = _contexts(Path(tempfile.mkdtemp(prefix="tls-layer-")))
    raw = _MemoryTransport()
    layer = _Layer(server_context, 10.0)
    layer.connection_made(raw)  # type: ignore[arg-type]  # a transport by duck typing
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    for _ in range(10):
        with contextlib.suppress(ssl.SSLWantReadError):
            client.do_handshake()
        if client_out.pending:
            layer.data_received(client_out.read())
        for data in raw.written:
            client_in.write(data)
        raw.written.clear()
    assert layer._app is not None, "no handshake"

    def records() -> list[bytes]:
        out = []
        for _ in range(requests):
            client.write(REQUEST)
            out.append(client_out.read())
        return out

    best_layer = best_openssl = float("inf")
    bare_in, bare_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    bare_server = server_context.wrap_bio(bare_in, bare_out, server_side=True)
    bare_client_in, bare_client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    bare_client = client_context.wrap_bio(bare_client_in, bare_client_out,
                                          server_hostname="localhost")
    for _ in range(10):
        for side in (bare_client, bare_server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        if bare_client_out.pending:
            bare_in.write(bare_client_out.read())
        if bare_out.pending:
            bare_client_in.write(bare_out.read())
    for _ in range(repeat):
        batch = records()
        start = time.process_time()
        for record in batch:
            layer.data_received(record)
        best_layer = min(best_layer, time.process_time() - start)
        raw.written.clear()
        bare_batch = []
        for _ in range(requests):
            bare_client.write(REQUEST)
            bare_batch.append(bare_client_out.read())
        start = time.process_time()
        for record in bare_batch:
            bare_in.write(record)
            bare_server.read(16 * 1024)
            bare_server.write(RESPONSE)
            bare_out.read()
        best_openssl = min(best_openssl, time.process_time() - start)
    return {"tls": [layer._ssl.version(), (layer._ssl.cipher() or ("",))[0]],
            "layer_cpu_us_per_request": round(best_layer / requests * 1e6, 3),
            "openssl_calls_cpu_us_per_request": round(best_openssl / requests * 1e6, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.requests, args.repeat)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
