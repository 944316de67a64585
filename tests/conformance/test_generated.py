"""Hypothesis-generated argument shapes, run on both classes like the table.

Strategies draw the *source text* of a call (an expression of ``cases.NAMESPACE``), so a failure
reads as the call that differs, and each class gets its own fresh arguments. Runs are bounded,
deterministic (``derandomize``) and write nothing into the repository (no example database;
Hypothesis's other caches go to a temporary directory).

Generated calls stay broker-less and quick: timeouts are never negative, NaN or absent where
that means "wait forever"; a synchronous commit that would wait for a coordinator (one second)
is not drawn; no group membership is set up (I7, an allowed difference, would apply: the table
covers it); and the inputs that crash upstream (``cases.NO_ORACLE``) are not drawn.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

import pytest
from confluent_kafka import Consumer
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from safeconsumer import SafeConsumer

from .cases import make_case
from .harness import compare, run_case

pytestmark = pytest.mark.timeout(300)

BOUNDED = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow],
)

ABSENT = "<absent>"


# Hypothesis's pytest plugin caches constants of local modules in ``.hypothesis/`` while it
# collects, even without an example database: point its home at a temporary directory, set
# here because this module is imported during collection, before that happens.
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="safeconsumer-conformance-hypothesis-")
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)
set_hypothesis_home_dir(_HYPOTHESIS_HOME)


def differential(method: str, code: str, *, setup: str | None = None, conf: str | None = None) -> None:
    __tracebackhide__ = True
    case = make_case(method, code, setup=setup, conf=conf)
    compare(case.id, run_case(case, Consumer), run_case(case, SafeConsumer))


def call(method: str, names: tuple[str, ...], values: tuple[str, ...], *, keyword: bool) -> str:
    """``c.method(...)`` passing the present values, by keyword or by position (gaps as None)."""
    present = [(n, v) for n, v in zip(names, values, strict=True) if v != ABSENT]
    if keyword:
        args = [f"{n}={v}" for n, v in present]
    else:
        last = max((names.index(n) for n, _ in present), default=-1)
        args = ["None" if v == ABSENT else v for v in values[: last + 1]]
    return f"c.{method}({', '.join(args)})"


# -- consume / poll -------------------------------------------------------------------------

NUM_MESSAGES = st.one_of(
    st.integers(-3, 3).map(str),
    st.sampled_from(["999999", "1000000", "1000001", "-1000001", "2**31", "2**63", "-(2**63)"]),
    st.sampled_from(["True", "False", "None", '"1"', "1.5", "[1]", "b'1'"]),
)
#: Never negative, NaN or absent: those wait forever (for a record that never comes).
TIMEOUTS = st.one_of(
    st.floats(0, 0.005).map(repr),
    st.sampled_from(["0", "0.0", "-0.0", "False", '"0"', "[0]", "b'0'", "0j"]),
)


@BOUNDED
@given(num=NUM_MESSAGES, timeout=TIMEOUTS, keyword=st.booleans(), setup=st.sampled_from([None, "assigned", "paused"]))
def test_consume(num: str, timeout: str, keyword: bool, setup: str | None) -> None:
    code = call("consume", ("num_messages", "timeout"), (num, timeout), keyword=keyword)
    differential("consume", code, setup=setup)


@BOUNDED
@given(timeout=TIMEOUTS, keyword=st.booleans(), setup=st.sampled_from([None, "assigned", "paused"]))
def test_poll(timeout: str, keyword: bool, setup: str | None) -> None:
    differential("poll", call("poll", ("timeout",), (timeout,), keyword=keyword), setup=setup)


# -- partition lists --------------------------------------------------------------------------

TOPIC_PARTITIONS = st.builds(
    lambda topic, partition, offset: f"TP({topic!r}, {partition}, {offset})",
    st.sampled_from(["t", "u", ""]),
    st.sampled_from([-1, 0, 1, 2]),
    st.sampled_from([-1001, -2, 0, 5]),
)
ODD_MEMBERS = st.sampled_from(["None", '"t"', "0", '("t", 0)', "1.5", "Message()"])
MEMBERS = st.lists(st.one_of(TOPIC_PARTITIONS, TOPIC_PARTITIONS, ODD_MEMBERS), max_size=4)


@st.composite
def partition_lists(draw: st.DrawFn) -> str:
    """A list of TopicPartition with odd members, in an odd container, or not a container at all."""
    members = draw(MEMBERS)
    container = draw(st.sampled_from(["list", "list", "tuple", "set", "scalar"]))
    if container == "list":
        return f"[{', '.join(members)}]"
    if container == "tuple":
        return f"({''.join(m + ', ' for m in members)})"
    if container == "set":
        assume(members and "Message()" not in members)  # a set needs hashable members
        return f"{{{', '.join(members)}}}"
    return draw(st.one_of(TOPIC_PARTITIONS, st.sampled_from(["None", '"t"', "0", "{}"])))


@BOUNDED
@given(
    method_setup=st.sampled_from(
        [
            ("pause", "assigned"),
            ("pause", None),
            ("resume", "paused"),
            ("resume", None),
            ("assign", None),
            ("assign", "assigned"),
        ]
    ),
    partitions=partition_lists(),
    keyword=st.booleans(),
)
def test_partition_lists(method_setup: tuple[str, str | None], partitions: str, keyword: bool) -> None:
    method, setup = method_setup
    differential(method, call(method, ("partitions",), (partitions,), keyword=keyword), setup=setup)


# -- commit / store_offsets -------------------------------------------------------------------

RECORDS = ("record()", 'record(topic="u")', 'Message(topic="t")', 'Message(topic="t", partition=0)')
MESSAGES = st.sampled_from(
    [
        ABSENT,
        "None",
        *RECORDS,
        "error_event()",
        'error_event(KafkaError.OFFSET_OUT_OF_RANGE, topic="t", partition=0, offset=5)',
        '"x"',
        'TP("t", 0, 1)',
    ]
)
OFFSET_LISTS = ('[TP("t", 0, 1)]', '[TP("u", 0, 1)]', '[TP("t", 0, 1), TP("t", 1, 7)]', '[TP("t", -1, 1)]')
OFFSETS = st.sampled_from([ABSENT, "None", "[]", *OFFSET_LISTS, '"x"', "[None]", '(TP("t", 0, 1),)', 'TP("t", 0, 1)'])
ASYNCHRONOUS = st.sampled_from([ABSENT, "True", "False", "None", "0", "1", '"yes"'])


def _given(value: str) -> bool:
    return value not in (ABSENT, "None")


@BOUNDED
@given(
    message=MESSAGES,
    offsets=OFFSETS,
    asynchronous=ASYNCHRONOUS,
    keyword=st.booleans(),
    setup=st.sampled_from([None, "assigned"]),
    conf=st.sampled_from([None, "no-auto-store"]),
)
def test_commit(
    *, message: str, offsets: str, asynchronous: str, keyword: bool, setup: str | None, conf: str | None
) -> None:
    synchronous = asynchronous in ("False", "None", "0")
    writes = message in RECORDS or offsets in OFFSET_LISTS
    # A synchronous commit of real offsets waits a second for the coordinator before it fails.
    assume(not (synchronous and writes and not (_given(message) and _given(offsets))))
    code = call("commit", ("message", "offsets", "asynchronous"), (message, offsets, asynchronous), keyword=keyword)
    differential("commit", code, setup=setup, conf=conf)


@BOUNDED
@given(
    message=MESSAGES,
    offsets=OFFSETS,
    keyword=st.booleans(),
    setup=st.sampled_from([None, "assigned"]),
    conf=st.sampled_from([None, "no-auto-store"]),
)
def test_store_offsets(message: str, offsets: str, keyword: bool, setup: str | None, conf: str | None) -> None:
    code = call("store_offsets", ("message", "offsets"), (message, offsets), keyword=keyword)
    differential("store_offsets", code, setup=setup, conf=conf)


# -- the other partition-taking methods, on open, closed and uninitialised consumers -----------

#: Zero (answer at once) or a value upstream refuses; never "wait": there is no broker.
QUICK_TIMEOUTS = st.sampled_from([ABSENT, "0", "0.0", "False", '"0"', "None", "[0]"])
TOPIC_LISTS = st.one_of(
    st.lists(st.sampled_from(['"t"', '"^t.*"', '""', "None", "0", 'b"t"', '"^("']), max_size=3).map(
        lambda members: f"[{', '.join(members)}]"
    ),
    st.sampled_from(['"t"', "None", '("t",)', "{}"]),
)


@st.composite
def other_calls(draw: st.DrawFn) -> tuple[str, str]:
    """(method, call) for a method the tests above do not draw, with odd arguments."""
    method = draw(
        st.sampled_from(
            ["seek", "position", "committed", "get_watermark_offsets", "offsets_for_times", "subscribe", "unassign"]
        )
    )
    keyword = draw(st.booleans())
    if method == "seek":
        return method, call("seek", ("partition",), (draw(st.one_of(TOPIC_PARTITIONS, ODD_MEMBERS)),), keyword=keyword)
    if method == "position":
        return method, call("position", ("partitions",), (draw(partition_lists()),), keyword=keyword)
    if method == "unassign":
        return method, draw(st.sampled_from(["c.unassign()", "c.unassign(None)", "c.unassign([])", "c.unassign(1)"]))
    if method == "subscribe":
        return method, call("subscribe", ("topics",), (draw(TOPIC_LISTS),), keyword=keyword)
    timeout = draw(QUICK_TIMEOUTS)
    if method == "get_watermark_offsets":
        # Only the cached answer is quick without a broker: a query waits out its timeout.
        partition = draw(st.one_of(TOPIC_PARTITIONS, ODD_MEMBERS))
        names, values = ("partition", "timeout", "cached"), (partition, timeout, "True")
        return method, call(method, names, values, keyword=keyword)
    # committed / offsets_for_times with an absent timeout wait for ever: always pass one.
    assume(timeout != ABSENT)
    return method, call(method, ("partitions", "timeout"), (draw(partition_lists()), timeout), keyword=keyword)


@BOUNDED
@given(drawn=other_calls(), state=st.sampled_from(["open", "open", "closed", "uninit"]))
def test_other_methods_in_every_state(drawn: tuple[str, str], state: str) -> None:
    method, code = drawn
    case = make_case(method, code, setup="assigned" if state == "open" else None, state=state)  # type: ignore[arg-type]
    compare(case.id, run_case(case, Consumer), run_case(case, SafeConsumer))
