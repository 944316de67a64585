"""The one translation of librdkafka errors (pure logic: KafkaError values built in memory)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from safeconsumer import FatalConsumerError, GroupMaxSizeReachedError
from safeconsumer._client import RawClient
from safeconsumer._errors import classify


def test_classify_knows_each_fatal_kind() -> None:
    assert isinstance(classify(KafkaError(81), "g"), GroupMaxSizeReachedError)
    full = KafkaError(KafkaError._FATAL, "Consumer group has reached maximum size")
    assert isinstance(classify(full, "g"), GroupMaxSizeReachedError)
    fenced = classify(KafkaError(KafkaError.FENCED_INSTANCE_ID), "g")
    assert isinstance(fenced, FatalConsumerError) and "group.instance.id" in str(fenced)
    assert type(classify(KafkaError(KafkaError._FATAL, "Local: Fatal error"), "g")) is FatalConsumerError
    assert classify(KafkaError(KafkaError._PARTITION_EOF), "g") is None
    assert classify(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), "g") is None


class _Stopped(Exception):
    pass


def test_the_boundary_classifies_raised_errors_and_passes_others_through() -> None:
    seen: list[FatalConsumerError] = []

    def on_fatal(fatal: FatalConsumerError, _err: KafkaError) -> NoReturn:
        seen.append(fatal)
        raise _Stopped

    client = RawClient(Consumer({"group.id": "g"}), "g", on_fatal)

    def raising(code: int) -> Callable[[Consumer], object]:
        def method(_consumer: Consumer) -> object:
            raise KafkaException(KafkaError(code))

        return method

    with pytest.raises(_Stopped):
        client.call(raising(KafkaError._FATAL))
    assert len(seen) == 1 and seen[0].kafka_error is not None
    with pytest.raises(KafkaException):
        client.call(raising(KafkaError._WAIT_COORD))
    assert len(seen) == 1, "a retriable error is not fatal"
