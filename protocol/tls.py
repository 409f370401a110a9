"""TLS over a plain TCP transport, with `ssl.SSLObject` and memory BIOs.

The event loop's own TLS transport reads every record with `SSLObject.read(256 KiB)`: a fresh
256 KiB buffer each time, which the allocator maps and unmaps (mmap, mremap, munmap and their
page faults on every request), and it tries one more read per batch that ends in an
exception. Here each record is read with `read(16 KiB)`, the most one record holds: the bytes
object comes from the heap (far below the allocator's mmap threshold), is shrunk in place to
what was read and handed to the connection as it is (no copy out of a buffer, no view); the
records in hand are read until the input BIO is empty without the failing read, and each
`write` of the connection (all the responses of a loop turn, joined) is encrypted and sent with
one transport write.

Once the handshake is done, that record path runs in C where `protocol._tls_records` was built
(`_tls_records.c`: the same steps, with OpenSSL called directly instead of through four `ssl`
method calls and three Python frames per request, and each record read into a stack buffer
instead of a fresh 16 KiB object). The handshake, certificates, closing and every failure stay
here; the Python record path below is the reference, and the one used where the extension is
missing or refuses this Python's `ssl` objects (`RECORDS_IN_C`).

`TlsLayer` is the protocol of the TCP transport and the transport of the connection it serves:
`write`, `close`, `abort`, `pause_reading`, `resume_reading`, `is_closing` and
`get_extra_info` ("peercert", "ssl_object", "cipher", and the TCP transport's own). A
subclass decides what happens when the handshake ends (`handshake_completed` returns the
connection's protocol, or None to close) or fails (`handshake_failed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TYPE_CHECKING, Any

# What one `SSLObject.read` asks for: a TLS record carries at most 16 KiB of data (RFC 8446
# 5.1; OpenSSL refuses a larger one), so one read takes all of a record.
_RECORD_SIZE = 16 * 1024


class _RecordsInPython(asyncio.Protocol):
    """The base of `TlsLayer` where `protocol._tls_records` was not built (or cannot use this
    Python's OpenSSL): `TlsLayer`'s own Python record path is then its `data_received`,
    `_read_records` and `write`."""

    __slots__ = ("_app", "_app_reading_paused", "_closing", "_raw")

    _app: asyncio.Protocol | None
    _app_reading_paused: bool
    _closing: bool
    _raw: Any

    def _bind_records(self, sslobj: Any, incoming: ssl.MemoryBIO,
                      outgoing: ssl.MemoryBIO) -> bool:
        return False

    @property
    def _records_bound(self) -> bool:
        return False

    @property
    def keeping_record_buffers(self) -> bool:
        return False

    def release_record_buffers(self) -> bool:
        """A busy connection's record buffers are only kept in C (see `_tls_records.c`)."""
        return False


def _record_layer_base() -> type:
    """`protocol._tls_records.RecordLayer` where it was built and binds to the OpenSSL of the
    `ssl` module, else the Python record path."""
    try:
        import _ssl

        from protocol import _tls_records  # type: ignore[attr-defined]
    except ImportError:
        return _RecordsInPython
    # A `_ssl` linked into the interpreter (no file of its own) has no library to look in.
    path = getattr(_ssl, "__file__", None)
    object_type = getattr(_ssl, "_SSLSocket", None)
    if path is None or object_type is None or not _tls_records.bind_library(
            path, ssl.OPENSSL_VERSION_NUMBER, ssl.SSLError, ssl.SSLEOFError, object_type,
            _ssl.MemoryBIO, _ssl._SSLContext):
        return _RecordsInPython
    return type("_RecordsInC", (_tls_records.RecordLayer, asyncio.Protocol),
                {"__slots__": (), "__module__": __name__})


if TYPE_CHECKING:
    _RecordLayer = _RecordsInPython  # the C base has the same fields and methods
else:
    _RecordLayer = _record_layer_base()
RECORDS_IN_C: bool = _RecordLayer is not _RecordsInPython


class TlsLayer(_RecordLayer):
    __slots__ = ("_eof_delivered", "_handshake_over", "_handshake_timeout_s",
                 "_handshake_timer", "_incoming", "_outgoing", "_records", "_ssl")

    # Whether a connection takes the record path in C once its handshake is done (where the
    # extension is there to take it); False keeps it in Python.
    records_in_c = True

    def __init__(self, context: ssl.SSLContext, handshake_timeout_s: float) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        # The records are read and written through the C object under `SSLObject` (its
        # methods only forward to it): a Python call less per read, write and pending.
        self._records: Any = getattr(self._ssl, "_sslobj", self._ssl)
        self._raw: Any = None  # the TCP transport (uvloop's is not an asyncio.Transport)
        self._app: asyncio.Protocol | None = None  # set once the handshake is done
        self._app_reading_paused = False
        self._closing = False
        self._eof_delivered = False
        self._handshake_over = False
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._handshake_timeout_s = handshake_timeout_s

    # What a subclass decides ------------------------------------------------------------------

    def handshake_completed(self) -> asyncio.Protocol | None:
        """The protocol of the connection now secured; None closes it."""
        raise NotImplementedError

    def handshake_failed(self, reason: str) -> None:
        """The handshake failed (garbage, a plaintext client, an untrusted certificate, EOF,
        the timeout): the connection is closed after this."""

    def stream_failed(self, reason: str) -> None:
        """A record after the handshake did not decrypt or verify, or the client broke the
        protocol: the connection is closed after this."""

    def handshake_ended(self) -> None:
        """The handshake is over, either way (called once, before the connection's
        protocol is started or after the failure)."""

    # The TCP side -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport
        self._handshake_timer = asyncio.get_running_loop().call_later(
            self._handshake_timeout_s, self._handshake_timed_out)

    def _data_received_python(self, data: bytes) -> None:
        self._incoming.write(data)
        if self._app is not None:
            self._read_records()
        elif not self._closing:
            self._handshake()

    def eof_received(self) -> bool:
        self._incoming.write_eof()
        app = self._app
        if app is None:
            if not self._closing:
                self._fail("the client closed the connection during the TLS handshake")
            return True
        self._read_records()
        self._end_of_stream()
        return True  # closed here, or by the connection when it has answered

    def _end_of_stream(self) -> None:
        app = self._app
        if self._closing or self._eof_delivered or app is None:
            return
        self._eof_delivered = True
        if not app.eof_received():
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._app is None:
            self._end_handshake()
            return
        app, self._app = self._app, None
        app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    # The handshake ----------------------------------------------------------------------------

    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, ssl.CertificateError, ValueError) as exc:
            self._flush()  # the alert that tells the client why
            self._fail(_reason(exc))
            return
        self._flush()
        self._end_handshake()
        if self._closing:
            return
        app = self.handshake_completed()
        if app is None:
            self.close()
            return
        self._app = app
        if self.records_in_c:
            self._bind_records(self._records, self._incoming, self._outgoing)
        app.connection_made(self)  # type: ignore[arg-type]  # a transport by duck typing
        if self._incoming.pending and not self._closing:
            # A request sent with the handshake's last flight.
            self._read_records()

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        if self._app is None and not self._closing:
            self._fail(f"no TLS handshake within {self._handshake_timeout_s:g} s")

    def _end_handshake(self) -> None:
        if self._handshake_over:
            return
        self._handshake_over = True
        timer = self._handshake_timer
        if timer is not None:
            self._handshake_timer = None
            timer.cancel()
        self.handshake_ended()

    def _fail(self, reason: str) -> None:
        self._closing = True
        self.handshake_failed(reason)
        self._end_handshake()
        self._raw.close()

    # Records ----------------------------------------------------------------------------------

    def _read_records_python(self) -> None:
        app = self._app
        if app is None:
            return
        read = self._records.read
        incoming = self._incoming
        # Each read takes all of a record: once the input BIO is empty, the SSL object holds
        # nothing more to read either.
        while not self._app_reading_paused and not self._closing:
            try:
                data: bytes = read(_RECORD_SIZE)
            except ssl.SSLWantReadError:
                break  # the rest of a record is still to come
            except ssl.SSLError as exc:
                self._protocol_error(exc)
                return
            if not data:
                self._end_of_stream()  # the client's close_notify
                return
            app.data_received(data)
            if not incoming.pending:
                break  # all read, without the failing read that would say so
        if self._outgoing.pending:
            self._flush()  # what TLS answers by itself (a key update)

    def _protocol_error(self, exc: ssl.SSLError) -> None:
        self._flush()  # the alert, if TLS wrote one
        if isinstance(exc, ssl.SSLEOFError):
            # The TCP stream ended (eof_received) inside a record or without close_notify:
            # an end of stream all the same, which eof_received hands on.
            return
        self._closing = True
        self.stream_failed(_reason(exc))
        self._raw.close()

    def _flush(self) -> None:
        if self._outgoing.pending:
            self._raw.write(self._outgoing.read())

    # The transport of the connection ----------------------------------------------------------

    def _write_python(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._records.write(data)
        except ssl.SSLError as exc:
            self._protocol_error(exc)
            return
        self._raw.write(self._outgoing.read())

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._app is not None:
            with contextlib.suppress(ssl.SSLError, ValueError):
                self._ssl.unwrap()  # writes close_notify; the client's is not waited for
            self._flush()
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or bool(self._raw.is_closing())

    def pause_reading(self) -> None:
        self._app_reading_paused = True
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._app_reading_paused = False
        self._raw.resume_reading()
        if self._incoming.pending or self._ssl.pending():
            # Records read while paused are read now (not from inside the caller).
            asyncio.get_running_loop().call_soon(self._read_records)

    def get_write_buffer_size(self) -> int:
        return int(self._raw.get_write_buffer_size()) + self._outgoing.pending

    if not RECORDS_IN_C:
        data_received = _data_received_python  # type: ignore[assignment]
        _read_records = _read_records_python
        write = _write_python

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peercert":
            return self._ssl.getpeercert()
        if name == "ssl_object":
            return self._ssl
        if name == "cipher":
            return self._ssl.cipher()
        if name == "compression":
            return self._ssl.compression()
        if self._raw is None:
            return default
        return self._raw.get_extra_info(name, default)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
