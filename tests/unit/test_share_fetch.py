"""share/_fetch.py: when a poll's records were acquired, at the earliest (pure: a fake upstream and clock)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from safeconsumer.share import _fetch
from safeconsumer.share._fetch import SLICE, Fetches


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class Upstream:
    """Upstream's poll(): each call lasts ``takes`` seconds of the fake clock and returns the next
    answer (a list of records, or an exception to raise); the arguments of each call are kept."""

    def __init__(self, clock: Clock, answers: list[Any], takes: float = 0.2) -> None:
        self.clock, self.answers, self.takes = clock, answers, takes
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> list[str]:
        self.calls.append((args, kwargs))
        self.clock.now += self.takes
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(_fetch, "time", SimpleNamespace(monotonic=c.monotonic))
    return c


def test_records_of_a_first_poll_were_acquired_after_it_started(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [["r"]])
    messages, acquired = f.poll(up, 0.1)
    assert messages == ["r"] and acquired == 100.0 and f.floor is None
    assert up.calls == [((0.1,), {})]


def test_after_an_empty_poll_records_count_from_its_end_however_late_the_next_poll(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [[], ["r"]])
    assert f.poll(up, 0.1) == ([], 100.2)
    clock.now += 30.0  # the application works elsewhere; librdkafka's fetch is in flight
    messages, acquired = f.poll(up, 0.1)
    assert messages == ["r"] and acquired == 100.2, "the records may have waited since the empty poll"
    assert f.floor is None


def test_after_a_poll_that_returned_records_the_next_counts_from_its_own_start(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [["a"], ["b"]])
    f.poll(up, 0.1)
    clock.now += 30.0
    assert f.poll(up, 0.1) == (["b"], 130.2)


def test_a_poll_that_raised_keeps_the_bound_or_sets_it_to_its_start(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [RuntimeError("x"), [], RuntimeError("y"), ["r"]])
    with pytest.raises(RuntimeError, match="x"):
        f.poll(up, 0.1)
    assert f.floor == 100.0, "a response may wait behind the error: the call's start"
    f.poll(up, 0.1)
    assert f.floor == 100.4
    with pytest.raises(RuntimeError, match="y"):
        f.poll(up, 0.1)
    assert f.floor == 100.4, "an error tells nothing new: the bound stays"
    assert f.poll(up, 0.1) == (["r"], 100.4)


def test_a_long_timeout_is_waited_in_slices_and_counts_from_the_last_empty_one(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [[], [], [], ["r"]], takes=SLICE)
    messages, acquired = f.poll(up, 10.0)
    assert messages == ["r"] and acquired == 100.0 + 3 * SLICE
    assert up.calls == [((SLICE,), {})] * 4


@pytest.mark.parametrize("call", [((), {}), ((-1,), {}), ((), {"timeout": -1.0})])
def test_no_timeout_waits_in_slices_until_records(clock: Clock, call: tuple[Any, dict[str, Any]]) -> None:
    f, up = Fetches(), Upstream(clock, [[]] * 5 + [["r"]], takes=SLICE)
    assert f.poll(up, *call[0], **call[1]) == (["r"], 100.0 + 5 * SLICE)
    assert len(up.calls) == 6


def test_a_long_timeout_ends_empty_at_its_deadline(clock: Clock) -> None:
    f, up = Fetches(), Upstream(clock, [[]] * 10, takes=SLICE)
    messages, acquired = f.poll(up, timeout=1.2)
    assert messages == [] and acquired == f.floor == clock.now
    assert [c[0][0] for c in up.calls] == [SLICE, SLICE, pytest.approx(0.2)]


@pytest.mark.parametrize(
    "args, kwargs",
    [((0.5,), {}), ((0,), {}), ((), {"timeout": 0.2}), (("x",), {}), ((True,), {}), ((1.0, 2), {}), ((), {"t": 1})],
)
def test_short_or_unusual_arguments_go_to_upstream_as_they_are(
    clock: Clock, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    f, up = Fetches(), Upstream(clock, [["r"]])
    f.poll(up, *args, **kwargs)
    assert up.calls == [(args, kwargs)], "upstream answers them itself (its exact errors)"
