"""What the partition table keeps per partition (PartitionState), and why records are dropped unseen (PurgeReason)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import Message

#: Why records were dropped without reaching the application (a telemetry attribute too).
PurgeReason = Literal["revoked", "lost", "unowned", "seek"]


@dataclass(slots=True)
class PartitionState:
    """What the library knows of one partition it owns (or holds in limbo)."""

    held: deque[Message] = field(default_factory=deque)
    """Withheld records, in offset order."""
    applied: bool = False
    """librdkafka was told this partition is paused."""
    seek_target: int | None = None
    """An explicit offset set by the application; stored until a record past it is delivered."""
