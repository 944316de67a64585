"""The rebalance explainer's logic, with a scripted group description (no broker).

The broker behaviour (who joined, when the group is stable) is covered by
tests/integration/test_rebalance_causes.py; here, what it concludes from what it is told.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from safeconsumer.base._clients import HELPER_LOG, admin_config
from safeconsumer.group._describe import GroupView, Member
from safeconsumer.group._explainer import RebalanceExplainer
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

    def __init__(self, *views: GroupView | None, isolated: bool = False) -> None:
        self.views = list(views)
        self.calls = 0
        self.idled = 0
        #: Whether describing runs in a child process (then no abort of librdkafka's can reach us).
        self.isolated = isolated

    def describe(self, timeout: float) -> GroupView | None:
        self.calls += 1
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]

    def release(self) -> None:
        pass

    def between_rebalances(self) -> None:
        """The in-process admin client handed over between rebalances (none here)."""
        self.idled += 1

    def end_process(self) -> None:
        pass

    def idle(self) -> Callable[[], None]:
        """What drops the admin client and ends the describe process when idle (none here)."""
        return lambda: None


def _view(state: str, *ids: str) -> GroupView:
    return GroupView(state, {i: Member(i, f"client-{i}", "/10.0.0.1", None) for i in ids})


def _explainer(group: Group | None) -> tuple[RebalanceExplainer, Telemetry]:
    telemetry = Telemetry()
    explainer = RebalanceExplainer(
        group_id="g",
        protocol="classic/range",
        telemetry=telemetry,  # type: ignore[arg-type]
        describer=group,  # type: ignore[arg-type]
        member_id=lambda: "me",
        owned=lambda: 2,
        settle=0.05,
        deadline=2.0,
    )
    return explainer, telemetry


def _joined(explainer: RebalanceExplainer) -> None:
    explainer.callback("assigned", "joined")
    wait_until(lambda: explainer._known is not None, timeout=5, what="the members learnt")


def test_this_member_s_own_causes_are_known_in_the_callback() -> None:
    explainer, _ = _explainer(Group(None))
    assert explainer.local_cause("assigned", leaving=False) == "joined"
    explainer.callback("assigned", "joined")
    assert explainer.local_cause("assigned", leaving=False) is None, "in the group now: a peer's doing"
    assert explainer.local_cause("revoked", leaving=False) is None
    assert explainer.local_cause("revoked", leaving=True) == "left"
    assert explainer.local_cause("lost", leaving=False) is None, "a loss is judged after its error event"
    explainer.close()
    alone, _ = _explainer(None)
    alone.in_group = True
    assert alone.local_cause("revoked", leaving=False) == "unknown", "without describing, a peer's doing is unknown"


@pytest.mark.parametrize(
    ("codes", "cause"),
    [
        ([], "session_lost"),
        ([KafkaError._TRANSPORT], "session_lost"),
        ([KafkaError._MAX_POLL_EXCEEDED], "max_poll_exceeded"),
        ([KafkaError._MAX_POLL_EXCEEDED, KafkaError.FENCED_INSTANCE_ID], "fenced"),
    ],
)
def test_a_loss_is_judged_by_the_errors_around_it(codes: list[int], cause: str) -> None:
    explainer, telemetry = _explainer(Group(None))
    explainer.in_group = True
    explainer.callback("lost", None)  # the loss is served before the error event is looked at
    for code in codes:
        explainer.error_seen(code)
    wait_until(lambda: bool(telemetry.counted), timeout=5, what="the loss counted")
    assert telemetry.counted == [("lost", cause)]
    explainer.close()


def test_peers_that_joined_and_left_are_named_once_the_group_is_stable() -> None:
    group = Group(
        _view("STABLE", "me", "b"),  # learnt when this member joined
        _view("PREPARING_REBALANCE", "me", "b", "c"),
        _view("STABLE", "me", "c"),
    )
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    explainer.callback("revoked", None)
    explainer.callback("assigned", None)
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


@pytest.mark.parametrize("state", ["PREPARING_REBALANCING", "UNKNOWN"])
def test_a_peer_the_broker_was_adding_when_this_member_joined_is_named_as_joining(state: str) -> None:
    """The members learnt at this member's join already hold a peer that joined a moment later
    (this member's callback for it not come yet): the broker is rebalancing, and the peer owns
    nothing yet. ``UNKNOWN`` is how the admin API names a consumer-protocol group reconciling."""
    learnt = _view(state, "me", "b", "c")
    learnt = GroupView(learnt.state, learnt.members, owning=frozenset({"me", "b"}))
    group = Group(learnt, _view("STABLE", "me", "b", "c"))
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    assert explainer._known is not None and set(explainer._known) == {"me", "b"}
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    assert telemetry.explained == [("peer_joined", ["joined member c (client.id client-c, host /10.0.0.1)"])]
    explainer.close()


def test_members_learnt_in_a_stable_group_are_kept_whatever_they_own() -> None:
    learnt = _view("STABLE", "me", "b", "idle")
    learnt = GroupView(learnt.state, learnt.members, owning=frozenset({"me", "b"}))
    explainer, _ = _explainer(Group(learnt))
    _joined(explainer)
    assert explainer._known is not None and set(explainer._known) == {"me", "b", "idle"}
    explainer.close()


@pytest.mark.parametrize(("mine", "known"), [(1, {"me", "b"}), (2, {"me", "b", "c"})])
def test_a_stable_answer_of_a_later_generation_leaves_out_members_owning_nothing(mine: int, known: set[str]) -> None:
    """Described late (a loaded machine), the group is stable again after a peer joined: a
    cooperative group's first round gave this member fewer partitions than it joined with, and
    the peer none yet. This member's callback for that round has not come: the peer is left out,
    so the next rebalance names it. The same answer with this member's assignment unchanged is
    the generation it joined: every member is kept (an idle one owns nothing)."""
    learnt = _view("STABLE", "me", "b", "c")
    learnt = GroupView(learnt.state, learnt.members, owning=frozenset({"me", "b"}), sizes={"me": mine, "b": 1, "c": 0})
    group = Group(learnt, _view("STABLE", "me", "b", "c"))
    explainer, telemetry = _explainer(group)  # this member joined with 2 partitions
    _joined(explainer)
    assert explainer._known is not None and set(explainer._known) == known
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    if known == {"me", "b"}:
        assert telemetry.explained == [("peer_joined", ["joined member c (client.id client-c, host /10.0.0.1)"])]
    else:
        assert telemetry.explained == [("assignment_changed", [])]
    explainer.close()


def test_an_assignment_after_an_explained_revocation_completes_that_rebalance() -> None:
    """Eager's second half, or cooperative's second round, arriving after the first was explained:
    the group is described again, and with the same members it is the same rebalance."""
    group = Group(_view("STABLE", "me"), _view("STABLE", "me", "b"), _view("STABLE", "me", "b"), _view("STABLE", "me"))
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the revocation explained")
    calls = group.calls
    explainer.callback("assigned", None)
    wait_until(lambda: len(telemetry.counted) == 2, timeout=5, what="the assignment counted")
    assert telemetry.counted == [("revoked", "peer_joined"), ("assigned", "peer_joined")]
    assert group.calls == calls + 1 and len(telemetry.explained) == 1, "described: no member came or went"
    explainer.callback("revoked", None)  # the next rebalance starts: described again
    explainer.callback("assigned", None)
    wait_until(lambda: len(telemetry.explained) == 2, timeout=5, what="the next rebalance explained")
    assert telemetry.explained[1][0] == "peer_left"
    assert telemetry.counted[2:] == [("revoked", "peer_left"), ("assigned", "peer_left")]
    explainer.close()


def test_without_an_answer_the_cause_is_unknown_and_close_does_not_hang() -> None:
    group = Group(None)
    explainer, telemetry = _explainer(group)
    explainer.in_group = True
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.counted), timeout=10, what="the callback counted")
    assert telemetry.counted == [("revoked", "unknown")]
    explainer.callback("assigned", None)
    started = time.monotonic()
    explainer.close()
    assert time.monotonic() - started < 5
    assert ("assigned", "unknown") in telemetry.counted
    explainer.callback("assigned", None)  # after close: counted at once, never left waiting
    assert telemetry.counted.count(("assigned", "unknown")) == 2
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
        "enable.metrics.push": False,
        "logger": HELPER_LOG,
    }


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_COORDINATOR])
def test_the_group_is_not_described_in_process_while_a_broker_or_the_coordinator_is_unreachable(code: int) -> None:
    """librdkafka 2.16's admin client can abort the process when a coordinator request meets a
    connection that just dropped: describing in this process (no describe process could be
    started), within 30 s of such an error the explainer does not describe, and the rebalance is
    counted unknown."""
    group = Group(_view("STABLE", "me", "b"))
    explainer, telemetry = _explainer(group)
    explainer.error_seen(code)
    explainer.callback("assigned", "joined")
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.counted), timeout=5, what="the rebalance counted")
    assert telemetry.counted == [("revoked", "unknown")]
    assert group.calls == 0, "described while the cluster was in trouble"
    explainer._trouble_at -= 31.0  # the trouble is over: describing again
    explainer.callback("assigned", "joined")
    wait_until(lambda: group.calls > 0, timeout=5, what="a describe once the trouble is over")
    explainer.close()


def test_a_describe_process_describes_through_the_trouble() -> None:
    """Described in a child process, an abort ends only the child: the explainer keeps explaining."""
    group = Group(_view("STABLE", "me"), _view("STABLE", "me", "b"), isolated=True)
    explainer, telemetry = _explainer(group)
    explainer.error_seen(KafkaError._TRANSPORT)
    explainer.callback("assigned", "joined")
    wait_until(lambda: group.calls > 0, timeout=5, what="the baseline described")
    explainer.callback("assigned", None)
    wait_until(lambda: bool(telemetry.counted), timeout=5, what="the rebalance counted")
    assert telemetry.counted == [("assigned", "peer_joined")]
    explainer.close()


def test_the_admin_client_goes_as_soon_as_nothing_waits_to_be_described() -> None:
    """The baseline learnt at a join hands the admin client over at once, not after the explainer's
    5 s idle wait (it would otherwise live through the consumer's first busy seconds), and so does
    each explained rebalance."""
    group = Group(_view("STABLE", "me"), _view("STABLE", "me", "b"))
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    wait_until(lambda: group.idled >= 1, timeout=2, what="the admin client handed over after the baseline")
    idled = group.idled
    explainer.callback("revoked", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the revocation explained")
    wait_until(lambda: group.idled > idled, timeout=2, what="the admin client handed over after the rebalance")
    explainer.close()


def _typed(view: GroupView, kind: str) -> GroupView:
    return GroupView(view.state, view.members, view.owning, kind=kind, assignor=view.assignor)


@pytest.mark.parametrize(
    ("before", "after", "peer", "said"),
    [
        (
            "CLASSIC",
            "CONSUMER",
            "joined",
            "converted from the classic protocol to a consumer group by the consumer-protocol member c",
        ),
        (
            "CONSUMER",
            "CLASSIC",
            "left",
            "converted back to the classic protocol as its last consumer-protocol member b left",
        ),
    ],
)
def test_a_peer_that_changed_the_group_s_protocol_is_named_as_such(
    before: str, after: str, peer: str, said: str
) -> None:
    """KIP-848's online migration: a consumer-protocol member joining a classic group converts it, and
    the last one leaving converts it back; the admin API tells only the group's type, before and after."""
    start = ("me", "b") if peer == "left" else ("me",)
    end = ("me",) if peer == "left" else ("me", "c")
    group = Group(_typed(_view("STABLE", *start), before), _typed(_view("STABLE", *end), after))
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    explainer.callback("revoked", None)
    explainer.callback("assigned", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    cause, peers = telemetry.explained[0]
    assert cause == ("peer_left" if peer == "left" else "peer_joined")
    assert any(said in p for p in peers), peers
    explainer.close()


def test_no_migration_is_named_while_the_group_keeps_its_type() -> None:
    group = Group(_typed(_view("STABLE", "me"), "CONSUMER"), _typed(_view("STABLE", "me", "c"), "CONSUMER"))
    explainer, telemetry = _explainer(group)
    _joined(explainer)
    explainer.callback("assigned", None)
    wait_until(lambda: bool(telemetry.explained), timeout=5, what="the rebalance explained")
    assert not any("converted" in p for p in telemetry.explained[0][1])
    explainer.close()
