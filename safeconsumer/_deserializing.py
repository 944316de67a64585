"""``SafeDeserializingConsumer``: the drop-in for ``confluent_kafka.DeserializingConsumer``.

Upstream's class does the deserializing (its config keys, its builders and what it owns and
closes, its ``poll()`` result and exceptions, its ``consume()`` refusal); SafeConsumer sits under
it in the method resolution order, so every record comes through SafeConsumer's ``poll()`` with
every guarantee::

    SafeDeserializingConsumer -> DeserializingConsumer -> _Options -> SafeConsumer -> Consumer

What this class adds is the poison policy (``poison=``, see :mod:`._poison`) for records whose key
or value cannot be deserialized: with no policy upstream's ``KeyDeserializationError`` /
``ValueDeserializationError`` is raised as upstream raises it; with ``Skip()`` or
``DeadLetter(...)`` the record is skipped or dead-lettered and ``poll()`` goes on to the next one
within its timeout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import DeserializingConsumer, Message
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from .consumer._facade import SafeConsumer
from .consumer._port import port_of

__all__ = ["SafeDeserializingConsumer"]


class _Options(SafeConsumer):
    """Hands SafeConsumer's keyword options through upstream's ``__init__(conf)``, which calls the
    next ``__init__`` in line with the config alone."""

    _safe_options: dict[str, Any]

    def __init__(self, conf: Mapping[str, Any]) -> None:
        SafeConsumer.__init__(self, conf, **self._safe_options)


class SafeDeserializingConsumer(DeserializingConsumer, _Options):  # type: ignore[misc]
    """``confluent_kafka.DeserializingConsumer`` on a SafeConsumer, with a poison policy.

    ``conf`` is exactly upstream's (``key.deserializer``, ``value.deserializer`` and their builders
    included); SafeConsumer's options are keyword-only arguments, ``poison=`` among them.
    """

    def __init__(self, conf: Mapping[str, Any], **options: Any) -> None:
        self._safe_options = options
        DeserializingConsumer.__init__(self, dict(conf))

    def poll(self, timeout: float = -1) -> Message | None:
        """``poll(timeout=-1)``: a record with its key and value deserialized, or None.

        A record that cannot be deserialized raises upstream's ``KeyDeserializationError`` /
        ``ValueDeserializationError`` (``kafka_message`` is the record) unless ``poison=`` says to
        skip or dead-letter it; then the next record is read within what is left of ``timeout``.
        """
        handler = port_of(self, "poll").poison_handler()
        if handler.policy is None:
            return DeserializingConsumer.poll(self, timeout)
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = DeserializingConsumer.poll(self, left)
            except (KeyDeserializationError, ValueDeserializationError) as exc:
                if exc.kafka_message is None:
                    raise
                handler.deserialization_failed(exc, exc.kafka_message)
            else:
                if message is not None and message.error() is None:
                    handler.passed(1)
                return message
            if deadline is not None and time.monotonic() >= deadline:
                return None
