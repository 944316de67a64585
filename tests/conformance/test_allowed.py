"""The allow-list itself: every entry rests on table rows that exist, and its way back works.

What a row of the table cannot show is checked here directly: SafeConsumer's public names, its
keyword-only options, and the keepalive's threads (the only broker-less sign of the keepalive:
a background thread that polls the client, so the application's callbacks run there).
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from safeconsumer import SafeConsumer, delivery_stats

from .allowed import ADDITIONS, ALLOWED, DEPRECATED, OPTIONS, Allowed
from .cases import CASES_BY_ID, NO_ORACLE
from .harness import Case, CtorCase, base_config, compare, run_case, run_ctor_case, run_isolated

pytestmark = pytest.mark.timeout(60)

WAY_BACK = [(entry, case_id) for entry in ALLOWED for case_id in entry.way_back_cases]


def test_every_allowed_case_is_a_row_of_the_table() -> None:
    for entry in ALLOWED:
        for case_id in [*entry.cases, *entry.way_back_cases]:
            assert case_id in CASES_BY_ID, f"{entry.key}: {case_id!r} is not a row of cases.py"
            assert CASES_BY_ID[case_id] not in NO_ORACLE, f"{entry.key}: {case_id!r} has no oracle"
        assert entry.spec and entry.reason and entry.way_back, f"{entry.key}: say why, and the way back"


@pytest.mark.parametrize(("entry", "case_id"), WAY_BACK, ids=[f"{e.key} -> {c}" for e, c in WAY_BACK])
def test_way_back(entry: Allowed, case_id: str) -> None:
    """The documented way back to upstream's behaviour gives upstream's behaviour."""
    item = CASES_BY_ID[case_id]
    if isinstance(item, Case):
        compare(case_id, run_case(item, Consumer), run_case(item, SafeConsumer))
    else:
        compare(case_id, run_ctor_case(item, Consumer), run_ctor_case(item, SafeConsumer))


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_public_names() -> None:
    """SafeConsumer adds exactly SPEC's additions to upstream's names, and shadows none of them."""
    added = _public(SafeConsumer) - _public(Consumer) - set(DEPRECATED)
    assert not set(ADDITIONS) & _public(Consumer), "an addition would shadow an upstream name"
    assert added == set(ADDITIONS), (
        f"public names SPEC does not list: {sorted(added - set(ADDITIONS))}; "
        f"listed but missing: {sorted(set(ADDITIONS) - added)}"
    )


def test_names_outside_spec_are_deprecated_with_a_replacement() -> None:
    """``delivery_stats()`` and ``parked`` predate SPEC's list: each warns and names what replaces it."""
    assert set(DEPRECATED) <= _public(SafeConsumer)
    c = SafeConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"})
    try:
        with pytest.warns(DeprecationWarning, match=re.escape(DEPRECATED["delivery_stats"])):
            old_stats = c.delivery_stats()
        assert old_stats == delivery_stats(c)
        with pytest.warns(DeprecationWarning, match=re.escape(DEPRECATED["parked"])):
            old_parked = c.parked
        assert old_parked is c.pause_state().parked is False
        with c.keepalive():
            assert c.pause_state().parked
    finally:
        c.close()
    assert delivery_stats(c) == old_stats, "the final counts stay readable after close()"
    raw = Consumer({"group.id": "g"})
    try:
        with pytest.raises(TypeError, match="takes a SafeConsumer, got Consumer"):
            delivery_stats(raw)  # type: ignore[arg-type]
    finally:
        raw.close()


def test_options_are_keyword_only() -> None:
    """SPEC's typed options are exactly SafeConsumer's keyword-only parameters; the rest is config."""
    parameters = inspect.signature(SafeConsumer.__init__).parameters.values()
    keyword_only = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keyword_only == set(OPTIONS)
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters), "other keywords go to the config"


# -- I7: the way back is not subscribing; the drop is announced ------------------------------


@pytest.mark.parametrize("member", [True, False], ids=["group member", "never subscribed"])
def test_dropped_commits_are_announced_only_for_members(member: bool, caplog: pytest.LogCaptureFixture) -> None:
    """I7: a member's offsets for partitions it does not own are dropped *with a warning*; a
    consumer that never subscribed writes what it is told, so it has nothing to warn about."""
    consumer = SafeConsumer({**base_config(), "enable.auto.offset.store": False})
    try:
        if member:
            consumer.subscribe(["t"])
        else:
            consumer.assign([])
        with caplog.at_level(logging.WARNING, logger="safeconsumer"):
            consumer.commit(offsets=[TopicPartition("t", 0, 1)])
    finally:
        consumer.close()
    dropped = [r for r in caplog.records if r.name.startswith("safeconsumer") and "dropped" in r.getMessage()]
    assert bool(dropped) is member, [r.getMessage() for r in dropped]


# -- keepalive: off is upstream's threading; auto is the allowed difference -----------------

#: How long the application stays quiet in a keepalive scenario. ``keepalive_after`` is 50 ms:
#: the automatic keepalive parks after it and polls every 100 ms, while stats fire every 10 ms.
QUIET = 0.4


@dataclass
class Observed:
    """What a scenario saw of the application's callbacks and of threads."""

    outside_calls: list[str] = field(default_factory=list)
    """Threads on which a callback ran while the application was not inside a call."""
    raised_in_calls: list[str] = field(default_factory=list)
    """The application calls that raised a callback's exception."""
    lost_in_threads: list[str] = field(default_factory=list)
    """Callback exceptions that ended a thread instead of reaching the application."""
    new_threads: set[str] = field(default_factory=set)


@contextmanager
def _thread_exceptions(observed: Observed) -> Iterator[None]:
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        observed.lost_in_threads.append(f"{args.exc_type.__name__} on {getattr(args.thread, 'name', '?')}")

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def quiet_application(make: Callable[[dict[str, Any]], Consumer], *, raising: bool) -> Observed:
    """poll(0); stay quiet for QUIET seconds; poll(0); close(), with a stats_cb every 10 ms."""
    observed = Observed()
    in_call = threading.Event()

    def stats_cb(_stats: str) -> None:
        if not in_call.is_set():
            observed.outside_calls.append(threading.current_thread().name)
        if raising:
            raise LookupError("raised by the application's stats_cb")

    def app_call(name: str, fn: Callable[[], object]) -> None:
        in_call.set()
        try:
            fn()
        except LookupError:
            observed.raised_in_calls.append(name)
        finally:
            in_call.clear()

    before = {t.ident for t in threading.enumerate()}
    with _thread_exceptions(observed):
        consumer = make({**base_config(), "statistics.interval.ms": 10, "stats_cb": stats_cb})
        app_call("poll", lambda: consumer.poll(0))
        # A bounded observation of a quiet application: nothing is awaited, this is the scenario.
        threading.Event().wait(QUIET)
        observed.new_threads = {t.name for t in threading.enumerate() if t.ident not in before}
        app_call("poll", lambda: consumer.poll(0))
        app_call("close", consumer.close)
    return observed


def test_keepalive_off_is_upstreams_threading() -> None:
    """keepalive="off": no thread polls the client; callbacks run only inside the application's calls."""
    upstream = quiet_application(Consumer, raising=False)
    safe = quiet_application(lambda conf: SafeConsumer(conf, keepalive="off", keepalive_after=0.05), raising=False)
    assert (upstream.outside_calls, upstream.new_threads) == ([], set())
    assert (safe.outside_calls, safe.new_threads) == (upstream.outside_calls, upstream.new_threads)


def test_keepalive_auto_is_the_allowed_difference() -> None:
    """The entry is not stale: the automatic keepalive does poll while the application is quiet."""
    observed = Observed()
    seen = threading.Event()

    def stats_cb(_stats: str) -> None:
        if threading.current_thread() is not threading.main_thread():
            observed.outside_calls.append(threading.current_thread().name)
            seen.set()

    consumer = SafeConsumer(
        {**base_config(), "statistics.interval.ms": 10, "stats_cb": stats_cb}, keepalive="auto", keepalive_after=0.05
    )
    try:
        consumer.poll(0)
        deadline = time.monotonic() + 10
        while not seen.wait(0.05) and time.monotonic() < deadline:
            pass
    finally:
        consumer.close()
    assert observed.outside_calls, "the automatic keepalive never polled while the application was quiet"


def test_keepalive_does_not_take_callback_exceptions() -> None:
    """What the keepalive allowance does not cover: an exception the application's callback raises
    must reach the application, as upstream raises it from the application's next call; on the
    keepalive thread it would end that thread (and the keepalive with it) unseen."""
    upstream = quiet_application(Consumer, raising=True)
    safe = quiet_application(lambda conf: SafeConsumer(conf, keepalive="auto", keepalive_after=0.05), raising=True)
    assert upstream.lost_in_threads == []
    assert safe.lost_in_threads == upstream.lost_in_threads, (
        f"callback exceptions lost on threads: {safe.lost_in_threads}; "
        f"raised to the application: {safe.raised_in_calls} (upstream: {upstream.raised_in_calls})"
    )


# -- no oracle ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", NO_ORACLE, ids=[case.id for case in NO_ORACLE])
def test_upstream_still_crashes(case: Case | CtorCase) -> None:
    """These inputs crash upstream, so the table cannot hold them; the day a release fixes one,
    this fails and the case moves into the table."""
    result = run_isolated(case.id, Consumer)
    assert result.outcome.kind == "crash", f"upstream no longer crashes: {result!r}; move the case into the table"


@pytest.mark.parametrize(
    "case",
    [c for c in NO_ORACLE if "c.commit(" in c.id or "c.store_offsets(" in c.id],
    ids=lambda case: case.id,
)
def test_safeconsumer_refuses_what_crashes_upstream_with_an_invalid_argument(case: Case | CtorCase) -> None:
    """Where upstream crashes (a topic-less message committed or stored), SafeConsumer raises
    upstream's error for an invalid argument of that call, and a note says what was wrong."""
    outcome = run_isolated(case.id, SafeConsumer).outcome
    assert outcome.kind == "raise", outcome
    assert outcome.type == "cimpl.KafkaException", outcome
    failed = "StoreOffsets" if "c.store_offsets(" in case.id else "Commit"
    assert "code=_INVALID_ARG" in outcome.message, outcome
    assert f'str="{failed} failed: Local: Invalid argument or configuration"' in outcome.message, outcome
    assert any("no topic" in note for note in outcome.notes), outcome


#: Each of SPEC's additions, called as an application would (keepalive() is entered).
_ADDITION_CALLS: dict[str, Callable[[Any], object]] = {
    "handle": lambda c: c.handle(Message(topic="t", partition=0, offset=1), lambda m: m),
    "keepalive": lambda c: c.keepalive().__enter__(),
    "owns": lambda c: c.owns(("t", 0)),
    "pause_state": lambda c: c.pause_state(),
    "pause_topics": lambda c: c.pause_topics(["t"]),
    "paused": lambda c: c.paused(),
    "process": lambda c: c.process(Message(topic="t", partition=0, offset=1)),
    "resume_topics": lambda c: c.resume_topics(["t"]),
}


class _Uninitialised(SafeConsumer):
    def __init__(self) -> None:
        pass


@pytest.mark.parametrize("state", ["closed", "uninit"])
@pytest.mark.parametrize("name", sorted(_ADDITION_CALLS))
def test_additions_on_a_stopped_consumer_raise_upstreams_closed_error(name: str, state: str) -> None:
    """As upstream's own methods do after close() (and on a subclass that skipped __init__):
    a RuntimeError whose args are exactly upstream's ("Consumer closed",), with a note naming the call."""
    assert set(_ADDITION_CALLS) == set(ADDITIONS), "every addition has a call here"
    if state == "closed":
        consumer: SafeConsumer = SafeConsumer(base_config())
        consumer.close()
    else:
        consumer = _Uninitialised()
    with pytest.raises(RuntimeError) as raised:
        _ADDITION_CALLS[name](consumer)
    notes = getattr(raised.value, "__notes__", [])
    assert raised.value.args == ("Consumer closed",) and any(f"{name}()" in note for note in notes), (
        raised.value.args,
        notes,
    )


def test_delivery_stats_reads_final_counts_after_close_and_refuses_an_uninitialised_consumer() -> None:
    consumer = SafeConsumer(base_config())
    consumer.close()
    assert delivery_stats(consumer).delivered == 0
    with pytest.raises(RuntimeError, match=r"^Consumer closed\n.*delivery_stats\(\)") as raised:
        delivery_stats(_Uninitialised())
    assert raised.value.args == ("Consumer closed",)
