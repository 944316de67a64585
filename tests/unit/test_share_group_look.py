"""GroupLook (share/_group.py) when the group's settings cannot be read, and the broker DLQ's state."""

from __future__ import annotations

import time
from typing import Any

import pytest

from safeconsumer.share import _group
from safeconsumer.share._dlq import BrokerDlq
from safeconsumer.share._group import REFRESH_EVERY, RETRY_AFTER, GroupLook, GroupSettings


def _failing(*_args: Any, **_kwargs: Any) -> GroupSettings:
    raise RuntimeError("Timed out waiting for controller")


def test_a_failed_read_is_retried_within_seconds_and_counts_the_second_delivery_as_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    look = GroupLook("g", {"bootstrap.servers": "127.0.0.1:1"}, None)
    monkeypatch.setattr(look, "admin", lambda: None)
    monkeypatch.setattr(_group, "read_settings", _failing)
    look.read()
    assert not look.known and look.settings == GroupSettings()
    assert look.last_delivery == 2, "unknown limit: a copy too many, never an archive without one"
    assert look._read_at <= time.monotonic() - REFRESH_EVERY + RETRY_AFTER + 0.5
    monkeypatch.setattr(_group, "read_settings", lambda *_a, **_k: GroupSettings(delivery_limit=4))
    look.read()
    assert look.known and look.last_delivery == 4


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
