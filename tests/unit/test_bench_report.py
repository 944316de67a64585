"""docs/performance.md shows the newest ``make bench`` results: its generated part and pictures are
what :mod:`benchmarks.report` makes of the newest file in benchmarks/results (rerun it after
``make bench`` if this fails)."""

from __future__ import annotations

from benchmarks import report


def test_the_performance_page_shows_the_newest_results() -> None:
    path = report.newest()
    page, images = report.render(path)
    assert report.PAGE.read_text() == page, "docs/performance.md is not the newest results: python -m benchmarks.report"
    for name, svg in images.items():
        assert (report.IMG / name).read_text() == svg, f"docs/img/{name} is stale: python -m benchmarks.report"


def test_every_budget_line_of_the_results_has_a_bound_or_says_it_is_reported() -> None:
    result = report.load(report.newest())
    assert result["lines"], "an empty results file"
    for line in result["lines"]:
        assert line["figure"] == line["figure"], f"{line['what']}: not a number"
        if line["bound"] is not None:
            judged = [line["figure"]]
            if line.get("by_spread"):  # SPEC's share lines: the spread inside the bound too
                judged += [line["low"], line["high"]]
            assert line["holds"] == all(
                v >= line["bound"] if line["at_least"] else v <= line["bound"] for v in judged
            ), line["what"]
