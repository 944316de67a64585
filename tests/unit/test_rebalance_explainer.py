"""The rebalance explainer's logic, with a scripted group description (no broker).

The broker behaviour (who joined, when the group is stable) is covered by
tests/integration/test_rebalance_causes.py; here, what it concludes from what it is told.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaError

from safeconsumer._health import GroupView, Member, RebalanceExplainer, admin_config
from safeconsumer.testing import wait_until


class Telemetry:
    def __init__(self) -> None:
        self.counted: list[tuple[str, str]] = []
        self.explained: list[tuple[str, list[str]]] = []

    def rebalance_caused(self, change: str, cause: str) -> None:
        self.counted.append((change, cause))

    def rebalance_explained(self, cause: str, started: float, peers: list[str], protocol: str) -> None:
        self.explained.append((cause, peers))


class Group:
    """What describing the group answers, in turn (the last answer repeats)."""

    def __init__(self, *views: GroupView | None) -> None:
        self.views = list(views)
        self.calls = 0

    def describe(self, timeout: float) -> GroupView | None:
        self.calls += 1
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]

    def release(self) -> None:
        pass


def _view(state: str, *ids: str) -> GroupView:
    return GroupView(state, {i: Member(i, f"client-{i}", "/10.0.0.1", None) for i in ids})


def _explainer(group: Group | None, generation: list[int]) -> tuple[RebalanceExplainer, Telemetry]:
    telemetry = Telemetry()
    explainer = RebalanceExplainer(
        group_id="g",
        protocol="classic/range",
        telemetry=telemetry,  # type: ignore[arg-type]
        describer=group,  # type: ignore[arg-type]
        member_id=lambda: "me",
        owned=lambda: 2,
        generation=lambda: generation[0],
        settle=0.05,
        deadline=2.0,
    )
    return explainer, telemetry


def test_this_member_s_own_causes_are_known_in_the_callback() -> None:
    explainer, _ = _explainer(None, [1])
    assert explainer.local_cause("assigned", leaving=False) == "joined"
    explainer.callback("assigned", 2, "joined")
    assert explainer.local_cause("assigned", leaving=False) is None, "in the group now: a peer's doing"
    assert explainer.local_cause("revoked", leaving=False) is None
    assert explainer.local_cause("revoked", leaving=True) == "left"
    assert explainer.local_cause("lost", leaving=False) == "session_lost"
    explainer.error_seen(KafkaError._MAX_POLL_EXCEEDED)
    assert explainer.local_cause("lost", leaving=False) == "max_poll_exceeded"
    explainer.error_seen(KafkaError.FENCED_INSTANCE_ID)
    assert explainer.local_cause("lost", leaving=False) == "fenced"
    explainer.error_seen(KafkaError._TRANSPORT)  # not evidence of anything
    explainer.callback("assigned", 2, None)  # an assignment clears the evidence
    assert explainer.local_cause("lost", leaving=False) == "session_lost"
    explainer.close()


def test_peers_that_joined_and_left_are_named_once_the_group_is_stable() -> None:
    group = Group(
        _view("STABLE", "me", "b"),  # learnt when this member joined
        _view("PREPARING_REBALANCE", "me", "b", "c"),
        _view("STABLE", "me", "c"),
    )
    generation = [1]
    explainer, telemetry = _explainer(group, generation)
    explainer.callback("assigned", 2, "joined")
    wait_until(lambda: explainer._known is not None, timeout=5, what="the members learnt")
    generation[0] = 2
    explainer.callback("revoked", 2, None)
    explainer.callback("assigned", 1, None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    cause, peers = telemetry.explained[0]
    assert cause == "peers_changed"
    assert peers == [
        "joined member c (client.id client-c, host /10.0.0.1)",
        "left member b (client.id client-b, host /10.0.0.1)",
    ]
    assert telemetry.counted == [("revoked", "peers_changed"), ("assigned", "peers_changed")]
    assert group.calls == 3, "described until stable"
    explainer.close()


def test_the_rest_of_an_explained_rebalance_gets_its_cause_without_describing_again() -> None:
    group = Group(_view("STABLE", "me"), _view("STABLE", "me", "b"))
    generation = [1]
    explainer, telemetry = _explainer(group, generation)
    explainer.callback("assigned", 4, "joined")
    wait_until(lambda: explainer._known is not None, timeout=5, what="the members learnt")
    generation[0] = 2
    explainer.callback("revoked", 2, None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    calls = group.calls
    explainer.callback("assigned", 0, None)  # cooperative's second round, same generation
    wait_until(lambda: len(telemetry.counted) == 2, timeout=5, what="the second callback counted")
    assert telemetry.counted == [("revoked", "peer_joined"), ("assigned", "peer_joined")]
    assert group.calls == calls and len(telemetry.explained) == 1
    explainer.close()


def test_without_an_answer_the_cause_is_unknown_and_close_does_not_hang() -> None:
    group = Group(None)
    explainer, telemetry = _explainer(group, [1])
    explainer.in_group = True
    explainer.callback("revoked", 1, None)
    wait_until(lambda: bool(telemetry.counted), timeout=10, what="the callback counted")
    assert telemetry.counted == [("revoked", "unknown")]
    explainer.callback("assigned", 1, None)
    started = time.monotonic()
    explainer.close()
    assert time.monotonic() - started < 5
    assert ("assigned", "unknown") in telemetry.counted
    assert not [t for t in threading.enumerate() if t.name.startswith("safeconsumer-rebalance-cause")]


def test_the_admin_client_gets_the_connection_settings_and_no_consumer_settings() -> None:
    conf: dict[str, Any] = {
        "bootstrap.servers": "b:9092",
        "group.id": "g",
        "security.protocol": "SASL_SSL",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "client.id": "app",
    }
    assert admin_config(conf) == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca",
        "client.id": "app-health",
    }
