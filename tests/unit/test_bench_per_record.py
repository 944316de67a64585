"""The per-record benchmark's figures: like compared with like (benchmarks/per_record.py)."""

from __future__ import annotations

import pytest

from benchmarks.per_record import Figure, Runs


def test_a_round_s_figure_is_the_median_of_its_fast_mode_passes() -> None:
    # raw's fastest pass of the run is 200: passes above 1.3 x 200 = 260 are its slow mode.
    runs = Runs({"raw": [[(200, 199), (350, 349), (210, 209)], [(360, 359), (205, 204)]]})
    assert runs.fastest("raw") == 200
    assert runs.fast("raw", 0) == [(200, 199), (210, 209)]
    assert runs.figure("raw", 0, "wall") == 205
    assert runs.figure("raw", 0, "cpu") == 204
    assert runs.figure("raw", 1, "wall") == 205
    assert runs.slow("raw") == (2, 5)


def test_what_a_contender_adds_is_the_median_of_its_fast_passes_minus_raw_s_with_the_per_round_spread() -> None:
    runs = Runs(
        {
            "raw": [[(200, 200)], [(210, 210)], [(205, 205)], [(400, 400)]],
            # The slow passes (about 1.7x) never enter a difference: round 4 has no fast raw pass.
            "safe": [[(220, 220), (390, 390)], [(225, 225)], [(400, 400)], [(215, 215)]],
        }
    )
    assert runs.values("safe", "wall") == [220, 225, 215]
    assert runs.pooled("safe", "wall") == 220 and runs.pooled("raw", "wall") == 205
    added = runs.added("safe", "wall")
    # The spread: rounds 1 and 2 (round 3 has no fast safe pass, round 4 no fast raw one).
    assert (added.median, added.low, added.high) == (15, 15, 20)
    assert added.show() == "+15.0 ns (spread +15.0 to +20.0)"


def test_no_round_with_both_fast_is_an_error_not_a_figure() -> None:
    runs = Runs({"raw": [[(200, 200)], [(400, 400)]], "safe": [[(400, 400)], [(210, 210)]]})
    with pytest.raises(RuntimeError, match="no round had fast-mode passes of both safe and raw"):
        runs.added("safe", "wall")


def test_a_figure_is_a_median_with_its_spread() -> None:
    assert Figure.of([3.0, 1.0, 2.0]) == Figure(2.0, 1.0, 3.0)
