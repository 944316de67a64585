"""kafka-python's types from confluent-kafka's, and kafka-python's exceptions from librdkafka's errors.

Every translation between the two libraries happens here: partitions (``kafka.TopicPartition``, a
namedtuple, from and to ``confluent_kafka.TopicPartition``), records (``ConsumerRecord`` from a
``Message``, deserialized as kafka-python deserializes), and errors (:func:`kafka_error`: a
``KafkaException`` or error event becomes the ``kafka.errors`` class of its code).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Message
from kafka import Deserializer
from kafka import errors as kerrors
from kafka.consumer.fetcher import ConsumerRecord
from kafka.serializer.wrapper import DeserializeWrapper
from kafka.structs import TopicPartition

from ..base._errors import AuthenticationFailedError, ConsumerClosedError, FatalConsumerError, GroupMaxSizeReachedError

__all__ = ["Deserialize", "deserializer", "kafka_error", "record", "to_confluent", "to_kafka"]

Deserialize = Any  # a kafka.Deserializer (or None)

#: kafka-python's record type; its fields are set positionally (``tuple.__new__``, no keyword parsing).
_Record: Any = ConsumerRecord

#: confluent_kafka's timestamp types to kafka-python's (0 CreateTime, 1 LogAppendTime).
_TIMESTAMP_TYPES = {confluent_kafka.TIMESTAMP_CREATE_TIME: 0, confluent_kafka.TIMESTAMP_LOG_APPEND_TIME: 1}

#: librdkafka's local error codes (negative) and the kafka.errors class each one means.
_LOCAL = {
    KafkaError._TIMED_OUT: kerrors.KafkaTimeoutError,
    KafkaError._TRANSPORT: kerrors.KafkaConnectionError,
    KafkaError._ALL_BROKERS_DOWN: kerrors.KafkaConnectionError,
    KafkaError._STATE: kerrors.IllegalStateError,
    KafkaError._UNKNOWN_PARTITION: kerrors.UnknownTopicOrPartitionError,
    KafkaError._UNKNOWN_TOPIC: kerrors.UnknownTopicOrPartitionError,
    KafkaError._INVALID_ARG: kerrors.IllegalArgumentError,
    KafkaError._AUTO_OFFSET_RESET: kerrors.NoOffsetForPartitionError,
    KafkaError._AUTHENTICATION: kerrors.SaslAuthenticationFailedError,
    KafkaError._SSL: kerrors.KafkaConnectionError,
    KafkaError._FENCED: kerrors.FencedInstanceIdError,
    KafkaError._MAX_POLL_EXCEEDED: kerrors.CommitFailedError,
}


def to_confluent(
    tp: Any, offset: int | None = None, metadata: str | None = None, leader_epoch: int | None = None
) -> Any:
    """A ``kafka.TopicPartition`` (checked as kafka-python checks it) as confluent's."""
    if not isinstance(tp, TopicPartition):
        raise TypeError(f"partition must be a TopicPartition namedtuple, got {type(tp).__name__}")
    if offset is None:
        return confluent_kafka.TopicPartition(tp.topic, tp.partition)
    extra: dict[str, Any] = {}
    if metadata:
        extra["metadata"] = metadata
    if leader_epoch is not None and leader_epoch >= 0:
        extra["leader_epoch"] = leader_epoch
    return confluent_kafka.TopicPartition(tp.topic, tp.partition, offset, **extra)


def to_kafka(partitions: Iterable[confluent_kafka.TopicPartition]) -> set[TopicPartition]:
    return {TopicPartition(p.topic, p.partition) for p in partitions}


def deserializer(value: Any, key: str) -> Deserialize:
    """kafka-python's handling of a deserializer config: a plain callable is wrapped, with its warning."""
    if value is None or isinstance(value, Deserializer):
        return value
    warnings.warn(f"{key} does not implement kafka.serializer.Deserializer", category=DeprecationWarning, stacklevel=4)
    return DeserializeWrapper(value)


def _deserialize(deser: Deserialize, topic: str, headers: list[tuple[str, bytes | None]], data: bytes | None) -> Any:
    if deser is None:
        return data
    try:
        return deser.deserialize(topic, headers, data)
    except TypeError:
        return deser.deserialize(topic, data)  # the two-argument form kafka-python still accepts


def record(msg: Message, key_deser: Deserialize, value_deser: Deserialize) -> Any:
    """A record as kafka-python's ``ConsumerRecord``; the deserializers run here (their errors propagate).

    On the per-record path: one call of each ``Message`` accessor, nothing else that costs.
    """
    topic: Any = msg.topic()
    ts_type, ts = msg.timestamp()
    raw_headers: Any = msg.headers()
    headers = raw_headers or []
    key, value = msg.key(), msg.value()
    epoch = msg.leader_epoch()
    return _Record(
        topic,
        msg.partition(),
        -1 if epoch is None else epoch,
        msg.offset(),
        ts if ts_type in _TIMESTAMP_TYPES else None,
        _TIMESTAMP_TYPES.get(ts_type),
        key if key_deser is None else _deserialize(key_deser, topic, headers, key),
        value if value_deser is None else _deserialize(value_deser, topic, headers, value),
        headers,
        None,  # CRCs are checked by librdkafka (check_crcs), per batch: no per-record checksum
        -1 if key is None else len(key),
        -1 if value is None else len(value),
        _header_size(headers) if raw_headers else -1,
    )


def _header_size(headers: list[tuple[str, bytes | None]]) -> int:
    return sum(len(k.encode("utf-8")) + (0 if v is None else len(v)) for k, v in headers)


#: safeconsumer's own errors (each still a KafkaException) and the kafka.errors class each one is.
_OURS: tuple[tuple[type[BaseException], type[BaseException]], ...] = (
    (GroupMaxSizeReachedError, kerrors.GroupMaxSizeReachedError),  # KIP-848: librdkafka wraps it in _FATAL
    (AuthenticationFailedError, kerrors.SaslAuthenticationFailedError),
)


def kafka_error(error: BaseException | KafkaError) -> BaseException:
    """The kafka-python exception for a librdkafka error: the ``kafka.errors`` class of a broker
    error's code, the nearest class for librdkafka's local codes and safeconsumer's fatal errors,
    ``IllegalStateError`` for a closed consumer. Other exceptions (a callback's, a deserializer's)
    are returned as they are."""
    if isinstance(error, KafkaError):
        return _for(error)
    if isinstance(error, ConsumerClosedError):
        closed: BaseException = kerrors.IllegalStateError("KafkaConsumer is closed")
        return closed
    ours = next((theirs for cls, theirs in _OURS if isinstance(error, cls)), None)
    if ours is not None:
        translated = ours(str(error))
    elif isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        translated = _for(error.args[0])
    elif isinstance(error, FatalConsumerError):
        translated = kerrors.KafkaError(str(error))
    else:
        return error
    translated.__cause__ = error
    return translated


def _for(err: KafkaError) -> BaseException:
    code = err.code()
    cls = kerrors.for_code(code) if code > 0 else _LOCAL.get(code, kerrors.KafkaError)
    error: BaseException = cls(err.str())
    return error
