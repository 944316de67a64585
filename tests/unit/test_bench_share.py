"""The share benchmark's figures: contenders side by side in each round (benchmarks/share.py)."""

from __future__ import annotations

import pytest

from benchmarks.share import ShareRuns


def _round(**by_name: float) -> dict[str, dict[str, float]]:
    return {name.replace("_", " "): {"cpu": v + 100, "wall": v + 1000, "outside": v} for name, v in by_name.items()}


def test_what_a_contender_adds_is_the_median_of_its_per_round_differences_with_their_spread() -> None:
    runs = ShareRuns(
        [
            # A round where the machine ran slow moves both contenders: the difference stays.
            _round(raw_explicit=500, safe_implicit=540),
            _round(raw_explicit=800, safe_implicit=830),
            _round(raw_explicit=450, safe_implicit=510),
        ],
        {},
    )
    added = runs.added("safe implicit", "raw explicit", "outside")
    assert (added.median, added.low, added.high) == (40, 30, 60)
    assert runs.added("safe implicit", "raw explicit", "wall").median == 40


def test_peak_rss_is_ours_over_raw_s_of_the_same_mode_round_by_round() -> None:
    runs = ShareRuns([], {"safe implicit": [50.0, 55.0, 48.0], "raw implicit": [50.0, 50.0, 40.0]})
    ratio = runs.rss_ratio("implicit")
    assert ratio.median == pytest.approx(1.1)
    assert ratio.low == pytest.approx(1.0)
    assert ratio.high == pytest.approx(1.2)


def test_the_records_per_batch_are_the_mean_over_rounds() -> None:
    rounds = [_round(safe_explicit=1.0), _round(safe_explicit=2.0)]
    rounds[0]["safe explicit"]["batch"], rounds[1]["safe explicit"]["batch"] = 1800.0, 600.0
    assert ShareRuns(rounds, {}).batch_size("safe explicit") == 1200.0


def test_the_resolution_is_one_consumer_of_the_floor_against_another_round_by_round() -> None:
    rounds = [
        {"raw explicit #1": {"outside": 300.0}, "raw explicit #2": {"outside": 310.0}},
        {"raw explicit #1": {"outside": 420.0}, "raw explicit #2": {"outside": 400.0}},
        {"raw explicit #1": {"outside": 350.0}, "raw explicit #2": {"outside": 355.0}},
    ]
    resolution = ShareRuns(rounds, {}).resolution()
    assert (resolution.median, resolution.low, resolution.high) == (5.0, -20.0, 10.0)


def test_a_share_line_holds_only_when_its_whole_spread_is_inside_the_bound() -> None:
    from benchmarks.budgets import Line

    median_inside = Line("share", 30.0, 50.0, False, " ns", low=-5.0, high=62.0)
    assert median_inside.holds, "a line judged by its median alone"
    assert not Line("share", 30.0, 50.0, False, " ns", low=-5.0, high=62.0, by_spread=True).holds
    assert Line("share", 30.0, 50.0, False, " ns", low=-5.0, high=49.0, by_spread=True).holds
    assert not Line("share", 51.0, 50.0, False, " ns", low=40.0, high=49.0, by_spread=True).holds
