"""GroupLook (group/_share.py) when the group's settings cannot be read, and the broker DLQ's state."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from safeconsumer.group import _share as _group
from safeconsumer.group._dlq import BrokerDlq
from safeconsumer.group._share import REFRESH_EVERY, RETRY_AFTER, GroupLook, GroupSettings


def test_a_failed_read_is_retried_within_seconds_and_copies_from_the_second_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    look, reads = _unanswered_look(monkeypatch)
    look.read()
    assert not look.known and look.settings == GroupSettings()
    assert look.copy_from == 2, "unknown limit: a copy too many, never an archive without one"
    now = time.monotonic()
    look.maybe_refresh(now + 0.5)
    assert len(reads) == 1, "not read again at once"
    look.maybe_refresh(now + RETRY_AFTER + 0.1)
    assert len(reads) == 2, f"read again {RETRY_AFTER:g} s after a failure, not {REFRESH_EVERY:g} s"

    def good(*_args: Any, **_kwargs: Any) -> GroupSettings:
        reads.append(time.monotonic())
        return GroupSettings(delivery_limit=4, read=True)

    monkeypatch.setattr(_group, "read_settings", good)
    look.read()
    assert look.known and look.copy_from == 4 and len(reads) == 3
    look.maybe_refresh(time.monotonic() + RETRY_AFTER + 0.1)
    assert len(reads) == 3, "after a good read, the next is a minute away"


def test_refresh_at_is_when_maybe_refresh_reads_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer compares a batch's time with ``refresh_at`` before it calls maybe_refresh()."""
    look, reads = _unanswered_look(monkeypatch)
    assert look.refresh_at == 0.0, "never read: due at once"
    look.read()
    assert look.refresh_at == pytest.approx(reads[0] + RETRY_AFTER, abs=0.5)
    look.maybe_refresh(look.refresh_at - 0.1)
    assert len(reads) == 1, "not before refresh_at"
    look.maybe_refresh(look.refresh_at)
    assert len(reads) == 2, "at refresh_at"


def _unanswered_look(monkeypatch: pytest.MonkeyPatch) -> tuple[GroupLook, list[float]]:
    """A look whose every read fails (the times of the reads), its refreshes run inline."""
    look = GroupLook("g", {"bootstrap.servers": "127.0.0.1:1"}, None)
    monkeypatch.setattr(look, "admin", lambda: None)
    reads: list[float] = []

    def failing(*_args: Any, **_kwargs: Any) -> GroupSettings:
        reads.append(time.monotonic())
        raise RuntimeError("Timed out waiting for controller")

    monkeypatch.setattr(_group, "read_settings", failing)
    monkeypatch.setattr("safeconsumer.group._share.threading.Thread", _Inline)
    return look, reads


class _Inline:
    """A thread that runs its target at start(), for a deterministic refresh."""

    def __init__(
        self, target: Callable[..., object], name: str = "", daemon: bool = False, args: tuple[Any, ...] = ()
    ) -> None:
        self._target, self._args = target, args

    def start(self) -> None:
        self._target(*self._args)

    def is_alive(self) -> bool:
        return False


def _look_with_a_dlq(monkeypatch: pytest.MonkeyPatch) -> GroupLook:
    """A look whose policy topic is the group's broker DLQ, its settings read (limit 3) without a broker."""
    look = GroupLook("g", {}, None, dead_letter_topic="dlq.orders")
    monkeypatch.setattr(look, "admin", lambda: None)
    dlq = BrokerDlq(topic="dlq.orders", copy_record=True, known=True)
    monkeypatch.setattr(_group, "read_settings", lambda *_a, **_k: GroupSettings(delivery_limit=3, dlq=dlq, read=True))
    return look


def test_a_dlq_check_that_fails_leaves_the_settings_read_and_the_dlq_unrelied(monkeypatch: pytest.MonkeyPatch) -> None:
    look = _look_with_a_dlq(monkeypatch)

    def refused(*_args: Any) -> BrokerDlq:
        raise RuntimeError("Cluster authorization failed")

    monkeypatch.setattr(_group, "check_broker_dlq", refused)
    look.read()
    assert look.known and look.copy_from == 3
    assert not look.broker_copies and look.settings.dlq.problem == "it could not be checked (RuntimeError)"
    assert look.settings.dlq.unchecked, "checked again within seconds"


def test_a_dlq_that_could_not_be_checked_is_checked_again_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a broker is down the check fails and the consumer copies for itself: for seconds, not a minute."""
    look = _look_with_a_dlq(monkeypatch)
    monkeypatch.setattr("safeconsumer.group._share.threading.Thread", _Inline)
    checks: list[str] = []

    def unanswered(found: BrokerDlq, *_args: Any, **_kwargs: Any) -> BrokerDlq:
        checks.append("unanswered")
        return BrokerDlq(found.topic, found.copy_record, found.known, "share.version unread", unchecked=True)

    monkeypatch.setattr(_group, "check_broker_dlq", unanswered)
    look.read()
    assert look.known and not look.broker_copies and look.settings.dlq.unchecked
    now = time.monotonic()
    look.maybe_refresh(now + 0.5)
    assert checks == ["unanswered"], "not checked again at once"

    def answered(found: BrokerDlq, *_args: Any, **_kwargs: Any) -> BrokerDlq:
        checks.append("answered")
        return found

    monkeypatch.setattr(_group, "check_broker_dlq", answered)
    look.maybe_refresh(now + RETRY_AFTER + 0.1)
    assert checks == ["unanswered", "answered"], f"checked again {RETRY_AFTER:g} s later, not {REFRESH_EVERY:g} s"
    assert look.broker_copies
    look.maybe_refresh(time.monotonic() + RETRY_AFTER + 0.1)
    assert len(checks) == 2, "once checked, the next check is a minute away"


@pytest.mark.parametrize(
    ("dlq", "relied_on"),
    [
        (BrokerDlq(topic="dlq.orders", copy_record=True, known=True), True),
        (BrokerDlq(topic="dlq.orders", copy_record=True, known=True, problem="topic lacks it"), False),
        (BrokerDlq(topic="dlq.other", copy_record=True, known=True), False),
        (BrokerDlq(known=True), False),
        (BrokerDlq(), False),
    ],
)
def test_the_broker_writes_the_copies_only_to_the_policy_s_topic_and_only_when_it_can(
    dlq: BrokerDlq, relied_on: bool
) -> None:
    look = GroupLook("g", {}, None, dead_letter_topic="dlq.orders")
    look.settings = GroupSettings(dlq=dlq)
    assert look.broker_copies is relied_on
    look.dead_letter_topic = None
    assert not look.broker_copies


@pytest.mark.parametrize("cls", ["raw", "safe"])
def test_librdkafka_2_16_has_no_share_acquire_mode_and_neither_do_we(cls: str) -> None:
    """KIP-1206's ``share.acquire.mode`` (Kafka 4.4's consumers) is not a librdkafka 2.16 setting:
    upstream refuses it, and SafeShareConsumer with upstream's exact error (no config key of ours)."""
    from confluent_kafka import KafkaException, ShareConsumer

    from safeconsumer.share import SafeShareConsumer

    conf = {"group.id": "g", "bootstrap.servers": "127.0.0.1:1", "share.acquire.mode": "record_limit"}
    with pytest.raises(KafkaException, match=r'No such configuration property: "share\.acquire\.mode"'):
        (ShareConsumer if cls == "raw" else SafeShareConsumer)(conf)
