"""The pause ledger: intent in, effective set out (pure logic, no broker)."""

from __future__ import annotations

import re

import pytest

from safeconsumer import InvalidPauseRequest
from safeconsumer.base._topics import parse_topic_entries
from safeconsumer.consumer._pause import PauseLedger, subscription_can_match

ASSIGNED = [("orders", 0), ("orders", 1), ("orders-eu", 0), ("audit", 0)]


def test_levels_are_independent() -> None:
    ledger = PauseLedger()
    ledger.mark_partitions([("orders", 0)])
    ledger.mark_topics(["audit"], [])
    assert ledger.effective(ASSIGNED) == {("orders", 0), ("audit", 0)}
    ledger.set_consumer(True)
    assert ledger.effective(ASSIGNED) == set(ASSIGNED)
    ledger.set_consumer(False)
    ledger.unmark_partitions([("audit", 0)])  # a partition resume does not lift a topic mark
    assert ledger.effective(ASSIGNED) == {("orders", 0), ("audit", 0)}


def test_patterns_cover_topics_seen_later() -> None:
    ledger = PauseLedger()
    names, patterns = parse_topic_entries(["^orders.*"])
    ledger.mark_topics(names, patterns)
    assert ledger.effective(ASSIGNED) == {("orders", 0), ("orders", 1), ("orders-eu", 0)}
    assert ledger.effective([("orders-us", 7)]) == {("orders-us", 7)}
    ledger.unmark_topics(*parse_topic_entries(re.compile("^orders.*")))
    assert ledger.effective(ASSIGNED) == frozenset()


def test_snapshot_is_sorted_and_frozen() -> None:
    ledger = PauseLedger()
    ledger.mark_partitions([("orders", 1), ("audit", 0)])
    ledger.mark_topics(*parse_topic_entries(["^z", "^a"]))
    state = ledger.snapshot(ASSIGNED)
    assert state.effective == (("audit", 0), ("orders", 1))
    assert state.patterns == ("^a", "^z")
    with pytest.raises(AttributeError):
        state.consumer = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (42, "got int"),
        ([""], "empty"),
        (["^("], "invalid topic regex"),
        ([], "is empty"),
        ([b"orders"], "got bytes"),
        (re.compile(b"x"), "not bytes"),
    ],
)
def test_bad_topic_entries_name_the_problem(entry: object, message: str) -> None:
    with pytest.raises(InvalidPauseRequest, match=re.escape(message)):
        parse_topic_entries(entry)


def test_subscription_can_never_match() -> None:
    names, patterns = parse_topic_entries(["orders", "nope", "^aud.*", "^zzz"])
    assert subscription_can_match(["orders", "audit"], names, patterns) == ["nope", "^zzz"]
    assert subscription_can_match(["^anything"], names, patterns) == []
