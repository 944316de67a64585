"""When partitions whose committed-offset fetch librdkafka gave up are assigned again (pure logic)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from safeconsumer.consumer._requery import FIRST_DELAY, FORGET_AFTER, MAX_DELAY, Requery, is_failed_offset_fetch


def test_nothing_waits_at_first() -> None:
    r = Requery()
    assert r.due == 0.0
    assert r.take() == set()


def test_a_failed_partition_is_due_after_the_first_delay_and_taken_once() -> None:
    r = Requery()
    assert r.failed([("t", 0)], now=100.0) == FIRST_DELAY
    assert r.due == pytest.approx(100.0 + FIRST_DELAY)
    assert r.take() == {("t", 0)}
    assert r.due == 0.0 and r.take() == set()


def test_a_failed_request_means_every_partition_waiting_for_its_offset() -> None:
    r = Requery()
    r.failed([("t", 0)], now=1.0)
    r.failed(None, now=1.0)
    r.failed([("u", 1)], now=1.0)
    assert r.take() is None


def test_repeated_failures_back_off_up_to_the_ceiling_then_start_over_after_a_quiet_spell() -> None:
    r = Requery()
    delays = [r.failed([("t", 0)], now=10.0 + i) for i in range(12)]
    assert delays[:4] == [FIRST_DELAY, FIRST_DELAY * 2, FIRST_DELAY * 4, FIRST_DELAY * 8]
    assert max(delays) == MAX_DELAY and delays[-1] == MAX_DELAY
    r.take()
    assert r.failed([("t", 0)], now=22.0 + FORGET_AFTER) == FIRST_DELAY


def test_a_later_failure_never_postpones_what_is_already_due() -> None:
    r = Requery()
    r.failed([("t", 0)], now=0.0)
    first_due = r.due
    r.failed([("t", 1)], now=0.05)  # a longer delay now, but t[0] is due first
    assert r.due == first_due
    assert r.take() == {("t", 0), ("t", 1)}


def test_the_first_delay_waits_for_a_fetch_response_but_never_less_than_the_least() -> None:
    assert Requery(1.0).failed([("t", 0)], now=0.0) == 1.0
    assert Requery(0.0).failed([("t", 0)], now=0.0) == FIRST_DELAY


def test_partitions_that_leave_are_forgotten() -> None:
    r = Requery()
    r.failed([("t", 0), ("t", 1)], now=0.0)
    r.forget([("t", 0)])
    assert r.due > 0
    r.forget([("t", 1)])
    assert r.due == 0.0 and r.take() == set()
    r.failed(None, now=0.0)
    r.forget(None)
    assert r.due == 0.0 and r.take() == set()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Failed to fetch committed offsets for 0 partition(s) in group "g": Broker: Not coordinator', True),
        ('Failed to fetch committed offsets for partitions in group "g": Local: Broker transport failure', True),
        ('Failed to fetch committed offset for group "g" topic t [0]: Broker: Unknown topic or partition', True),
        ("Fetch from broker 1 reached end of partition", False),
    ],
)
def test_the_error_events_that_say_librdkafka_gave_up(text: str, expected: bool) -> None:
    assert is_failed_offset_fetch(KafkaError(KafkaError.NOT_COORDINATOR, text)) is expected
