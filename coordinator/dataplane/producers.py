"""Idempotent-producer bookkeeping: producer ids, and per-partition sequence checks.

A retried batch (same producer, epoch and base sequence as one of the last five appended) is
answered with the offset it got the first time instead of being appended twice; a gap in the
sequence is refused with OUT_OF_ORDER_SEQUENCE_NUMBER. The state lives in memory: after a
restart a producer's first batch is accepted whatever its sequence.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from protocol.build import build
from protocol.codec import response_type

INIT_PRODUCER_ID = 22
VERSIONS = ApiVersionRange(INIT_PRODUCER_ID, 0, 4)

_PRODUCER = struct.Struct(">qhi")  # producer id, epoch, base sequence at batch offset 43
_LAST_DELTA = struct.Struct(">i")  # at batch offset 23
_KEEP = 5


@dataclass(slots=True)
class _PartitionProducer:
    epoch: int
    last_sequence: int
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=_KEEP))


@dataclass(slots=True)
class ProduceCheck:
    duplicate_offset: int | None
    _table: ProducerTable | None = None
    _key: tuple[str, int, int] | None = None
    _epoch: int = 0
    _base_sequence: int = 0
    _last_sequence: int = 0

    def record(self, base_offset: int) -> None:
        if self._table is not None and self._key is not None:
            self._table._record(self._key, self._epoch, self._base_sequence,
                                self._last_sequence, base_offset)


_NOT_IDEMPOTENT = ProduceCheck(None)


class ProducerSequenceError(Exception):
    """A produce that the producer's epoch or sequence refuses; Produce answers `code`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProducerTable:
    def __init__(self) -> None:
        # Ids start from the wall clock so ids handed out before a restart are not reused.
        self._next_id = int(time.time() * 1000) << 4
        self._state: dict[tuple[str, int, int], _PartitionProducer] = {}

    def new_producer_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def check(self, topic: str, partition: int, records: bytes) -> ProduceCheck:
        if len(records) < 61:
            return _NOT_IDEMPOTENT
        producer_id, epoch, base_sequence = _PRODUCER.unpack_from(records, 43)
        if producer_id < 0:
            return _NOT_IDEMPOTENT
        (last_delta,) = _LAST_DELTA.unpack_from(records, 23)
        last_sequence = base_sequence + last_delta
        key = (topic, partition, producer_id)
        state = self._state.get(key)
        if state is not None and state.epoch == epoch:
            for seen_sequence, seen_offset in state.recent:
                if seen_sequence == base_sequence:
                    return ProduceCheck(seen_offset)
            if base_sequence != (state.last_sequence + 1) & 0x7FFFFFFF:
                raise ProducerSequenceError(
                    ErrorCode.out_of_order_sequence_number,
                    f"expected sequence {state.last_sequence + 1}, got {base_sequence}",
                )
        elif state is not None and epoch < state.epoch:
            raise ProducerSequenceError(ErrorCode.invalid_producer_epoch,
                                        f"producer epoch {epoch} is older than {state.epoch}")
        return ProduceCheck(None, self, key, epoch, base_sequence, last_sequence)

    def fence(self, topic: str, partition: int, producer_id: int, epoch: int) -> None:
        """A transaction marker of `epoch` was written: older epochs of this producer may no
        longer append here (a producer fenced by a timeout or a new instance), and a bumped
        epoch starts its sequence again."""
        state = self._state.get((topic, partition, producer_id))
        if state is not None and epoch > state.epoch:
            state.epoch = epoch
            state.last_sequence = -1
            state.recent.clear()

    def _record(self, key: tuple[str, int, int], epoch: int, base_sequence: int,
                last_sequence: int, base_offset: int) -> None:
        state = self._state.get(key)
        if state is None or state.epoch != epoch:
            state = _PartitionProducer(epoch, last_sequence)
            self._state[key] = state
        state.last_sequence = last_sequence
        state.recent.append((base_sequence, base_offset))


class TransactionalInit(Protocol):
    def init_producer_id(self, ctx: ClientRequest, request: Any) -> None: ...


class ProducerIdHost(Protocol):
    """What InitProducerId uses of the broker."""

    @property
    def producers(self) -> ProducerTable: ...

    @property
    def transactions(self) -> TransactionalInit: ...


def init_producer_id(host: ProducerIdHost, ctx: ClientRequest, request: Any) -> None:
    """InitProducerId: a new id for an idempotent producer; a transactional one goes to the
    transaction coordinator (epoch bump, fencing)."""
    cls = response_type(INIT_PRODUCER_ID, ctx.version)
    if request.transactional_id is not None:
        host.transactions.init_producer_id(ctx, request)
        return
    ctx.respond(build(cls, throttle_time=0, error_code=ErrorCode.none,
                      producer_id=host.producers.new_producer_id(), producer_epoch=0))
