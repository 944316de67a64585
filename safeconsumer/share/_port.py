"""The internal interface :mod:`safeconsumer.share._aio` uses of a SafeShareConsumer beyond its public
methods (as :mod:`safeconsumer.consumer._port` is for a SafeConsumer's integrations).

A SafeShareConsumer registers its :class:`SharePort` as it is created (:func:`register`); the
asyncio class asks :func:`port_of` for it and never reads the consumer's private attributes. The
registry holds consumers weakly and a port holds only weak methods, so a dropped consumer goes as
upstream's does (S8).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message

from ._batch import Batch

#: What a handler's start leaves for its end: the poison policy's counters, when it began, and the
#: batch it began in.
Before = tuple[int, int, float, Batch | None]

_PORTS: weakref.WeakKeyDictionary[Any, SharePort] = weakref.WeakKeyDictionary()


class SharePort:
    """A SafeShareConsumer's steps around a handler, and its give-back of a batch nobody received."""

    def __init__(
        self,
        *,
        give_back: weakref.WeakMethod[Callable[[object], int]],
        handling: weakref.WeakMethod[Callable[[Message], Before]],
        handled: weakref.WeakMethod[Callable[..., None]],
        process: weakref.WeakMethod[Callable[[Message], contextlib.AbstractContextManager[Any]]],
        lock: threading.RLock,
    ) -> None:
        #: The consumer's lock: held around every call the asyncio class makes, so that the consumer's
        #: own threads (the watch, a keepalive timer) never call librdkafka at the same time.
        self.lock = lock
        self._give_back = give_back
        self._handling = handling
        self._handled = handled
        self._process = process

    def give_back(self, messages: object) -> int:
        """Release at once what ``messages`` (a batch ``poll()`` returned) holds: its caller never got it."""
        method = self._give_back()
        return 0 if method is None else method(messages)

    def handling(self, message: Message) -> Before:
        """Before a handler runs on ``message``; returns what :meth:`handled` needs."""
        before: Before = _alive(self._handling)(message)
        return before

    def handled(self, message: Message, before: Before, *, failed: bool) -> None:
        """After the handler: the record's acknowledgement (accept, reject or release)."""
        _alive(self._handled)(message, before, failed=failed)

    def process(self, message: Message) -> contextlib.AbstractContextManager[Any]:
        """The processing span of ``message`` (continues the producer's trace)."""
        span: contextlib.AbstractContextManager[Any] = _alive(self._process)(message)
        return span


def _alive(method: weakref.WeakMethod[Any]) -> Any:
    bound = method()
    if bound is None:
        raise RuntimeError("the SafeShareConsumer of this port is gone")
    return bound


def register(consumer: object, port: SharePort) -> None:
    """Called once by ``SafeShareConsumer.__init__``."""
    _PORTS[consumer] = port


def port_of(consumer: object) -> SharePort:
    port = _PORTS.get(consumer)
    if port is None:
        raise RuntimeError("not a SafeShareConsumer whose __init__ ran")
    return port
