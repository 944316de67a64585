"""The poison handler's logic without a broker: policies, retries, revocation, the flood limit."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, Message

from safeconsumer import DeadLetter, PoisonLimitError, Skip
from safeconsumer.base._errors import FatalConsumerError
from safeconsumer.poison._policy import DeadLetterWriter, PoisonHandler
from safeconsumer.poison._retries import PartitionBounds


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
            bounds=PartitionBounds(lambda _msg: self.owned),
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


class Bounds(PartitionBounds):
    """Bounds a test steers: whether the next attempt fits, what a cut-short record becomes."""

    def __init__(self, fits: int = 99, *, elsewhere: bool = True, before: int = 0) -> None:
        super().__init__(lambda _msg: True)
        self.fits = fits  # how many waits are allowed
        self.elsewhere = elsewhere
        self.before = before
        self.asked: list[float] = []
        self.stops: list[int] = []
        self.waits = 0

    def may_retry(self, message: Message, wait: float, attempt: float) -> bool:
        self.asked.append(wait)
        return len(self.asked) <= self.fits

    def stopped(self, message: Message, attempts: int) -> bool:
        self.stops.append(attempts)
        return self.elsewhere

    def before_wait(self) -> None:
        self.waits += 1

    def attempts_before(self, message: Message) -> int:
        return self.before


def bounded(fakes: Fakes, policy: Any, bounds: Bounds) -> PoisonHandler:
    return PoisonHandler(
        policy,
        group_id="g",
        writer=cast(DeadLetterWriter, fakes),
        give_back=fakes.given_back.append,
        keepalive=fakes.keepalive,
        fail=fakes.fail,
        counted=lambda outcome, stage: fakes.counted.append((outcome, stage)),
        bounds=bounds,
    )


def test_a_retry_that_would_not_fit_sends_the_record_elsewhere_without_a_dead_letter() -> None:
    fakes, bounds = Fakes(), Bounds(fits=1)
    handler = failing(99)
    assert bounded(fakes, DeadLetter("dlt", retries=5, backoff=0.001), bounds).handle(record(), handler) is None
    assert handler.calls["n"] == 2  # the first attempt, the one retry that fitted
    assert bounds.stops == [2] and not fakes.written and not fakes.counted
    assert bounds.waits == 1  # what the application finished went before the first wait


def test_a_retry_that_would_not_fit_on_a_last_delivery_is_dead_lettered_at_once() -> None:
    fakes, bounds = Fakes(), Bounds(fits=0, elsewhere=False)
    assert bounded(fakes, DeadLetter("dlt", retries=5, backoff=0.001), bounds).handle(record(), failing(99)) is None
    [(_msg, stage, attempts)] = fakes.written
    assert (stage, attempts) == ("process", 1) and bounds.stops == [1]
    assert bounds.waits == 1  # before the dead-letter write, none before a wait that never came


def test_the_bounds_are_asked_with_the_coming_wait() -> None:
    fakes, bounds = Fakes(), Bounds()
    policy = DeadLetter("dlt", retries=3, backoff=0.001, max_backoff=0.01)
    bounded(fakes, policy, bounds).handle(record(), failing(99))
    assert bounds.asked[0] == 0.001 and len(bounds.asked) == 3  # the first wait, then tenacity's two
    assert all(0 < w <= 0.011 for w in bounds.asked)
    assert not bounds.stops and len(fakes.written) == 1


def test_attempts_of_earlier_deliveries_count_against_the_retries() -> None:
    fakes, bounds = Fakes(), Bounds(before=2)
    handler = failing(99)
    bounded(fakes, DeadLetter("dlt", retries=3, backoff=0.001), bounds).handle(record(), handler)
    assert handler.calls["n"] == 2  # one retry left of three, two deliveries already tried
    [(_msg, _stage, attempts)] = fakes.written
    assert attempts == 4


def test_a_handler_failing_everything_stops_within_a_few_hundred_records() -> None:
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0))
    with pytest.raises(PoisonLimitError, match=r"max_dead_letter_ratio=0\.5") as raised:
        for offset in range(1000):
            handler.handle(record(offset), failing(1))
    assert len(fakes.written) == 51, raised.value


@pytest.mark.parametrize("every", [50, 10, 3])
def test_a_healthy_drain_with_poison_records_in_it_never_trips_the_limit(every: int) -> None:
    """Any size, any speed: 20,000 records handled as fast as the loop goes."""
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0))
    for offset in range(20_000):
        handler.handle(record(offset), failing(1) if offset % every == every - 1 else failing(0))
    assert len(fakes.written) == 20_000 // every


def test_deserialization_failures_are_judged_against_the_records_handed_out() -> None:
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt"))
    for offset in range(5_000):
        handler.passed(49)
        handler.deserialization_failed(ValueError("bad bytes"), record(offset))
    with pytest.raises(PoisonLimitError):
        for offset in range(100):
            handler.deserialization_failed(ValueError("bad bytes"), record(offset))


def test_once_handle_judges_records_the_deserializers_passes_no_longer_count() -> None:
    """A record deserialized and then handled is one record, not two: a handler failing everything
    after the deserializer still stops the consumer."""
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0))
    with pytest.raises(PoisonLimitError):
        for offset in range(300):
            handler.passed(1)
            handler.handle(record(offset), failing(1))


def test_the_count_limit_is_off_by_default_and_still_available() -> None:
    assert DeadLetter("dlt").max_dead_letters is None
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0, max_dead_letters=2, max_dead_letter_ratio=None))
    handler.handle(record(1), failing(1))
    handler.handle(record(2), failing(1))
    with pytest.raises(PoisonLimitError, match="max_dead_letters=2"):
        handler.handle(record(3), failing(1))


@pytest.mark.parametrize(
    "kwargs",
    [{"max_dead_letter_ratio": 0}, {"max_dead_letter_ratio": 1}, {"max_dead_letter_ratio": True}, {"ratio_of": 0}],
)
def test_bad_ratio_limits_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="DeadLetter"):
        DeadLetter("t", **kwargs)


def test_a_partition_revoked_during_the_last_retry_is_not_dead_lettered() -> None:
    """The attempts ran out, but the partition left meanwhile: its next owner reads the record."""
    fakes = Fakes()
    calls = {"n": 0}

    def handler(_msg: Message) -> str:
        calls["n"] += 1
        if calls["n"] == 3:  # the last attempt of retries=2
            fakes.owned = False
        raise RuntimeError("no")

    assert fakes.handler(DeadLetter("dlt", retries=2, backoff=0.001)).handle(record(), handler) is None
    assert calls["n"] == 3 and not fakes.written and not fakes.counted


def test_the_ratio_is_more_than_its_share_not_as_much() -> None:
    """0.29 of 100: 29 dead letters in the last 100 records are allowed, the 30th stops the consumer."""
    fakes = Fakes()
    handler = fakes.handler(DeadLetter("dlt", retries=0, max_dead_letter_ratio=0.29))
    with pytest.raises(PoisonLimitError):
        for offset in range(100):
            handler.handle(record(offset), failing(1))
    assert len(fakes.written) == 30
