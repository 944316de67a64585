"""The stall guard's pure part: when a partition is suspect, behind, stalled, and restarted again."""

from __future__ import annotations

from safeconsumer.consumer._stall import StallWatch, stall_bound

A, B = ("t", 0), ("t", 1)


def test_the_bound_comes_from_the_settings() -> None:
    assert stall_bound({}) == 60.0  # socket.timeout.ms's default
    assert stall_bound({"socket.timeout.ms": 2000, "fetch.wait.max.ms": 100}) == 2.0
    assert stall_bound({"socket.timeout.ms": 1000, "fetch.wait.max.ms": 800}) == 8.0
    assert stall_bound({"socket.timeout.ms": 100, "fetch.wait.max.ms": 10, "fetch.error.backoff.ms": 10}) == 1.0


def test_a_partition_is_suspect_once_its_position_stood_still_for_the_bound() -> None:
    w = StallWatch(10.0)
    assert w.observe({A: 5, B: 7}, epoch=1, now=0.0) == []
    assert w.due == 5.0
    assert w.observe({A: 5, B: 8}, epoch=1, now=9.0) == []
    assert w.observe({A: 5, B: 8}, epoch=1, now=10.0) == [A]
    assert w.observe({A: 5, B: 8}, epoch=1, now=19.0) == [A, B]


def test_a_new_assignment_starts_every_clock_again() -> None:
    w = StallWatch(10.0)
    w.observe({A: 5}, epoch=1, now=0.0)
    assert w.observe({A: 5}, epoch=2, now=10.0) == []
    assert w.observe({A: 5}, epoch=2, now=20.0) == [A]


def test_a_partition_that_stops_fetching_by_intent_starts_over() -> None:
    w = StallWatch(10.0)
    w.observe({A: 5}, epoch=1, now=0.0)
    w.observe({}, epoch=1, now=5.0)  # paused
    assert w.observe({A: 5}, epoch=1, now=12.0) == []


def test_idle_is_healthy_behind_twice_with_the_queue_drained_between_is_stalled() -> None:
    w = StallWatch(10.0)
    w.observe({A: 5}, epoch=1, now=0.0)
    assert w.observe({A: 5}, epoch=1, now=10.0) == [A]
    assert w.judge(A, behind=False, now=10.0, drained_at=9.0) is None  # nothing past it: idle
    assert w.observe({A: 5}, epoch=1, now=15.0) == []  # its clock started again
    assert w.observe({A: 5}, epoch=1, now=20.0) == [A]
    assert w.judge(A, behind=True, now=20.0, drained_at=19.0) is None  # first seen behind
    w.observe({A: 5}, epoch=1, now=25.0)
    assert w.judge(A, behind=True, now=25.0, drained_at=19.5) is None  # queue not dry since: may wait there
    w.observe({A: 5}, epoch=1, now=30.0)
    assert w.judge(A, behind=True, now=30.0, drained_at=29.0) == "not_fetching"
    assert w.judge(A, behind=None, now=30.0, drained_at=29.0) is None  # the broker did not answer


def test_without_a_position_the_cause_is_no_position_and_a_known_cause_needs_no_second_look() -> None:
    w = StallWatch(10.0)
    w.observe({A: -1001, B: -1001}, epoch=1, now=0.0)
    w.observe({A: -1001, B: -1001}, epoch=1, now=10.0)
    w.judge(A, behind=True, now=10.0, drained_at=0.0)
    w.observe({A: -1001, B: -1001}, epoch=1, now=15.0)
    assert w.judge(A, behind=True, now=15.0, drained_at=12.0) == "no_position"
    w.cause_known(None, "offset_fetch_failed")
    assert w.due == 0.0
    assert w.observe({A: -1001, B: -1001}, epoch=1, now=15.5) == [A, B]
    assert w.judge(B, behind=True, now=15.5, drained_at=0.0) == "offset_fetch_failed"


def test_a_partition_restarted_at_the_same_position_backs_off() -> None:
    w = StallWatch(10.0)
    w.cause_known([A], "offset_fetch_failed")
    w.observe({A: 5}, epoch=1, now=0.0)
    assert w.observe({A: 5}, epoch=1, now=0.5) == [A]
    assert w.judge(A, behind=True, now=0.5, drained_at=0.0) == "offset_fetch_failed"
    w.healed([A], now=0.5)
    assert w.stalls == 1
    for now in (10.5, 15.5):
        w.observe({A: 5}, epoch=1, now=now)
        w.judge(A, behind=True, now=now, drained_at=now)
    w.observe({A: 5}, epoch=1, now=20.0)
    assert w.judge(A, behind=True, now=20.0, drained_at=20.0) is None, "restarted again within bound * 2"
    w.observe({A: 5}, epoch=1, now=21.0)
    assert w.judge(A, behind=True, now=21.0, drained_at=21.0) == "not_fetching"
    w.healed([A], now=21.0)
    w.observe({A: 6}, epoch=1, now=22.0)  # moved: a stall at another position is a new one
    w.observe({A: 6}, epoch=1, now=32.0)
    w.judge(A, behind=True, now=32.0, drained_at=0.0)
    w.observe({A: 6}, epoch=1, now=37.0)
    assert w.judge(A, behind=True, now=37.0, drained_at=36.0) == "not_fetching"


def test_under_reset_latest_without_a_start_records_must_arrive_after_it_was_seen() -> None:
    w = StallWatch(10.0)
    w.observe({A: -1001}, epoch=1, now=0.0)
    w.observe({A: -1001}, epoch=1, now=10.0)
    assert w.latest_grew(A, 100) is None
    assert w.latest_grew(A, 100) is False
    assert w.latest_grew(A, 101) is True
