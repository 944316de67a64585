"""The table (``cases.py``), run on ``confluent_kafka.Consumer`` and on ``SafeConsumer``.

A row conforms when SafeConsumer's result is upstream's (``harness.conforms``). A row of the
allow-list (``allowed.py``) must instead show upstream's recorded outcome and SafeConsumer's
allowed one.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from safeconsumer import SafeConsumer

from .allowed import ALLOWED_CASES
from .cases import CASES, CTOR_CASES, VALID, WRONG
from .harness import Case, CtorCase, Outcome, Result, compare, outcome_conforms, run_case, run_ctor_case

# A case that blocks is a failure, not a hung run (isolated cases time out on their own, in 3 s).
pytestmark = pytest.mark.timeout(60)


def _same_outcome(a: Outcome, b: Outcome) -> bool:
    return (a.kind, a.value, a.type, a.args, a.message) == (b.kind, b.value, b.type, b.args, b.message)


def check(case_id: str, upstream: Result, safe: Result) -> None:
    __tracebackhide__ = True
    entry = ALLOWED_CASES.get(case_id)
    if entry is None:
        compare(case_id, upstream, safe)
        return
    recorded, allowed = entry.cases[case_id]
    if not _same_outcome(upstream.outcome, recorded):
        raise AssertionError(
            f"{case_id}\n  upstream's outcome changed: revisit the allow-list entry {entry.key!r}\n"
            f"  recorded:      {recorded!r}\n  upstream now:  {upstream.outcome!r}"
        )
    if not outcome_conforms(allowed, safe.outcome) or safe.events:
        raise AssertionError(
            f"{case_id}\n  SafeConsumer differs beyond what {entry.key!r} allows:\n"
            f"  upstream:      {upstream!r}\n  allowed:       {allowed!r} (no on_commit events)\n"
            f"  SafeConsumer:  {safe!r}"
        )


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_method(case: Case) -> None:
    check(case.id, run_case(case, Consumer), run_case(case, SafeConsumer))


@pytest.mark.parametrize("case", CTOR_CASES, ids=[case.id for case in CTOR_CASES])
def test_constructor(case: CtorCase) -> None:
    check(case.id, run_ctor_case(case, Consumer), run_ctor_case(case, SafeConsumer))


def test_the_table_covers_every_method_of_upstream() -> None:
    """A method a new confluent-kafka release adds fails here until the table has rows for it."""
    public = {name for name in dir(Consumer) if not name.startswith("_")} | {"__enter__", "__exit__"}
    assert public == set(VALID), f"no table rows: {sorted(public - set(VALID))}; gone: {sorted(set(VALID) - public)}"
    assert set(WRONG) == set(VALID)
