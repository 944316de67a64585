"""Whether the adapter is open, and how its calls into the SafeConsumer raise kafka-python's errors.

The facade and its parts call the SafeConsumer through :meth:`Guard.call`: refused with
``IllegalStateError`` once the ``KafkaConsumer`` is closed, a librdkafka error raised as its
``kafka.errors`` class (:func:`._convert.kafka_error` says which). The parts hold the guard, never
the facade, and the callbacks librdkafka keeps are held weakly (:func:`weakly`), so nothing of
ours keeps a dropped ``KafkaConsumer`` alive (I10).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from kafka import errors as kerrors

from ._convert import kafka_error

__all__ = ["Guard", "translated", "weakly"]


def weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of an object, held weakly: librdkafka keeps callbacks for the consumer's life."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args)

    return call


def translated(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A call of the SafeConsumer, its errors as kafka-python's (an error it has no class for as it is)."""
    try:
        return method(*args, **kwargs)
    except (KafkaException, RuntimeError) as exc:
        error = kafka_error(exc)
        if error is exc:
            raise
        raise error from exc


class Guard:
    """The ``KafkaConsumer``'s open or closed state, checked before each call it guards."""

    def __init__(self) -> None:
        # Closed until the SafeConsumer exists (so close() has nothing to do), and again once closed:
        # the facade is the only writer.
        self.closed = True

    def check(self) -> None:
        """``IllegalStateError`` once closed, as kafka-python raises it."""
        if self.closed:
            raise kerrors.IllegalStateError("KafkaConsumer is closed")

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A call of the SafeConsumer, its errors as kafka-python's."""
        self.check()
        return translated(method, *args, **kwargs)
