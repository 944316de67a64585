"""Share groups (KIP-932, "queues for Kafka"): :class:`SafeShareConsumer`, the drop-in for
``confluent_kafka.ShareConsumer``.

- :mod:`._group`: a share group's settings (lock duration, delivery count limit, start) read and
  set through the admin API.
- :mod:`._batch`: one poll's batch and the watch on its locks.
- :mod:`._overruns`: acknowledgements that went after their lock ran out.
- :mod:`._telemetry`: the share metrics.
- :mod:`._pause`: the pause marks (which topics are paused).
- :mod:`._consumer`: the consumer.
- :mod:`._deserializing`: the drop-in for ``DeserializingShareConsumer`` on it.
"""

from __future__ import annotations

from ..group._share import GroupSettings
from ._consumer import TESTED_WITH, SafeShareConsumer
from ._deserializing import SafeDeserializingShareConsumer
from ._overruns import LockExpiredError

__all__ = ["TESTED_WITH", "GroupSettings", "LockExpiredError", "SafeDeserializingShareConsumer", "SafeShareConsumer"]
