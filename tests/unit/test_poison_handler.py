"""The poison handler's logic without a broker: policies, retries, revocation, the flood limit."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, Message

from safeconsumer import DeadLetter, PoisonLimitError, Skip
from safeconsumer._errors import FatalConsumerError
from safeconsumer.poison._policy import DeadLetterWriter, PoisonHandler


class Fakes:
    def __init__(self) -> None:
        self.owned = True
        self.given_back: list[Message] = []
        self.keepalives = 0
        self.counted: list[tuple[str, str]] = []
        self.written: list[tuple[Message, str, int]] = []
        self.broken = False

    @contextlib.contextmanager
    def keepalive(self) -> Iterator[None]:
        self.keepalives += 1
        yield

    def fail(self, fatal: FatalConsumerError, _err: KafkaError) -> None:
        raise fatal

    def write(self, _policy: Any, message: Message, exc: Exception, stage: str, attempts: int) -> None:
        if self.broken:
            raise RuntimeError("broker unreachable")
        self.written.append((message, stage, attempts))

    def close(self) -> None:
        pass

    def handler(self, policy: Any) -> PoisonHandler:
        return PoisonHandler(
            policy,
            group_id="g",
            writer=cast(DeadLetterWriter, self),  # no producer in a unit test: this records the writes
            give_back=self.given_back.append,
            keepalive=self.keepalive,
            fail=self.fail,
            counted=lambda outcome, stage: self.counted.append((outcome, stage)),
            owns=lambda _msg: self.owned,
        )


def record(offset: int = 5) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=b"v")


def failing(times: int) -> Any:
    calls = {"n": 0}

    def handler(_msg: Message) -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise RuntimeError(f"failure {calls['n']}")
        return "ok"

    handler.calls = calls  # type: ignore[attr-defined]
    return handler


def test_without_a_policy_the_handlers_exception_propagates() -> None:
    fakes = Fakes()
    with pytest.raises(RuntimeError, match="failure 1"):
        fakes.handler(None).handle(record(), failing(1))
    assert fakes.keepalives == 0 and not fakes.counted


def test_skip_counts_and_returns_none(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    fakes = Fakes()
    assert fakes.handler(Skip()).handle(record(), failing(5)) is None
    assert fakes.counted == [("skipped", "process")]
    assert "t [0] at offset 5 (RuntimeError)" in caplog.text and "b'v'" not in caplog.text


def test_retries_inside_a_keepalive_until_the_handler_succeeds() -> None:
    fakes = Fakes()
    handler = failing(2)
    assert fakes.handler(DeadLetter("dlt", retries=3, backoff=0.001)).handle(record(), handler) == "ok"
    assert handler.calls["n"] == 3 and fakes.keepalives == 1 and not fakes.written


def test_the_first_attempt_costs_no_keepalive() -> None:
    fakes = Fakes()
    assert fakes.handler(DeadLetter("dlt", backoff=0.001)).handle(record(), failing(0)) == "ok"
    assert fakes.keepalives == 0


def test_after_the_retries_the_record_is_dead_lettered_with_its_attempts() -> None:
    fakes = Fakes()
    assert fakes.handler(DeadLetter("dlt", retries=2, backoff=0.001)).handle(record(), failing(99)) is None
    [(msg, stage, attempts)] = fakes.written
    assert (msg.offset(), stage, attempts) == (5, "process", 3)
    assert fakes.counted == [("dead_lettered", "process")]


def test_a_revoked_partition_ends_the_retries_without_a_dead_letter() -> None:
    fakes = Fakes()

    def handler(_msg: Message) -> str:
        fakes.owned = False  # a rebalance took the partition while the handler ran
        raise RuntimeError("no")

    assert fakes.handler(DeadLetter("dlt", retries=5, backoff=0.001)).handle(record(), handler) is None
    assert not fakes.written and not fakes.counted


def test_a_failed_write_gives_the_record_back_and_raises() -> None:
    from safeconsumer import DeadLetterError

    fakes = Fakes()
    fakes.broken = True
    handler = fakes.handler(DeadLetter("dlt", retries=0))
    msg = record()
    with pytest.raises(DeadLetterError, match="delivered again"):
        handler.handle(msg, failing(1))
    assert fakes.given_back == [msg] and not fakes.counted


def test_past_the_flood_limit_the_consumer_stops() -> None:
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0, max_dead_letters=2))
    for offset in (1, 2):
        handler.handle(record(offset), failing(1))
    with pytest.raises(PoisonLimitError, match="max_dead_letters=2"):
        handler.handle(record(3), failing(1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topic": ""},
        {"topic": "t", "retries": -1},
        {"topic": "t", "backoff": -1},
        {"topic": "t", "max_dead_letters": 0},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="DeadLetter"):
        DeadLetter(**kwargs)
