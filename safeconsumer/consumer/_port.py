"""The one internal interface safeconsumer's integrations use of a SafeConsumer beyond its public
methods: :mod:`safeconsumer.aio`, :mod:`safeconsumer.kafka_python`, the deserializing drop-in and
the module functions of the facade (``delivery_stats``).

A SafeConsumer registers its :class:`ConsumerPort` as it is created (:func:`register`); an
integration asks :func:`port_of` for it, and never reads the consumer's private attributes. The
registry holds consumers weakly and a port holds no strong reference to its consumer, so that a
dropped consumer goes as upstream's does (I10).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from ._lifecycle import AsyncLink, Lifecycle

if TYPE_CHECKING:
    import threading

    from ..poison._policy import PoisonHandler
    from ._delivery import DeliveryGate, DeliveryStats
    from ._partitions import PartitionTable
    from ._reader import Reader

#: What a consumer whose ``__init__`` never ran answers: a stopped consumer's errors.
_NEVER_OPENED = Lifecycle.never_opened()

Consume = Callable[[int, float], list[Message]]


class ConsumerPort:
    """A SafeConsumer's parts as its integrations need them (see the module)."""

    def __init__(
        self,
        *,
        life: Lifecycle,
        lock: threading.RLock,
        lane: deque[Message],
        reader: Reader,
        table: PartitionTable,
        gate: DeliveryGate,
        poison: PoisonHandler,
        consume_available: weakref.WeakMethod[Consume],
    ) -> None:
        self._life = life
        self._lock = lock
        self._lane = lane
        self._reader = reader
        self._table = table
        self._gate = gate
        self._poison = poison
        self._consume_available = consume_available

    def delivery_stats(self) -> DeliveryStats:
        """The delivery gate's counters (readable after ``close()`` too: the final counts)."""
        with self._lock:
            return self._gate.stats()

    def async_link(self) -> AsyncLink:
        """What :mod:`safeconsumer.aio` uses (see :class:`._lifecycle.AsyncLink`)."""
        return AsyncLink(self._life, self._lane, self._reader, self._table)

    def consume_available(self, num_messages: int, timeout: float) -> list[Message]:
        """``consume()`` as kafka-python's ``poll()`` reads: up to ``num_messages`` records and error
        events, returned as soon as there are any, else after ``timeout`` seconds (< 0: none)."""
        self._life.check_open("poll")
        consume = self._consume_available()
        if consume is None:  # only a thread of ours can still get here once the consumer was dropped
            raise _NEVER_OPENED.closed_error("poll")
        return consume(num_messages, timeout)

    def poison_handler(self) -> PoisonHandler:
        """The consumer's poison policy at work."""
        return self._poison


_PORTS: weakref.WeakKeyDictionary[Any, ConsumerPort] = weakref.WeakKeyDictionary()


def register(consumer: object, port: ConsumerPort) -> None:
    """Called once by ``SafeConsumer.__init__``."""
    _PORTS[consumer] = port


def port_of(consumer: object, method: str) -> ConsumerPort:
    """``consumer``'s port; a consumer whose ``__init__`` never ran raises what a stopped consumer's
    ``method`` raises (upstream's "Consumer closed")."""
    port = _PORTS.get(consumer)
    if port is None:
        raise _NEVER_OPENED.closed_error(method)
    return port
