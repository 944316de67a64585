"""The one translation of librdkafka errors (pure logic: KafkaError values built in memory)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import NoReturn

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from safeconsumer import FatalConsumerError, GroupMaxSizeReachedError, GroupMigrationError
from safeconsumer.base._errors import classify
from safeconsumer.consumer._client import RawClient


def test_classify_knows_each_fatal_kind() -> None:
    assert isinstance(classify(KafkaError(81), "g"), GroupMaxSizeReachedError)
    full = KafkaError(KafkaError._FATAL, "Consumer group has reached maximum size")
    assert isinstance(classify(full, "g"), GroupMaxSizeReachedError)
    fenced = classify(KafkaError(KafkaError.FENCED_INSTANCE_ID), "g")
    assert isinstance(fenced, FatalConsumerError) and "group.instance.id" in str(fenced)
    assert type(classify(KafkaError(KafkaError._FATAL, "Local: Fatal error"), "g")) is FatalConsumerError
    assert classify(KafkaError(KafkaError._PARTITION_EOF), "g") is None
    assert classify(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), "g") is None


def test_an_unknown_broker_error_at_a_first_heartbeat_is_a_failed_conversion() -> None:
    """As librdkafka words it (the broker's UNKNOWN_SERVER_ERROR on a ConsumerGroupHeartbeat): a
    failed conversion while the member joins, a plain fatal error once it had partitions."""
    text = "Fatal error: Unknown broker error: ConsumerGroupHeartbeat fatal error: Unknown broker error"
    error = KafkaError(KafkaError._FATAL, text)
    failed = classify(error, "g", first_join=True)
    assert isinstance(failed, GroupMigrationError)
    assert "first rebalance" in str(failed) and "group.initial.rebalance.delay.ms" in str(failed)
    later = classify(error, "g")
    assert type(later) is FatalConsumerError and "Unknown broker error" in str(later)
    other = KafkaError(KafkaError._FATAL, "Fatal error: Unknown broker error: OffsetCommit failed")
    assert type(classify(other, "g", first_join=True)) is FatalConsumerError


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


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(81),
        KafkaError(KafkaError.FENCED_INSTANCE_ID, "Commit failed: Broker: Static consumer fenced by other consumer"),
        KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True),
    ],
    ids=["group-full", "fenced", "fatal"],
)
def test_a_fatal_error_is_caught_as_upstream_fatal_errors_are(error: KafkaError) -> None:
    """``except KafkaException`` written for confluent_kafka catches it, with the KafkaError in args[0]
    and upstream's text as the prefix of its own."""
    fatal = classify(error, "g")
    assert fatal is not None
    with pytest.raises(KafkaException) as caught:
        raise fatal
    assert caught.value.args[0] is error and caught.value.args[0].code() == error.code()
    assert str(caught.value).startswith(str(KafkaException(error)) + ": "), str(caught.value)
    assert "the consumer" in str(caught.value) and "closed" in str(caught.value)
    again = pickle.loads(pickle.dumps(fatal))
    assert type(again) is type(fatal) and str(again) == str(fatal) and again.group_id == "g"
    assert again.kafka_error is not None and again.kafka_error.code() == error.code()


def test_a_fatal_error_without_a_kafka_error_reads_as_its_message() -> None:
    fatal = FatalConsumerError("stopped", group_id="g")
    assert str(fatal) == "stopped" and fatal.args == ("stopped",) and isinstance(fatal, KafkaException)


def test_a_note_never_changes_args_or_str() -> None:
    """SPEC: exactly upstream's ``args``; safeconsumer's detail is a PEP 678 note."""
    from safeconsumer.base._errors import consumer_closed, with_note

    closed = consumer_closed(("Consumer closed",), "SafeConsumer for group 'g' is closed: cannot call memberid()")
    assert isinstance(closed, RuntimeError)
    assert closed.args == ("Consumer closed",) and str(closed) == "Consumer closed"
    assert closed.__notes__ == ["SafeConsumer for group 'g' is closed: cannot call memberid()"]
    error = with_note(ValueError("x"), "one")
    assert with_note(error, "two").__notes__ == ["one", "two"] and error.args == ("x",)
