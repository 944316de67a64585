"""Names shared by many modules, in a module that imports none of them (no import circle).

- :data:`Key`: a partition, ``(topic, partition)``; TopicPartition is mutable, so never a key.
- :data:`READ_AHEAD`: how many records one read takes from librdkafka at most (the reader's
  batch; the fetch-memory estimate counts them too).
"""

from __future__ import annotations

#: Partitions are keyed by ``(topic, partition)`` internally; TopicPartition is mutable.
Key = tuple[str, int]

#: How many records one poll() reads from librdkafka at most; the rest wait in the table.
READ_AHEAD = 64
