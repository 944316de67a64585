"""Share groups (KIP-932, "queues for Kafka"): :class:`SafeShareConsumer`, the drop-in for
``confluent_kafka.ShareConsumer``.

- :mod:`._group`: a share group's settings (lock duration, delivery count limit, start) read and
  set through the admin API.
- :mod:`._consumer`: the consumer.
"""

from __future__ import annotations

from ._consumer import TESTED_WITH, LockExpiredError, SafeShareConsumer
from ._group import GroupSettings

__all__ = ["TESTED_WITH", "GroupSettings", "LockExpiredError", "SafeShareConsumer"]
