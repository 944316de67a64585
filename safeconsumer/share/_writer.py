"""The share consumer's dead-letter writer, which steps aside while the broker writes the copies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Message

from ..poison._policy import DeadLetter, DeadLetterWriter

__all__ = ["BrokerAwareWriter"]


class BrokerAwareWriter(DeadLetterWriter):
    """A share consumer's dead-letter writer: while the broker writes the copies (``broker_copies()``:
    the group's DLQ is the policy's topic and usable) it writes nothing, the record's REJECT that
    follows has the broker copy it; otherwise it writes its own, as :class:`DeadLetterWriter`."""

    def __init__(self, group_id: str, connection: Mapping[str, Any], broker_copies: Callable[[], bool]) -> None:
        super().__init__(group_id, connection)
        self._broker_copies = broker_copies

    def write_all(
        self, policy: DeadLetter, records: list[tuple[Message, Exception, int]], stage: str
    ) -> list[tuple[Message, Exception]]:
        if self._broker_copies():
            return []
        return super().write_all(policy, records, stage)
