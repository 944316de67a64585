"""Share groups (KIP-932, "queues for Kafka"): :class:`SafeShareConsumer`, the drop-in for
``confluent_kafka.ShareConsumer``.

A share group's settings (lock duration, delivery count limit, start, broker DLQ) are the group
runtime's (:mod:`safeconsumer.group._share`); here:

- :mod:`._consumer`: the consumer, a facade that validates, guards and delegates.
- :mod:`._acks`: the acknowledgements it makes itself, and its poison policy's bounds.
- :mod:`._batch`: one poll's batch and the watch on its locks.
- :mod:`._last_delivery`: copies of records handed out on their last delivery (S4).
- :mod:`._writer`: the dead-letter writer that steps aside while the broker copies.
- :mod:`._fatal`: which errors end the consumer (S7), and a member that left its group.
- :mod:`._overruns`: acknowledgements that went after their lock ran out.
- :mod:`._pause`: the pause marks (which topics are paused).
- :mod:`._telemetry`: the share metrics.
- :mod:`._upstream`: what it asks of upstream's class besides extending it.
- :mod:`._port`, :mod:`._aio`, :mod:`._deserializing`: the hooks and the drop-ins built on it.
"""

from __future__ import annotations

from ..group._share import GroupSettings
from ._consumer import SafeShareConsumer
from ._deserializing import SafeDeserializingShareConsumer
from ._overruns import LockExpiredError
from ._upstream import TESTED_WITH

__all__ = ["TESTED_WITH", "GroupSettings", "LockExpiredError", "SafeDeserializingShareConsumer", "SafeShareConsumer"]
