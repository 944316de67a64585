"""The table: argument cases for every public method of ``Consumer`` and for its constructor.

Each case is a Python expression, compiled once, whose text is the case's id: what the report
says is exactly what ran. In a method case ``c`` is a fresh consumer (``base_config()`` plus the
case's config), after the case's setup; in a constructor case ``K`` is the class and ``CONF`` a
fresh copy of ``base_config()``. Arguments are built inside the expression, anew for each class:
``TopicPartition`` and ``Message`` are mutable.

Case ids read ``[state] [config] [setup] | expression``:

- state: ``closed`` (close() was called first) or ``uninit`` (an instance of a subclass whose
  ``__init__`` does not call ``super().__init__()``); open otherwise;
- config: ``no-auto-store`` is ``enable.auto.offset.store=False``;
- setup (calls both classes answer the same way): ``assigned`` is ``assign([TP("t", 0), TP("t", 1)])``,
  ``incremental`` is ``incremental_assign([TP("t", 0)])``, ``subscribed`` is ``subscribe(["t"])``
  (a group member), ``paused`` is ``assigned`` then ``pause([TP("t", 0)])``.

Only outcomes that do not depend on a broker answering are here: timeouts are 0 where a call
would wait for one. Without a broker an asynchronous commit fails after ``session.timeout.ms``
(20 ms in ``base_config()``), a synchronous one after a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import CodeType, MappingProxyType
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from .harness import Case, CtorCase, State, base_config

TP = TopicPartition


def record(topic: str = "t", partition: int = 0, offset: int = 5) -> Message:
    """A record as poll() returns it (topic, partition and offset set)."""
    return Message(topic=topic, partition=partition, offset=offset, value=b"v")


def error_event(code: int = KafkaError._PARTITION_EOF, *, fatal: bool = False, **fields: Any) -> Message:
    """An error event as poll() returns it: a Message whose error() is set."""
    return Message(error=KafkaError(code, fatal=fatal), **fields)


def callback(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """A rebalance callback that does nothing."""


def with_block(c: Consumer) -> bool:
    """``with c as x:`` - whether ``x`` is ``c``; the block's exit closes it."""
    with c as entered:
        return entered is c


def with_block_raising(c: Consumer) -> str:
    """An exception leaving ``with c:`` propagates (``__exit__`` does not swallow it)."""
    try:
        with c:
            raise LookupError("raised inside the block")
    except LookupError as exc:
        return str(exc)


def poll_after_with_block(c: Consumer) -> object:
    with c:
        pass
    return c.poll(0)


NAMESPACE: Mapping[str, object] = MappingProxyType(
    {
        "TP": TP,
        "Message": Message,
        "KafkaError": KafkaError,
        "MappingProxyType": MappingProxyType,
        "logging": logging,
        "record": record,
        "error_event": error_event,
        "callback": callback,
        "with_block": with_block,
        "with_block_raising": with_block_raising,
        "poll_after_with_block": poll_after_with_block,
    }
)

SETUPS: Mapping[str, str] = {
    "assigned": 'c.assign([TP("t", 0), TP("t", 1)])',
    "incremental": 'c.incremental_assign([TP("t", 0)])',
    "subscribed": 'c.subscribe(["t"])',
    "paused": 'c.assign([TP("t", 0), TP("t", 1)]) or c.pause([TP("t", 0)])',
}

CONFIGS: Mapping[str, Mapping[str, object]] = {
    "no-auto-store": {"enable.auto.offset.store": False},
}


def _compiled(code: str) -> CodeType:
    return compile(code, f"<case {code}>", "eval")


def _method_call(code: str) -> Callable[[Consumer], object]:
    compiled = _compiled(code)

    def call(c: Consumer) -> object:
        return eval(compiled, {**NAMESPACE, "c": c})

    return call


def _ctor_call(code: str) -> Callable[[type[Consumer]], object]:
    compiled = _compiled(code)

    def build(cls: type[Consumer]) -> object:
        return eval(compiled, {**NAMESPACE, "K": cls, "CONF": base_config()})

    return build


def case_id(code: str, *, state: State = "open", conf: str | None = None, setup: str | None = None) -> str:
    labels = [label for label in (None if state == "open" else state, conf, setup) if label]
    return f"{' '.join(labels)} | {code}" if labels else code


CASES: list[Case] = []
CTOR_CASES: list[CtorCase] = []

#: Calls that crash upstream itself (a C-level bug, not a behaviour to copy): the table cannot
#: hold them. ``test_allowed.test_upstream_still_crashes`` checks that they still do: the day a
#: release fixes one, it fails and the case moves into the table.
NO_ORACLE: list[Case | CtorCase] = []


def make_case(
    method: str,
    code: str,
    *,
    setup: str | None = None,
    conf: str | None = None,
    state: State = "open",
    isolated: bool = False,
) -> Case:
    """The case running ``code``; ``setup`` and ``conf`` name entries of :data:`SETUPS` and :data:`CONFIGS`."""
    return Case(
        id=case_id(code, state=state, conf=conf, setup=setup),
        method=method,
        call=_method_call(code),
        setup=None if setup is None else _method_call(SETUPS[setup]),
        conf=CONFIGS[conf] if conf is not None else {},
        state=state,
        isolated=isolated,
    )


def add(
    method: str,
    *codes: str,
    setup: str | None = None,
    conf: str | None = None,
    state: State = "open",
    isolated: bool = False,
    no_oracle: bool = False,
) -> None:
    """Add a case per expression; ``no_oracle``: upstream crashes on it (see :data:`NO_ORACLE`)."""
    for code in codes:
        case = make_case(method, code, setup=setup, conf=conf, state=state, isolated=isolated or no_oracle)
        if no_oracle:
            NO_ORACLE.append(case)
        elif all(existing.id != case.id for existing in CASES):  # a canonical call may be listed twice
            CASES.append(case)


def ctor(*codes: str, no_oracle: bool = False) -> None:
    for code in codes:
        case = CtorCase(id=code, build=_ctor_call(code), isolated=no_oracle)
        (NO_ORACLE if no_oracle else CTOR_CASES).append(case)


# -- wrong types, shared by methods --------------------------------------------------------

#: Not a list of TopicPartition.
BAD_LISTS = (
    "None",
    '"t"',
    "1",
    'TP("t", 0)',
    '(TP("t", 0),)',
    '{TP("t", 0)}',
    'iter([TP("t", 0)])',
    '["t"]',
    "[None]",
    '[("t", 0)]',
    '[TP("t", 0), "t"]',
    '{"t": 0}',
)
#: Not a TopicPartition.
BAD_PARTITIONS = ("None", '"t"', "1", '[TP("t", 0)]', '("t", 0)')
#: Not a number of seconds (never negative or NaN: those wait forever).
BAD_TIMEOUTS = ('"x"', "None", "[]", 'b"0"')

# -- the constructor -------------------------------------------------------------------------

ctor(
    "K(CONF)",
    "K()",
    "K(None)",
    "K({})",
    'K("bootstrap.servers=127.0.0.1:1")',
    "K([CONF])",
    "K(MappingProxyType(CONF))",
    "K(CONF, CONF)",
    "K(CONF, None)",
    "K(conf=CONF)",
    "K(config=CONF)",
    "K(**CONF)",
    'K({**CONF, "group.id": "other"})',
    'K(CONF, **{"group.id": "other"})',
    'K({"bootstrap.servers": CONF["bootstrap.servers"]}, **{"group.id": "g"})',
    'K({"bootstrap.servers": CONF["bootstrap.servers"]})',
    "K(CONF, group_id='g')",
    "K(CONF, foo=1)",
    "K(CONF, keepalive_afterr=1.0)",
    'K(CONF, logger=logging.getLogger("conformance"))',
    'K({**CONF, "nope": 1})',
    "K({**CONF, 1: 2})",
    'K({**CONF, "group.id": 5})',
    'K({**CONF, "max.poll.interval.ms": "abc"})',
    'K({**CONF, "max.poll.interval.ms": 0})',
    'K({**CONF, "max.poll.interval.ms": -5})',
    'K({**CONF, "max.poll.interval.ms": 100})',
    'K({**CONF, "max.poll.interval.ms": "1000"})',
    'K({**CONF, "max.poll.interval.ms": 1000.5})',
    'K({**CONF, "max.poll.interval.ms": None})',
    'K({**CONF, "enable.auto.offset.store": "bogus"})',
    # Two bad settings: librdkafka's first complaint wins, whichever key SafeConsumer looks at.
    'K({**CONF, "nope": 1, "enable.auto.offset.store": "bogus"})',
    'K({**CONF, "enable.auto.offset.store": "bogus", "nope": 1})',
    'K({**CONF, "max.poll.interval.ms": "abc", "enable.auto.offset.store": "bogus"})',
    'K({**CONF, "enable.auto.offset.store": "", "enable.auto.commit": "bogus"})',
    'K({**CONF, "enable.auto.offset.store": "false"})',
    'K({**CONF, "enable.auto.offset.store": 0})',
    'K({**CONF, "enable.auto.offset.store": None})',
    'K({**CONF, "enable.auto.commit": "bogus"})',
    'K({**CONF, "group.protocol": "bogus"})',
    'K({**CONF, "partition.assignment.strategy": "bogus"})',
    'K({**CONF, "error_cb": 1})',
    'K({**CONF, "stats_cb": 1})',
    'K({**CONF, "throttle_cb": 1})',
    'K({**CONF, "on_commit": 1})',
    'K({**CONF, "keepalive": "off"})',
    'K({**CONF, "on_fatal": "exit"})',
    # SafeConsumer's typed keyword-only options (SPEC additions: see allowed.py).
    'K(CONF, keepalive="off")',
    'K(CONF, keepalive="auto")',
    "K(CONF, keepalive_after=1.0)",
    "K(CONF, keepalive_max=60.0)",
    'K(CONF, on_fatal="raise")',
    "K(CONF, commit_retry=None)",
    "K(CONF, meter_provider=None)",
    "K(CONF, tracer_provider=None)",
    "K(CONF, explain_rebalances=False)",
    "K(CONF, fetch_memory_budget=None)",
    "K(CONF, auth_failure_timeout=None)",
    "K(CONF, migration_timeout=None)",
    "K(CONF, poison=None)",
)

# -- the methods, one canonical call each: run open, closed and uninitialised ---------------

VALID: Mapping[str, tuple[str | None, str]] = {
    "assign": (None, 'c.assign([TP("t", 0)])'),
    "assignment": ("assigned", "c.assignment()"),
    "close": (None, "c.close()"),
    "cluster_id": (None, "c.cluster_id(timeout=0)"),
    "commit": (None, "c.commit()"),
    "committed": (None, 'c.committed([TP("t", 0)], timeout=0)'),
    "consume": (None, "c.consume(1, 0)"),
    "consumer_group_metadata": (None, "c.consumer_group_metadata()"),
    "get_watermark_offsets": (None, 'c.get_watermark_offsets(TP("t", 0), cached=True)'),
    "incremental_assign": (None, 'c.incremental_assign([TP("t", 0)])'),
    "incremental_unassign": ("incremental", 'c.incremental_unassign([TP("t", 0)])'),
    "list_topics": (None, "c.list_topics(timeout=0)"),
    "memberid": (None, "c.memberid()"),
    "offsets_for_times": (None, 'c.offsets_for_times([TP("t", 0, 1000)], timeout=0)'),
    "pause": ("assigned", 'c.pause([TP("t", 0)])'),
    "poll": (None, "c.poll(0)"),
    "position": ("assigned", 'c.position([TP("t", 0)])'),
    "resume": ("paused", 'c.resume([TP("t", 0)])'),
    "seek": ("assigned", 'c.seek(TP("t", 0, 3))'),
    "set_sasl_credentials": (None, 'c.set_sasl_credentials("user", "secret")'),
    "store_offsets": ("assigned", 'c.store_offsets(offsets=[TP("t", 0, 1)])'),
    "subscribe": (None, 'c.subscribe(["t"])'),
    "unassign": ("assigned", "c.unassign()"),
    "unsubscribe": ("subscribed", "c.unsubscribe()"),
    "__enter__": (None, "c.__enter__()"),
    "__exit__": (None, "c.__exit__(None, None, None)"),
}

#: A wrong call per method, also run after close(): does the argument check or the closed check come first?
WRONG: Mapping[str, str] = {
    "assign": 'c.assign("t")',
    "assignment": "c.assignment(1)",
    "close": "c.close(1)",
    "cluster_id": 'c.cluster_id("x")',
    "commit": 'c.commit("x")',
    "committed": 'c.committed("t", timeout=0)',
    "consume": "c.consume(-100)",
    "consumer_group_metadata": "c.consumer_group_metadata(1)",
    "get_watermark_offsets": 'c.get_watermark_offsets("t", cached=True)',
    "incremental_assign": 'c.incremental_assign("t")',
    "incremental_unassign": 'c.incremental_unassign("t")',
    "list_topics": "c.list_topics(1, timeout=0)",
    "memberid": "c.memberid(1)",
    "offsets_for_times": 'c.offsets_for_times("t", timeout=0)',
    "pause": 'c.pause("t")',
    "poll": 'c.poll("x")',
    "position": 'c.position("t")',
    "resume": 'c.resume("t")',
    "seek": 'c.seek("t")',
    "set_sasl_credentials": 'c.set_sasl_credentials("user")',
    "store_offsets": "c.store_offsets()",
    "subscribe": 'c.subscribe("t")',
    "unassign": "c.unassign(1)",
    "unsubscribe": "c.unsubscribe(1)",
    "__enter__": "c.__enter__(1)",
    "__exit__": "c.__exit__()",
}

for _method, (_setup, _code) in VALID.items():
    add(_method, _code, setup=_setup)
    add(_method, _code, state="closed")
    add(_method, WRONG[_method], state="closed")
    add(_method, _code, state="uninit")

# -- per method: valid and wrong values, missing, extra, keyword vs positional -------------

add(
    "assign",
    'c.assign([TP("t", 0, 5), TP("t", 1)])',
    "c.assign([])",
    'c.assign([TP("t", 0, -2)])',
    'c.assign([TP("t", 0, 3, metadata="m", leader_epoch=1)])',
    'c.assign([TP("t", -1)])',
    'c.assign([TP("", 0)])',
    'c.assign([TP("t", 0), TP("t", 0)])',
    'c.assign([TP("t", 0)]) or c.assignment()',
    'c.assign(partitions=[TP("t", 0)])',
    "c.assign()",
    'c.assign([TP("t", 0)], 1)',
    'c.assign([TP("t", 0)], bogus=1)',
    *(f"c.assign({bad})" for bad in BAD_LISTS),
)
add("assign", 'c.assign([TP("u", 0)]) or c.assignment()', setup="assigned")
add("assign", 'c.assign([TP("t", 0)]) or c.assignment()', setup="subscribed")

add(
    "assignment",
    "c.assignment()",
    "c.assignment(1)",
    "c.assignment(bogus=1)",
)
add("assignment", "c.unassign() or c.assignment()", setup="assigned")
add("assignment", "c.assignment()", setup="incremental")
add("assignment", "c.assignment()", setup="subscribed")

add("close", "c.close() or c.close()", "c.close(bogus=1)")
add("close", "c.close()", setup="assigned")
add("close", "c.close()", setup="subscribed")
add("close", "c.close()", setup="paused")

add(
    "commit",
    "c.commit(asynchronous=True)",
    "c.commit(asynchronous=False)",
    "c.commit(None)",
    "c.commit(None, None)",
    "c.commit(None, None, True)",
    "c.commit(message=None, offsets=None)",
    "c.commit(asynchronous=None)",
    "c.commit(asynchronous=0)",
    'c.commit(asynchronous="yes")',
    "c.commit(record())",
    "c.commit(message=record())",
    "c.commit(record(), asynchronous=False)",
    'c.commit(offsets=[TP("t", 0, 1)])',
    'c.commit(None, [TP("t", 0, 1)])',
    'c.commit(offsets=[TP("t", 0, 1)], asynchronous=False)',
    "c.commit(offsets=[])",
    "c.commit(offsets=[], asynchronous=False)",
    'c.commit(offsets=[TP("t", 0)])',
    'c.commit(offsets=[TP("t", -1, 1)])',
    'c.commit(offsets=[TP("", 0, 1)])',
    'c.commit(offsets=[TP("t", 0, 1, metadata="m")])',
    'c.commit(offsets=[TP("t", 0, 1, leader_epoch=2)])',
    'c.commit(record(), [TP("t", 0, 1)])',
    'c.commit(message=record(), offsets=[TP("t", 0, 1)], asynchronous=False)',
    # error events and partial messages as input
    "c.commit(error_event())",
    "c.commit(message=error_event())",
    'c.commit(error_event(KafkaError.OFFSET_OUT_OF_RANGE, topic="t", partition=0, offset=5))',
    "c.commit(error_event(KafkaError._FATAL, fatal=True))",
    "c.commit(error_event(), asynchronous=False)",
    'c.commit(Message(topic="t"))',
    'c.commit(Message(topic="t", partition=0))',
    'c.commit(Message(topic="t", offset=5))',
    "c.commit(Message(), asynchronous=False)",
    # wrong types, extra
    'c.commit("x")',
    "c.commit(1)",
    'c.commit(TP("t", 0, 1))',
    'c.commit(offsets="x")',
    'c.commit(offsets=TP("t", 0, 1))',
    'c.commit(offsets=(TP("t", 0, 1),))',
    'c.commit(offsets=["x"])',
    "c.commit(offsets=[None])",
    "c.commit(None, None, True, 1)",
    "c.commit(bogus=1)",
)
add(
    "commit",
    "c.commit(asynchronous=False)",
    'c.commit(offsets=[TP("t", 0, 1)])',
    "c.commit(record())",
    'c.commit(offsets=[TP("u", 0, 1)])',
    'c.commit(record(topic="u"))',
    'c.commit(offsets=[TP("u", 0, 1)], asynchronous=False)',
    setup="assigned",
)
add(
    "commit",
    'c.store_offsets(offsets=[TP("t", 0, 1)]) or c.commit()',
    'c.store_offsets(offsets=[TP("t", 0, 1)]) or c.commit(offsets=[TP("t", 1, 7)])',
    setup="assigned",
    conf="no-auto-store",
)
# A group member (subscribed) without an assignment: I7 applies (allowed.py).
add(
    "commit",
    "c.commit()",
    "c.commit(asynchronous=False)",
    'c.commit(offsets=[TP("t", 0, 1)])',
    "c.commit(record())",
    'c.commit(offsets=[TP("t", 0, 1)], asynchronous=False)',
    "c.commit(error_event())",
    setup="subscribed",
)

add(
    "committed",
    'c.committed([TP("t", 0)], 0)',
    "c.committed([], timeout=0)",
    'c.committed([TP("t", -1)], timeout=0)',
    'c.committed(partitions=[TP("t", 0)], timeout=0)',
    "c.committed()",
    'c.committed([TP("t", 0)], 0, 1)',
    'c.committed([TP("t", 0)], timeout=0, bogus=1)',
    *(f'c.committed([TP("t", 0)], timeout={bad})' for bad in BAD_TIMEOUTS),
    *(f"c.committed({bad}, timeout=0)" for bad in BAD_LISTS),
)
add("committed", 'c.committed([TP("t", 0)], timeout=0)', setup="assigned")

add(
    "consume",
    "c.consume(0, 0)",
    "c.consume(100, 0)",
    "c.consume(1000000, 0)",
    "c.consume(1, 0.0)",
    "c.consume(1, 0.001)",
    "c.consume(1, -0.0)",
    "c.consume(True, 0)",
    "c.consume(False, 0)",
    "c.consume(2**63, 0)",
    "c.consume(num_messages=1, timeout=0)",
    "c.consume(timeout=0)",
    "c.consume(-1, 0)",
    "c.consume(-100, 0)",
    "c.consume(-100, -1)",
    "c.consume(num_messages=-1, timeout=0)",
    "c.consume(1000001, 0)",
    "c.consume(-(2**63), 0)",
    'c.consume("1", 0)',
    "c.consume(1.5, 0)",
    "c.consume(None, 0)",
    *(f"c.consume(1, {bad})" for bad in BAD_TIMEOUTS),
    "c.consume(1, 0, 1)",
    "c.consume(1, 0, bogus=1)",
    "c.consume(num=1, timeout=0)",
)
add("consume", "c.consume(10, 0)", "c.consume(-1, 0)", setup="assigned")
add("consume", "c.consume(10, 0)", "c.consume(-1, 0)", setup="paused")
add("consume", "c.consume(10, 0)", "c.consume(-1, 0)", setup="subscribed")

add("consumer_group_metadata", "c.consumer_group_metadata(1)", "c.consumer_group_metadata(bogus=1)")
add("consumer_group_metadata", "c.consumer_group_metadata()", setup="subscribed")

add(
    "get_watermark_offsets",
    'c.get_watermark_offsets(TP("t", 0), timeout=0)',
    'c.get_watermark_offsets(TP("t", 0), 0)',
    'c.get_watermark_offsets(TP("t", 0), 0, True)',
    'c.get_watermark_offsets(TP("t", 0), cached=1)',
    'c.get_watermark_offsets(TP("t", 0), cached="yes")',
    'c.get_watermark_offsets(TP("t", -1), cached=True)',
    'c.get_watermark_offsets(partition=TP("t", 0), timeout=0, cached=True)',
    "c.get_watermark_offsets()",
    'c.get_watermark_offsets(TP("t", 0), 0, True, 1)',
    'c.get_watermark_offsets(TP("t", 0), cached=True, bogus=1)',
    *(f'c.get_watermark_offsets(TP("t", 0), timeout={bad})' for bad in BAD_TIMEOUTS),
    *(f"c.get_watermark_offsets({bad}, cached=True)" for bad in BAD_PARTITIONS),
)
add("get_watermark_offsets", 'c.get_watermark_offsets(TP("t", 0), cached=True)', setup="assigned")

add(
    "incremental_assign",
    "c.incremental_assign([])",
    'c.incremental_assign([TP("t", 0, 5), TP("t", 1)]) or c.assignment()',
    'c.incremental_assign([TP("t", -1)])',
    'c.incremental_assign([TP("t", 0), TP("t", 0)])',
    'c.incremental_assign(partitions=[TP("t", 0)])',
    "c.incremental_assign()",
    'c.incremental_assign([TP("t", 0)], 1)',
    *(f"c.incremental_assign({bad})" for bad in BAD_LISTS),
)
add(
    "incremental_assign",
    'c.incremental_assign([TP("t", 0)])',
    'c.incremental_assign([TP("t", 1)]) or c.assignment()',
    setup="incremental",
)
add("incremental_assign", 'c.incremental_assign([TP("u", 0)]) or c.assignment()', setup="assigned")

add(
    "incremental_unassign",
    'c.incremental_unassign([TP("t", 0)])',
    "c.incremental_unassign([])",
    'c.incremental_unassign(partitions=[TP("t", 0)])',
    "c.incremental_unassign()",
    'c.incremental_unassign([TP("t", 0)], 1)',
    *(f"c.incremental_unassign({bad})" for bad in BAD_LISTS),
)
add(
    "incremental_unassign",
    'c.incremental_unassign([TP("t", 0)]) or c.assignment()',
    'c.incremental_unassign([TP("t", 1)])',
    setup="incremental",
)
add("incremental_unassign", 'c.incremental_unassign([TP("t", 1)]) or c.assignment()', setup="assigned")

add(
    "list_topics",
    'c.list_topics("t", timeout=0)',
    "c.list_topics(None, 0)",
    'c.list_topics(topic="t", timeout=0)',
    'c.list_topics(topic="", timeout=0)',
    'c.list_topics(b"t", timeout=0)',
    *(f'c.list_topics("t", timeout={bad})' for bad in BAD_TIMEOUTS),
    'c.list_topics("t", 0, 1)',
    "c.list_topics(timeout=0, bogus=1)",
)

add("memberid", "c.memberid(1)", "c.memberid(bogus=1)")
add("memberid", "c.memberid()", setup="subscribed")

add(
    "offsets_for_times",
    "c.offsets_for_times([], timeout=0)",
    'c.offsets_for_times([TP("t", 0, 1000)], 0)',
    'c.offsets_for_times(partitions=[TP("t", 0, 1000)], timeout=0)',
    "c.offsets_for_times()",
    'c.offsets_for_times([TP("t", 0, 1000)], 0, 1)',
    *(f'c.offsets_for_times([TP("t", 0, 1000)], timeout={bad})' for bad in BAD_TIMEOUTS),
    *(f"c.offsets_for_times({bad}, timeout=0)" for bad in BAD_LISTS),
)

for _method, _setup in (("pause", "assigned"), ("resume", "paused")):
    add(
        _method,
        f'c.{_method}([TP("t", 0), TP("t", 1)])',
        f"c.{_method}([])",
        f'c.{_method}([TP("u", 0)])',
        f'c.{_method}([TP("t", -1)])',
        f'c.{_method}([TP("", 0)])',
        f'c.{_method}([TP("t", 0, 5)])',
        f'c.{_method}([TP("t", 0), TP("t", 0)])',
        f'c.{_method}(partitions=[TP("t", 0)])',
        f'c.{_method}([TP("t", 0)], 1)',
        f'c.{_method}([TP("t", 0)], bogus=1)',
        *(f"c.{_method}({bad})" for bad in BAD_LISTS),
        setup=_setup,
    )
    add(_method, f'c.{_method}([TP("t", 0)])', f'c.{_method}([TP("t", -1)])', f"c.{_method}(None)")
    add(_method, f'c.{_method}([TP("t", 0)])', setup="subscribed")
    # No argument: SafeConsumer's consumer-level mark (a SPEC addition: see allowed.py).
    add(_method, f"c.{_method}()")
    add(_method, f"c.{_method}()", setup=_setup)
    add(_method, f"c.{_method}()", state="closed")
    add(_method, f"c.{_method}()", state="uninit")
add("pause", 'c.pause([TP("t", 0)]) or c.resume([TP("t", 0)])', setup="assigned")

add(
    "poll",
    "c.poll(0.0)",
    "c.poll(0.001)",
    "c.poll(-0.0)",
    "c.poll(False)",
    "c.poll(timeout=0)",
    'c.poll("x")',
    "c.poll([])",
    'c.poll(b"0")',
    "c.poll(0, 0)",
    "c.poll(0, bogus=1)",
    "c.poll(tmo=0)",
)
# poll(None): upstream refuses it; in a subprocess, so a wrapper taking it for "no timeout" fails, not hangs.
add("poll", "c.poll(None)", "c.poll(timeout=None)", isolated=True)
add("poll", "c.poll(0)", setup="assigned")
add("poll", "c.poll(0)", setup="paused")
add("poll", "c.poll(0)", setup="subscribed")

add(
    "position",
    'c.position([TP("t", 0)])',
    "c.position([])",
    'c.position([TP("t", -1)])',
    'c.position(partitions=[TP("t", 0)])',
    "c.position()",
    'c.position([TP("t", 0)], 1)',
    *(f"c.position({bad})" for bad in BAD_LISTS),
)
add("position", 'c.position([TP("t", 0), TP("t", 1), TP("u", 0)])', setup="assigned")
add("position", 'c.seek(TP("t", 0, 3)) or c.position([TP("t", 0)])', setup="assigned")

add(
    "seek",
    'c.seek(TP("t", 0, 3))',
    'c.seek(TP("t", 0))',
)
add(
    "seek",
    'c.seek(TP("t", 0))',
    'c.seek(TP("t", 0, -2))',
    'c.seek(TP("t", 1, 3))',
    'c.seek(TP("t", 0, 3, leader_epoch=1))',
    'c.seek(TP("u", 0, 3))',
    'c.seek(TP("t", -1, 3))',
    'c.seek(partition=TP("t", 0, 3))',
    "c.seek()",
    'c.seek(TP("t", 0, 3), 1)',
    *(f"c.seek({bad})" for bad in BAD_PARTITIONS),
    setup="assigned",
)

STORE_CALLS = (
    "c.store_offsets(record())",
    "c.store_offsets(message=record())",
    'c.store_offsets(record(topic="u"))',
    'c.store_offsets(offsets=[TP("t", 0, 1)])',
    'c.store_offsets(None, [TP("t", 0, 1)])',
    'c.store_offsets(offsets=[TP("t", 0, 1), TP("t", 1, 7)])',
    'c.store_offsets(offsets=[TP("u", 0, 1)])',
    'c.store_offsets(offsets=[TP("t", 0, 1), TP("u", 0, 1)])',
    "c.store_offsets(offsets=[])",
    'c.store_offsets(offsets=[TP("t", 0)])',
    'c.store_offsets(offsets=[TP("t", 0, 1, metadata="m")])',
    'c.store_offsets(offsets=[TP("t", 0, 1, leader_epoch=2)])',
    'c.store_offsets(offsets=[TP("t", -1, 1)])',
    'c.store_offsets(offsets=[TP("", 0, 1)])',
    # error events and partial messages as input
    "c.store_offsets(error_event())",
    "c.store_offsets(message=error_event())",
    'c.store_offsets(error_event(KafkaError.OFFSET_OUT_OF_RANGE, topic="t", partition=0, offset=5))',
    'c.store_offsets(Message(topic="t"))',
    'c.store_offsets(Message(topic="t", partition=0))',
    'c.store_offsets(Message(topic="t", offset=5))',
)
#: Partial messages that crash upstream with enable.auto.offset.store=False while partitions are
#: assigned (see NO_ORACLE).
STORE_CRASHING = ("c.store_offsets(Message())", "c.store_offsets(Message(partition=0, offset=5))")

add("store_offsets", *STORE_CALLS, *STORE_CRASHING)
add("store_offsets", *STORE_CALLS, *STORE_CRASHING, setup="assigned")
# With nothing assigned upstream answers a topic-less message itself ("Unknown partition").
add("store_offsets", *STORE_CALLS, *STORE_CRASHING, conf="no-auto-store")
add("store_offsets", *STORE_CALLS, conf="no-auto-store", setup="assigned")
add("store_offsets", *STORE_CALLS, *STORE_CRASHING, conf="no-auto-store", setup="subscribed")
add(
    "store_offsets",
    "c.store_offsets(None)",
    "c.store_offsets(None, None)",
    'c.store_offsets(record(), [TP("t", 0, 1)])',
    'c.store_offsets(message=record(), offsets=[TP("t", 0, 1)])',
    'c.store_offsets("x")',
    "c.store_offsets(1)",
    'c.store_offsets(TP("t", 0, 1))',
    'c.store_offsets(offsets="x")',
    'c.store_offsets(offsets=TP("t", 0, 1))',
    'c.store_offsets(offsets=(TP("t", 0, 1),))',
    'c.store_offsets(offsets=["x"])',
    "c.store_offsets(offsets=[None])",
    "c.store_offsets(record(), None, 1)",
    "c.store_offsets(bogus=1)",
)
add(
    "store_offsets",
    "c.store_offsets()",
    'c.store_offsets(record(), [TP("t", 0, 1)])',
    'c.store_offsets("x")',
    'c.store_offsets(offsets=(TP("t", 0, 1),))',
    conf="no-auto-store",
    setup="assigned",
)

add(
    "subscribe",
    'c.subscribe(["t", "u"])',
    'c.subscribe(["^t.*"])',
    "c.subscribe([])",
    'c.subscribe([""])',
    'c.subscribe(["^["])',
    'c.subscribe(topics=["t"])',
    'c.subscribe(["t"], on_assign=callback)',
    'c.subscribe(["t"], callback, callback, callback)',
    'c.subscribe(["t"], on_assign=callback, on_revoke=callback, on_lost=callback)',
    'c.subscribe(["t"], None, None, None)',
    'c.subscribe(["t"], on_assign=1)',
    'c.subscribe(["t"], on_revoke="x")',
    'c.subscribe(["t"], on_lost=1)',
    'c.subscribe(["t"], on_assign=callback, on_lost=1)',
    'c.subscribe(("t",))',
    'c.subscribe({"t"})',
    "c.subscribe([1])",
    "c.subscribe([None])",
    'c.subscribe([b"t"])',
    "c.subscribe(None)",
    "c.subscribe()",
    'c.subscribe(["t"], callback, callback, callback, callback)',
    'c.subscribe(["t"], bogus=1)',
    'c.subscribe(["t"]) or c.assignment()',
)
add("subscribe", 'c.subscribe(["u"])', setup="subscribed")
add("subscribe", 'c.subscribe(["t"]) or c.assignment()', setup="assigned")

add("unassign", "c.unassign()", "c.unassign(1)", "c.unassign(bogus=1)")
add("unassign", "c.unassign() or c.assignment()", setup="assigned")
add("unassign", "c.unassign()", setup="subscribed")
add("unassign", "c.unassign() or c.assignment()", setup="incremental")

add("unsubscribe", "c.unsubscribe()", "c.unsubscribe(1)", "c.unsubscribe(bogus=1)")
add("unsubscribe", "c.unsubscribe() or c.assignment()", setup="assigned")
add("unsubscribe", "c.unsubscribe() or c.unsubscribe()", setup="subscribed")

add(
    "set_sasl_credentials",
    'c.set_sasl_credentials(username="user", password="secret")',
    'c.set_sasl_credentials("", "")',
    'c.set_sasl_credentials("user")',
    "c.set_sasl_credentials()",
    "c.set_sasl_credentials(1, 2)",
    "c.set_sasl_credentials(None, None)",
    'c.set_sasl_credentials(b"user", b"secret")',
    'c.set_sasl_credentials("user", "secret", 1)',
    'c.set_sasl_credentials("user", "secret", bogus=1)',
)

add(
    "cluster_id",
    "c.cluster_id(0)",
    "c.cluster_id(timeout=0.0)",
    *(f"c.cluster_id({bad})" for bad in BAD_TIMEOUTS),
    "c.cluster_id(0, 1)",
    "c.cluster_id(timeout=0, bogus=1)",
)

add(
    "__enter__",
    "c.__enter__() or c.__enter__()",
    "with_block(c)",
    "with_block_raising(c)",
    "poll_after_with_block(c)",
)
add("__enter__", "c.__enter__()", setup="subscribed")
add(
    "__exit__",
    'c.__exit__(LookupError, LookupError("x"), None)',
    "c.__exit__(None, None, None) or c.poll(0)",
    "c.__exit__(None, None, None) or c.__exit__(None, None, None)",
    "c.__exit__(None, None)",
    "c.__exit__(None, None, None, None)",
    "c.__exit__(exc_type=None, exc_value=None, traceback=None)",
)
add("__exit__", "c.__exit__(None, None, None)", setup="subscribed")
add("__exit__", "c.__exit__(None, None, None)", "c.__enter__()", state="closed")

# -- no oracle: upstream crashes the interpreter ---------------------------------------------

add("commit", "c.commit(Message())", "c.commit(Message(partition=0, offset=5))", no_oracle=True)
add("incremental_unassign", 'c.incremental_unassign([TP("t", 0), TP("t", 0)])', setup="incremental", no_oracle=True)
add("store_offsets", *STORE_CRASHING, conf="no-auto-store", setup="assigned", no_oracle=True)
ctor('K({**CONF, "group.id": None})', 'K({**CONF, "group.id": ""})', no_oracle=True)


def _check_unique() -> None:
    seen: set[str] = set()
    for item in [*CASES, *CTOR_CASES, *NO_ORACLE]:
        if item.id in seen:
            raise ValueError(f"duplicate case id {item.id!r}")
        seen.add(item.id)


_check_unique()

CASES_BY_ID: Mapping[str, Case | CtorCase] = {item.id: item for item in [*CASES, *CTOR_CASES, *NO_ORACLE]}
