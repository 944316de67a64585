"""The join gate's judgement of a group (pure) and its states, with a stand-in describer."""

from __future__ import annotations

import threading
import time

import pytest

from safeconsumer.consumer._join_gate import MAX_REFUSALS, NO_ANSWER, JoinGate, judge
from safeconsumer.group._describe import GroupView, Member
from safeconsumer.testing import wait_until


def _view(kind: str, state: str = "STABLE", members: int = 2, assignor: str = "") -> GroupView:
    found = {f"m{i}": Member(f"m{i}", "app", "/127.0.0.1", None) for i in range(members)}
    return GroupView(state, found, None, kind=kind, assignor=assignor)


@pytest.mark.parametrize(
    "view",
    [
        _view("CONSUMER", assignor=""),
        _view("CLASSIC", assignor="range"),
        _view("CLASSIC", assignor="roundrobin"),
        _view("CLASSIC", state="EMPTY", members=0, assignor="cooperative-sticky"),
        _view("CLASSIC", state="DEAD", members=0),
        _view("UNKNOWN", state="DEAD", members=0),
    ],
    ids=["consumer-group", "range", "roundrobin", "empty-sticky", "dead", "no-group"],
)
def test_a_group_the_broker_converts_or_replaces_is_joined_now(view: GroupView) -> None:
    assert judge(view) is None


def test_without_an_answer_the_gate_waits() -> None:
    assert judge(None) == NO_ANSWER


def test_a_listed_classic_group_with_members_waits_its_assignor_unknown() -> None:
    """A listing (the gate's safe lookup) gives no assignor: a classic group with members may be one
    the broker refuses."""
    reason = judge(GroupView("STABLE", {}, None, kind="CLASSIC"))
    assert reason is not None and "an assignor a listing does not name" in reason


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "sticky", "custom", ""])
@pytest.mark.parametrize("state", ["STABLE", "PREPARING_REBALANCING", "COMPLETING_REBALANCING"])
def test_a_classic_group_with_members_on_another_assignor_waits(assignor: str, state: str) -> None:
    reason = judge(_view("CLASSIC", state=state, assignor=assignor))
    assert reason is not None
    assert "KAFKA-18134" in reason
    assert (repr(assignor) if assignor else "an assignor a listing does not name") in reason


class Describer:
    """Answers with the views it is given, one per describe (the last one again after them)."""

    def __init__(self, *views: GroupView | None) -> None:
        self.views = list(views)
        self.released = threading.Event()
        self.calls = 0

    def listed(self, timeout: float) -> GroupView | None:
        self.calls += 1
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]

    def release(self) -> None:
        self.released.set()


def _ready_within(gate: JoinGate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gate.ready(time.monotonic()):
            return True
        time.sleep(0.01)
    return False


def test_the_gate_opens_when_the_group_becomes_convertible_and_is_idle_after() -> None:
    sticky, empty = _view("CLASSIC", assignor="cooperative-sticky"), _view("CLASSIC", state="EMPTY", members=0)
    describer = Describer(None, sticky, empty)
    gate = JoinGate("g", lambda: describer, timeout=None, check_every=0.01)
    assert gate.due == 0.0 and not gate.ready(time.monotonic())
    gate.hold()
    assert gate.due > 0
    assert _ready_within(gate, 5)
    assert gate.due == 0.0
    assert describer.calls == 3
    assert gate.reason is not None and "cooperative-sticky" in gate.reason
    assert describer.released.wait(5)


def test_the_gate_opens_at_its_timeout_while_the_group_stays_unconvertible() -> None:
    describer = Describer(_view("CLASSIC", assignor="cooperative-sticky"))
    gate = JoinGate("g", lambda: describer, timeout=0.2, check_every=0.01)
    started = time.monotonic()
    gate.hold()
    assert _ready_within(gate, 5)
    assert time.monotonic() - started >= 0.2
    assert gate.reason is not None


def test_a_cancelled_gate_never_opens_and_its_thread_ends() -> None:
    describer = Describer(_view("CLASSIC", assignor="cooperative-sticky"))
    gate = JoinGate("g", lambda: describer, timeout=None, check_every=0.01)
    gate.hold()
    gate.cancel()
    assert gate.due == 0.0
    assert not gate.ready(time.monotonic())
    assert describer.released.wait(5)


def test_a_group_joinable_at_once_leaves_no_reason() -> None:
    describer = Describer(_view("CONSUMER"))
    gate = JoinGate("g", lambda: describer, timeout=None)
    gate.hold()
    assert _ready_within(gate, 5)
    assert gate.reason is None


def test_a_join_let_through_as_convertible_may_wait_again_within_the_timeout() -> None:
    """The group changed between the gate's look and the join (the broker refused it): the
    subscription waits again, and ``timeout`` counts from its first wait, not from the refusal."""
    describer = Describer(_view("CONSUMER"), _view("CLASSIC", assignor="cooperative-sticky"))
    gate = JoinGate("g", lambda: describer, timeout=1.0, check_every=0.01)
    first = time.monotonic()
    gate.hold()
    assert _ready_within(gate, 5)
    assert not gate.timed_out
    # The refusal comes 0.6 s into the wait: 0.4 s of it are left.
    wait_until(lambda: time.monotonic() - first >= 0.6, timeout=5, what="0.6 s into the wait")
    assert gate.may_wait_again(time.monotonic())
    again = time.monotonic()
    gate.hold(again=True)
    assert _ready_within(gate, 5), "the timeout still opens the gate"
    assert gate.timed_out
    assert time.monotonic() - first >= 1.0
    assert time.monotonic() - again < 0.9, "the wait again started a timeout of its own"
    assert not gate.may_wait_again(time.monotonic()), "a join the timeout let through is not retried"


def test_no_wait_again_once_the_timeout_ran_out() -> None:
    describer = Describer(_view("CONSUMER"))
    gate = JoinGate("g", lambda: describer, timeout=0.2, check_every=0.01)
    gate.hold()
    assert _ready_within(gate, 5)
    assert gate.may_wait_again(time.monotonic())
    assert not gate.may_wait_again(time.monotonic() + 0.3)
    forever = JoinGate("g", lambda: describer, timeout=None)
    forever.hold()
    assert _ready_within(forever, 5)
    assert forever.may_wait_again(time.monotonic() + 1e6)


def test_a_subscription_refused_again_and_again_stops_waiting() -> None:
    """A refusal the gate cannot see coming (e.g. online migration disabled on the broker) must
    not loop: after ``MAX_REFUSALS`` waits again the refusal is fatal."""
    describer = Describer(_view("CONSUMER"))
    gate = JoinGate("g", lambda: describer, timeout=None, check_every=0.01)
    gate.hold()
    assert _ready_within(gate, 5)
    for _ in range(MAX_REFUSALS):
        assert gate.may_wait_again(time.monotonic())
        gate.hold(again=True)
        assert _ready_within(gate, 5)
    assert not gate.may_wait_again(time.monotonic())
    gate.hold()  # a new subscription starts counting again
    assert _ready_within(gate, 5)
    assert gate.may_wait_again(time.monotonic())


def test_a_closed_gate_never_holds_again() -> None:
    describer = Describer(_view("CLASSIC", assignor="cooperative-sticky"))
    gate = JoinGate("g", lambda: describer, timeout=None, check_every=0.01)
    gate.close()
    gate.hold(again=True)
    assert gate.due == 0.0 and describer.calls == 0
    assert not gate.may_wait_again(time.monotonic())
