"""When the keeper polls a consumer whose application holds records (pure logic)."""

from __future__ import annotations

import pytest

from safeconsumer.consumer._keepalive import holding_margin


@pytest.mark.parametrize(
    ("max_poll", "margin"),
    [(300.0, 75.0), (10.0, 2.5), (8.0, 2.0), (5.0, 2.0), (3.0, 1.5), (1.0, 0.5)],
)
def test_the_keeper_polls_a_margin_before_max_poll_interval_runs_out(max_poll: float, margin: float) -> None:
    assert holding_margin(max_poll) == pytest.approx(margin)


def test_the_margin_is_between_a_quarter_and_half_of_the_interval() -> None:
    for tenths in range(1, 4000):
        max_poll = tenths / 10
        assert 0.25 * max_poll <= holding_margin(max_poll) <= 0.5 * max_poll
