"""SafeDeserializingConsumer against upstream's DeserializingConsumer, without a broker: the same
outcome (return value, or exception type, args and message) for the same call, open and closed.
Records and poison policies are compared against the real broker in test_poison.py."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer
from confluent_kafka.serialization import StringDeserializer

from safeconsumer import SafeDeserializingConsumer

from .harness import Result, base_config, conforms, explain, outcome

CLASSES = (DeserializingConsumer, SafeDeserializingConsumer)


def _conf(**extra: Any) -> dict[str, Any]:
    return {**base_config(), "value.deserializer": StringDeserializer(), **extra}


CALLS: dict[str, Callable[[Any], object]] = {
    "poll(0)": lambda c: c.poll(0),
    "poll(timeout=0)": lambda c: c.poll(timeout=0),
    "poll('x')": lambda c: c.poll("x"),
    "consume()": lambda c: c.consume(),
    "consume(1, 0)": lambda c: c.consume(1, 0),
    "subscribe(['t'])": lambda c: c.subscribe(["t"]),
    "assignment()": lambda c: c.assignment(),
    "close()": lambda c: c.close(),
    "with c: pass": lambda c: c.__exit__(None, None, None),
}


@pytest.mark.parametrize("state", ["open", "closed"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_calls_answer_as_upstreams(name: str, state: str) -> None:
    results = []
    for cls in CLASSES:
        c = cls(_conf())
        try:
            if state == "closed":
                c.close()
            results.append(Result(outcome(functools.partial(CALLS[name], c), c)))
        finally:
            c.close()
    assert conforms(*results), explain(*results)


CONFIGS: dict[str, dict[str, Any]] = {
    "a deserializer and its builder": {"value.deserializer.builder": object()},
    "a deserializer that is not callable": {"value.deserializer": 42},
    "an unknown property": {"no.such.property": 1},
    "no group.id": {"group.id": None},
}


def _build(cls: type[Any], conf: dict[str, Any], made: list[Any]) -> None:
    made.append(cls(conf))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_constructor_refuses_what_upstreams_refuses(name: str) -> None:
    extra = CONFIGS[name]
    conf = {k: v for k, v in _conf(**extra).items() if v is not None}
    results = []
    for cls in CLASSES:
        made: list[Any] = []
        results.append(Result(outcome(functools.partial(_build, cls, conf, made))))
        for c in made:
            c.close()
    assert conforms(*results), explain(*results)


def test_it_is_a_safe_consumer_and_an_upstream_deserializing_consumer() -> None:
    from confluent_kafka import Consumer

    from safeconsumer import SafeConsumer

    c = SafeDeserializingConsumer(_conf(), keepalive="off")
    try:
        assert isinstance(c, DeserializingConsumer) and isinstance(c, SafeConsumer) and isinstance(c, Consumer)
    finally:
        c.close()
