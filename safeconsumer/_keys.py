"""Names shared by many modules, in a module that imports none of them (no import circle).

- :data:`Key`: a partition, ``(topic, partition)``; TopicPartition is mutable, so never a key.
- :data:`READ_AHEAD`: how many records one read takes from librdkafka at most (the reader's
  batch; the fetch-memory estimate counts them too); :data:`READ_AHEAD_BYTES`: what it aims at
  in bytes, so that large records are read fewer at a time.
- :data:`RebalanceCallback`: the application's on_assign/on_revoke/on_lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

#: Partitions are keyed by ``(topic, partition)`` internally; TopicPartition is mutable.
Key = tuple[str, int]

#: How many records one poll() reads from librdkafka at most; the rest wait in the table.
READ_AHEAD = 64
#: The value bytes one read-ahead aims at: records larger than READ_AHEAD_BYTES / READ_AHEAD
#: (16 KiB) are read fewer at a time, judged by the first record of the read.
READ_AHEAD_BYTES = 1 << 20

#: The application's on_assign/on_revoke/on_lost: called with the consumer and the partitions
#: (the consumer is typed Any: a SafeConsumer, whose module this one must not import).
RebalanceCallback = Callable[[Any, list[TopicPartition]], object]
