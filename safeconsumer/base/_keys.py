"""Names shared by many modules, in a module that imports none of them (no import circle).

- :data:`Key`: a partition, ``(topic, partition)``; TopicPartition is mutable, so never a key.
  :func:`key_of` gives a record's.
- :data:`READ_CHUNK`: how many records one read takes from librdkafka at most;
  :data:`READ_AHEAD`: how many ``poll()`` reads ahead at most, a chunk at a time while their values
  total less than :data:`READ_AHEAD_BYTES`, so that large records are read fewer at a time (the
  fetch-memory estimate counts the worst case).
- :data:`RebalanceCallback`: the application's on_assign/on_revoke/on_lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Message, TopicPartition

#: Partitions are keyed by ``(topic, partition)`` internally; TopicPartition is mutable.
Key = tuple[str, int]


def key_of(msg: Message) -> Key:
    """A record's partition as a :data:`Key`."""
    return (msg.topic(), msg.partition())  # type: ignore[return-value]


#: How many records one read from librdkafka takes at most.
READ_CHUNK = 64
#: How many records one poll() reads ahead at most (chunk after chunk); the rest wait in the table.
READ_AHEAD = 512
#: The value bytes one read-ahead aims at: no further chunk is read once the records read hold
#: this much, and a chunk takes fewer records when the last ones were large.
READ_AHEAD_BYTES = 1 << 20

#: The application's on_assign/on_revoke/on_lost: called with the consumer and the partitions
#: (the consumer is typed Any: a SafeConsumer, whose module this one must not import).
RebalanceCallback = Callable[[Any, list[TopicPartition]], object]
