"""SafeAIOConsumer against the installed ``confluent_kafka.aio.AIOConsumer``, without a broker.

The same calls, awaited on both classes with the same config, must end the same way (the
harness's rule: the same return, or the same exception type with exactly upstream's ``args``
and message; a subclass of upstream's type conforms, and notes are not compared). With a
broker, ``tests/integration/test_aio.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.aio import AIOConsumer

from safeconsumer.aio import SafeAIOConsumer

from .harness import Outcome, base_config, outcome_conforms, raised

Call = Callable[[Any], Awaitable[object]]


async def _then(first: Awaitable[object], second: Awaitable[object]) -> object:
    await first
    return await second


async def _inside(c: Any) -> object:
    async with c as entered:
        assert entered is c
    return await c.poll(0)


CASES: dict[str, Call] = {
    "poll(0)": lambda c: c.poll(0),
    "poll(timeout=0)": lambda c: c.poll(timeout=0),
    "poll('x')": lambda c: c.poll("x"),
    "poll(None)": lambda c: c.poll(None),
    "poll(0, 1)": lambda c: c.poll(0, 1),
    "consume(1, 0)": lambda c: c.consume(1, 0),
    "consume(-1, 0)": lambda c: c.consume(-1, 0),
    "consume(1, 'x')": lambda c: c.consume(1, "x"),
    "consume(num_messages=0, timeout=0)": lambda c: c.consume(num_messages=0, timeout=0),
    "consume(bogus=1)": lambda c: c.consume(bogus=1),
    "assignment()": lambda c: c.assignment(),
    "assign('x')": lambda c: c.assign("x"),
    "assign([])": lambda c: c.assign([]),
    "assign([tp]) then assignment()": lambda c: _then(c.assign([TopicPartition("t", 0)]), c.assignment()),
    "pause('x')": lambda c: c.pause("x"),
    "pause([tp])": lambda c: c.pause([TopicPartition("t", 0)]),
    "resume([1])": lambda c: c.resume([1]),
    "seek('x')": lambda c: c.seek("x"),
    "subscribe('x')": lambda c: c.subscribe("x"),
    "subscribe(['t'])": lambda c: c.subscribe(["t"]),
    "subscribe([])": lambda c: c.subscribe([]),
    "unsubscribe()": lambda c: c.unsubscribe(),
    "unassign()": lambda c: c.unassign(),
    "incremental_assign('x')": lambda c: c.incremental_assign("x"),
    "incremental_unassign([tp])": lambda c: c.incremental_unassign([TopicPartition("t", 0)]),
    "position([])": lambda c: c.position([]),
    "position('x')": lambda c: c.position("x"),
    "store_offsets()": lambda c: c.store_offsets(),
    "store_offsets(offsets=[tp])": lambda c: c.store_offsets(offsets=[TopicPartition("t", 0, 1)]),
    "commit(message=1)": lambda c: c.commit(message=1),
    "commit(offsets='x')": lambda c: c.commit(offsets="x"),
    "committed('x')": lambda c: c.committed("x"),
    "get_watermark_offsets('x')": lambda c: c.get_watermark_offsets("x"),
    "offsets_for_times('x')": lambda c: c.offsets_for_times("x"),
    "set_sasl_credentials(1, 2)": lambda c: c.set_sasl_credentials(1, 2),
    "close() then close()": lambda c: _then(c.close(), c.close()),
    "close() then poll(0)": lambda c: _then(c.close(), c.poll(0)),
    "close() then consume(1, 0)": lambda c: _then(c.close(), c.consume(1, 0)),
    "close() then assignment()": lambda c: _then(c.close(), c.assignment()),
    "close() then subscribe(['t'])": lambda c: _then(c.close(), c.subscribe(["t"])),
    "async with, then poll(0)": _inside,
}


def _run(cls: type[Any], call: Call) -> Outcome:
    async def main() -> Outcome:
        consumer = cls(base_config())
        result: list[Outcome] = []

        async def attempt() -> object:
            return await call(consumer)

        try:
            value = await attempt()
        except Exception as exc:  # noqa: BLE001 - every exception is an outcome to compare
            result.append(raised(exc))
        else:
            result.append(Outcome("return", _plain(value)))
        with contextlib.suppress(RuntimeError):  # already closed: both classes raise
            await consumer.close()
        return result[0]

    return asyncio.run(main())


def _plain(value: object) -> object:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, TopicPartition):
        return ("TopicPartition", value.topic, value.partition, value.offset)
    return value


@pytest.mark.parametrize("case", sorted(CASES))
def test_awaited_calls_end_as_upstream_s(case: str) -> None:
    upstream, safe = _run(AIOConsumer, CASES[case]), _run(SafeAIOConsumer, CASES[case])
    assert outcome_conforms(upstream, safe), f"{case}: AIOConsumer {upstream!r}, SafeAIOConsumer {safe!r}"
