"""Produce requests with damaged batches, sent over a raw socket: refused per partition."""

from __future__ import annotations

import datetime
import importlib
import socket
import struct
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from storage.record_batch import encode_batch
from tests.broker_process import BrokerProcess
from tests.fakes import framed, request_bytes
from tests.integration.test_dataplane import consume_confluent, create_topic


def produce_frame(topic: str, records: bytes, correlation_id: int = 1) -> bytes:
    cls: Any = load_request_schema(0, 9)
    module = importlib.import_module(cls.__module__)
    request = cls(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                  topic_data=(module.TopicProduceData(name=topic, partition_data=(
                      module.PartitionProduceData(index=0, records=records),)),))
    return framed(request_bytes(0, 9, request, correlation_id, client_id="raw"))


def produce_error(port: int, records: bytes) -> ErrorCode:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(produce_frame("checked", records))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        body = sock.recv(size, socket.MSG_WAITALL)
    response_cls: Any = load_response_schema(0, 9)
    # Response header v1: correlation id + an empty tagged-field section.
    response, _ = entity_reader(response_cls)(body, 5)
    error: ErrorCode = response.responses[0].partition_responses[0].error_code
    return error


@pytest.mark.integration
def test_bad_crc_is_corrupt_message_and_nothing_is_stored(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "checked", 1)
    good = encode_batch([(b"k", b"7")], 1_700_000_000_000)
    damaged = bytearray(good)
    damaged[-2] ^= 0xFF  # inside the CRC-covered records
    assert produce_error(broker.port, bytes(damaged)) == ErrorCode.corrupt_message
    assert produce_error(broker.port, good[:40]) == ErrorCode.corrupt_message
    assert produce_error(broker.port, good) == ErrorCode.none
    seen = consume_confluent(broker.bootstrap, "checked", 1, 1)
    assert seen[0] == [7]  # only the intact batch was appended
