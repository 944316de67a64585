"""One read of the SafeConsumer handed out as kafka-python's records, and what was last handed out.

A read (librdkafka's messages, error events among them) becomes ``{TopicPartition: [ConsumerRecord]}``:
deserialized as kafka-python deserializes, a record a deserializer refuses raised or judged by the
``poison`` policy, the consumed positions moved past what the application is given. What the
application does not get goes back to the SafeConsumer unprocessed, to be handed out again first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import KafkaError, Message
from kafka.structs import TopicPartition

from ..poison._policy import DeadLetterError
from ._convert import Deserialize, kafka_error, record
from ._positions import Key, Positions

if TYPE_CHECKING:
    from ..consumer._port import ConsumerPort

__all__ = ["Handout", "raise_or_log"]

logger = logging.getLogger("safeconsumer.kafka_python")


def raise_or_log(msg: Message) -> None:
    """An error event among the records: raised when it ends the consumer or means no offset
    to start from (as kafka-python raises it), otherwise logged (kafka-python's network layer
    handles such errors itself and never returns them)."""
    err = cast(KafkaError, msg.error())
    if err.fatal() or err.code() == KafkaError._AUTO_OFFSET_RESET:
        raise kafka_error(err)
    logger.warning("%s: %s", err.name(), err.str())


class Handout:
    """The records of each read as the application gets them, and the last read's messages."""

    def __init__(self, port: ConsumerPort, key_deser: Deserialize, value_deser: Deserialize, positions: Positions):
        self._port = port
        self._poison = port.poison_handler()
        self._key_deser = key_deser
        self._value_deser = value_deser
        self._positions = positions
        self._held: list[Message] = []  # what the last read handed out (given back by close(autocommit=False))

    def records(self, msgs: list[Message]) -> dict[TopicPartition, list[Any]]:
        """kafka-python's shape of one read; the consumed positions move past it.

        A deserializer that raises (or an error event raised) stops the read there: what came before
        it is returned, it and what came after go back to the SafeConsumer unprocessed (never stored),
        and the next call starts with it, raising again while it cannot be deserialized.
        """
        out: dict[TopicPartition, list[Any]] = {}
        by_key: dict[Key, list[Any]] = {}
        kd, vd = self._key_deser, self._value_deser
        poison = self._poison
        judged = 0  # records up to here counted toward the poison policy's ratio limit
        for i, msg in enumerate(msgs):
            try:
                if msg.error() is not None:
                    raise_or_log(msg)
                    continue
                try:
                    converted = record(msg, kd, vd)
                except Exception as exc:
                    if poison.policy is None:
                        raise
                    # Skipped or dead-lettered: handed out, stored once the application comes back.
                    poison.passed(i - judged)
                    judged = i + 1
                    poison.deserialization_failed(exc, msg)
                    continue
            except DeadLetterError:
                del msgs[i:]  # the poison handler gave them back already
                if not by_key:
                    raise
                break
            except BaseException:
                self.give_back(msgs[i + 1 if msg.error() is not None else i :])
                del msgs[i:]
                if not by_key:
                    raise
                break
            key = (converted[0], converted[1])  # topic, partition
            batch = by_key.get(key)
            if batch is None:
                batch = by_key[key] = out[TopicPartition(*key)] = []
            batch.append(converted)
        if poison.policy is not None:
            poison.passed(len(msgs) - judged)
        self._held = msgs
        positions = self._positions
        for key, batch in by_key.items():
            last = batch[-1]
            positions.handed_out(key, last.offset + 1, last.leader_epoch)
        return out

    def give_back(self, msgs: list[Message]) -> None:
        """``msgs`` never reached the application: the SafeConsumer takes its records back, unprocessed,
        to hand them out again first (error events, already raised or logged, are not repeated)."""
        records = [m for m in msgs if m.error() is None]
        if records:
            self._port.async_link().give_back(records)

    def not_taken(self, msgs: list[Message], records: dict[TopicPartition, list[Any]]) -> None:
        """``poll(update_offsets=False)``: the read ``msgs`` (returned as ``records``) goes back, and
        its partitions keep no consumed position; the next poll returns it again."""
        self.give_back(msgs)
        self._held = []
        self._positions.not_handed_out({(tp.topic, tp.partition) for tp in records})

    def release_held(self, processed: bool) -> None:
        """``close()``: what the last read handed out is let go, given back first unless ``processed``."""
        if not processed:
            self.give_back(self._held)
        self._held = []

    def close_deserializers(self) -> None:
        """``close()``: a deserializer with a ``close()`` (kafka-python's ``Deserializer`` has one) is closed."""
        for deser in (self._key_deser, self._value_deser):
            closer = getattr(deser, "close", None)
            if callable(closer):
                closer()
