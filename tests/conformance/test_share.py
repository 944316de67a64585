"""S1: ``SafeShareConsumer`` against the installed ``confluent_kafka.ShareConsumer``, and
``SafeDeserializingShareConsumer`` against ``DeserializingShareConsumer``, without a broker.

Every case runs on both classes, in both acknowledgement modes, with the same config and arguments,
and must end the same way: the same return value, or the same exception type with exactly
upstream's ``args``. A new confluent-kafka release that changes its share consumer (a Preview)
changes the oracle, so this fails until SafeShareConsumer follows it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, DeserializingShareConsumer, Message, ShareConsumer

from safeconsumer import SafeDeserializingShareConsumer, SafeShareConsumer

from .harness import BOOTSTRAP

Case = Callable[[ShareConsumer], object]

#: (upstream's class, ours, extra config): every case runs on each pair.
PAIRS = {
    "ShareConsumer": (ShareConsumer, SafeShareConsumer, {}),
    "DeserializingShareConsumer": (
        DeserializingShareConsumer,
        SafeDeserializingShareConsumer,
        {"value.deserializer": lambda v, _ctx: v, "key.deserializer": lambda k, _ctx: k},
    ),
}


def _conf(mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "conformance-share",
        "share.acknowledgement.mode": mode,
        "socket.timeout.ms": 1000,
        **extra,
    }


def _outcome(call: Callable[[], object]) -> tuple[str, object]:
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return ("raised", (type(exc).__name__, exc.args))
    if isinstance(value, list | dict | tuple | str | int | float | type(None)):
        return ("returned", value)
    return ("returned", type(value).__name__)


MESSAGE = Message(topic="t", partition=0, offset=0)

CASES: dict[str, Case] = {
    "poll before subscribe": lambda c: c.poll(0),
    "poll with a str timeout": lambda c: c.poll("1"),  # type: ignore[arg-type]
    "subscribe to a str": lambda c: c.subscribe("t"),  # type: ignore[arg-type]
    "subscribe with an empty name": lambda c: c.subscribe([""]),
    "subscribe with duplicates": lambda c: c.subscribe(["t", "t"]),
    "subscribe to nothing": lambda c: c.subscribe([]),
    "subscription before subscribe": lambda c: c.subscription(),
    "unsubscribe before subscribe": lambda c: c.unsubscribe(),
    "acknowledge a record never handed out": lambda c: c.acknowledge(MESSAGE),
    "acknowledge with a bad type": lambda c: c.acknowledge(MESSAGE, 7),  # type: ignore[arg-type]
    "acknowledge a str": lambda c: c.acknowledge("m"),  # type: ignore[arg-type]
    "acknowledge_offset never handed out": lambda c: c.acknowledge_offset("t", 0, 0),
    "acknowledge_offset with a negative offset": lambda c: c.acknowledge_offset("t", 0, -1),
    "acknowledge_offset with a str partition": lambda c: c.acknowledge_offset("t", "0", 0),  # type: ignore[arg-type]
    "acknowledge_offset REJECT": lambda c: c.acknowledge_offset("t", 0, 0, AcknowledgeType.REJECT),
    "commit_sync with nothing pending": lambda c: c.commit_sync(0.1),
    "commit_sync with a str timeout": lambda c: c.commit_sync("1"),  # type: ignore[arg-type]
    "commit_async with nothing pending": lambda c: c.commit_async(),
    "commit_async with an argument": lambda c: c.commit_async(1),  # type: ignore[call-arg]
    "an acknowledgement callback that is not callable": lambda c: c.set_acknowledgement_commit_callback(1),  # type: ignore[arg-type]
    "an acknowledgement callback cleared": lambda c: c.set_acknowledgement_commit_callback(None),
}


@pytest.mark.parametrize("pair", sorted(PAIRS))
@pytest.mark.parametrize("mode", ["implicit", "explicit"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
def test_each_call_ends_as_upstream_s(name: str, mode: str, closed: bool, pair: str) -> None:
    case = CASES[name]
    upstream, ours, extra = PAIRS[pair]
    outcomes = []
    for cls in (upstream, ours):
        c = cls(_conf(mode, **extra))
        if closed:
            c.close()
        try:
            outcomes.append(_outcome(partial(case, c)))
        finally:
            if not closed:
                c.close()
    assert outcomes[1] == outcomes[0], f"{name} ({mode}, {'closed' if closed else 'open'}): upstream {outcomes[0]}"


def _made_and_closed(cls: type[ShareConsumer], conf: dict[str, Any]) -> None:
    cls(conf).close()


@pytest.mark.parametrize(
    "conf",
    [
        {"auto.offset.reset": "earliest"},
        {"share.acknowledgement.mode": "sometimes"},
        {"enable.auto.commit": True},
        {"no.such.key": 1},
    ],
    ids=lambda c: next(iter(c)),
)
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_constructor_answers_as_upstream_s(conf: dict[str, Any], pair: str) -> None:
    upstream, ours, extra = PAIRS[pair]
    outcomes = [
        _outcome(partial(_made_and_closed, cls, {**_conf("implicit", **extra), **conf})) for cls in (upstream, ours)
    ]
    assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_context_manager_closes_as_upstream_s(pair: str) -> None:
    upstream, ours, extra = PAIRS[pair]
    outcomes = []
    for cls in (upstream, ours):
        with cls(_conf("explicit", **extra)) as c:
            assert c.subscription() == []
        outcomes.append((_outcome(partial(c.poll, 0)), _outcome(partial(c.subscribe, ["t"]))))
    assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("call", ["poll", "commit_sync", "commit_async", "subscribe"])
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_a_call_while_another_thread_is_inside_one_is_refused_as_upstream_s(pair: str, call: str) -> None:
    """A share consumer is single-threaded: while one thread is parked in poll(), upstream answers a
    call from another thread with ConcurrentModificationException (never waits for it); ours too, with
    upstream's message (the two threads' ids)."""
    import contextlib
    import threading
    import time

    from confluent_kafka import ConcurrentModificationException

    upstream, ours = PAIRS[pair][:2]
    calls: dict[str, Callable[[ShareConsumer], object]] = {
        "poll": lambda c: c.poll(0),
        "commit_sync": lambda c: c.commit_sync(0.1),
        "commit_async": lambda c: c.commit_async(),
        "subscribe": lambda c: c.subscribe(["t"]),  # (unsubscribe() landing between two polls would end them)
    }
    answers = []
    for cls in (upstream, ours):
        c = cls(_conf("explicit", **PAIRS[pair][2]))
        c.subscribe(["t"])
        stop = threading.Event()

        def hold(c: ShareConsumer = c, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                with contextlib.suppress(ConcurrentModificationException):  # the main thread got in first
                    c.poll(0.5)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            answer: object = None
            deadline = time.monotonic() + 10
            while answer is None and time.monotonic() < deadline:
                try:
                    calls[call](c)
                except ConcurrentModificationException as exc:
                    answer = exc.args[0].replace(str(holder.ident), "<holder>")
                time.sleep(0.01)
            answers.append(answer)
        finally:
            stop.set()
            holder.join(5)
            c.close()
    assert answers[0] is not None and answers[1] == answers[0]
