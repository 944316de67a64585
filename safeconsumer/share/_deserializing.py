"""``SafeDeserializingShareConsumer``: the drop-in for ``confluent_kafka.DeserializingShareConsumer``.

Upstream's class does the deserializing (its config keys, its in-place ``poll()``, a record that
cannot be deserialized left in the batch with its raw bytes and a ``_KEY_DESERIALIZATION`` /
``_VALUE_DESERIALIZATION`` error); SafeShareConsumer sits above it in the method resolution order,
so every batch it returns comes through SafeShareConsumer's ``poll()`` with every guarantee::

    SafeDeserializingShareConsumer -> SafeShareConsumer -> DeserializingShareConsumer -> ShareConsumer

What this class adds is the poison policy for records that cannot be deserialized. With no policy
they reach the application as upstream hands them out (and are acknowledged like any record: in
implicit mode accepted when it comes back). With ``Skip()`` (a WARNING, counted) or
``DeadLetter(...)`` (written to the dead-letter topic first) each one is REJECTed before the batch is
returned, and the application never sees it: its bytes will not change, so a delivery more would
fail the same way. If the dead-letter topic cannot be written, ``poll()`` raises
``DeadLetterError`` and the whole batch is released at once: nothing of it was handed out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import AcknowledgeType, DeserializingShareConsumer, KafkaError, Message
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from ._batch import DESERIALIZATION, Batch
from ._consumer import SafeShareConsumer

__all__ = ["SafeDeserializingShareConsumer"]


class SafeDeserializingShareConsumer(SafeShareConsumer, DeserializingShareConsumer):
    """``confluent_kafka.DeserializingShareConsumer`` made safe, with a poison policy.

    ``conf`` is exactly upstream's (``key.deserializer`` and ``value.deserializer`` included);
    SafeShareConsumer's options (``start=``, ``poison=``, the OpenTelemetry providers) are
    keyword-only arguments.
    """

    def __init__(self, conf: Mapping[str, Any], **options: Any) -> None:
        super().__init__(conf, **options)

    @property
    def _withholds(self) -> bool:  # type: ignore[override]
        return self._poison.policy is not None

    def _withhold(self, batch: Batch) -> None:
        failed = [m for m in batch.records if (e := m.error()) is not None and e.code() in DESERIALIZATION]
        self._poison.passed(len(batch.records) - len(failed))
        if not failed:
            return
        for message in failed:
            self._poison.deserialization_failed(_exception(message), message)
            self._settle(message, AcknowledgeType.REJECT)
        gone = {id(m) for m in failed}
        batch.records[:] = [m for m in batch.records if id(m) not in gone]
        batch.live[:] = [m for m in batch.live if id(m) not in gone]


def _exception(message: Message) -> Exception:
    """Upstream's exception for the record's failure (what ``DeserializingConsumer`` would raise)."""
    error: KafkaError = message.error()  # type: ignore[assignment]
    cause = RuntimeError(error.str())
    if error.code() == KafkaError._KEY_DESERIALIZATION:
        return KeyDeserializationError(exception=cause, kafka_message=message)
    return ValueDeserializationError(exception=cause, kafka_message=message)
