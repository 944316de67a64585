"""Subclasses of the consumer, as applications write them: the same on both classes.

Upstream's methods are C functions that never call back into Python, so a subclass's override
runs only when the application calls it. SafeConsumer's own methods must not re-enter an
override either (one did: ``super().poll(timeout=...)`` inside an overridden ``poll(self, x)``
called the override again with a float).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer

from .harness import CLASSES, base_config


def _subclass_log(base: type[Consumer]) -> list[str]:
    log: list[str] = []

    class Sub(base):  # type: ignore[misc, valid-type]
        def poll(self, somearg: Any) -> Any:  # a different signature, as applications do
            log.append(f"poll({type(somearg).__name__})")
            return super().poll(timeout=0.001)

        def consume(self, what: Any) -> Any:
            log.append(f"consume({type(what).__name__})")
            return super().consume(num_messages=1, timeout=0.001)

        def close(self, reason: str = "app") -> None:
            log.append(f"close({reason})")
            super().close()

    consumer = Sub(base_config())
    log.append(repr(consumer.poll("a string")))
    log.append(repr(consumer.consume("a string")))
    with consumer:  # __exit__ closes through the base class, not the override
        pass
    consumer.close("explicit")
    return log


@pytest.mark.parametrize("name", ["safe"])
def test_an_override_is_never_re_entered_by_the_base_class(name: str) -> None:
    upstream = _subclass_log(CLASSES["upstream"])
    assert upstream == ["poll(str)", "None", "consume(str)", "[]", "close(explicit)"], upstream
    assert _subclass_log(CLASSES[name]) == upstream
