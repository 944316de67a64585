"""The fetch memory estimate and the process-wide budget (pure logic; the RSS bound is an integration test)."""

from __future__ import annotations

import logging

import pytest

from safeconsumer import SafeConsumer
from safeconsumer.base._keys import READ_AHEAD, READ_AHEAD_BYTES, READ_CHUNK
from safeconsumer.group._memory import FIXED, RECORD_OVERHEAD, FetchLimits, ProcessFetchMemory, estimate, parse_budget

MiB = 1 << 20


def test_limits_take_librdkafkas_defaults_and_rules() -> None:
    d = FetchLimits.from_config({})
    assert (d.queue_bytes, d.queue_records, d.partition_fetch) == (64 * MiB, 100000, MiB)
    assert (d.fetch_max, d.receive_max) == (52428800, 100000000)
    # fetch.max.bytes unset: no more than the queue holds; receive limit follows it.
    small = FetchLimits.from_config({"queued.max.messages.kbytes": 512})
    assert small.fetch_max == 1000000  # message.max.bytes is the floor
    assert FetchLimits.from_config({"fetch.message.max.bytes": "4096"}).partition_fetch == 4096
    assert FetchLimits.from_config({"fetch.max.bytes": 200 * MiB}).receive_max == 200 * MiB + 512


@pytest.mark.parametrize("value", ["lots", "1.5"])
def test_limits_name_a_bad_setting(value: str) -> None:
    with pytest.raises(ValueError, match=r"queued\.max\.messages\.kbytes must be an integer"):
        FetchLimits.from_config({"queued.max.messages.kbytes": value})


def test_estimate_parts() -> None:
    limits = FetchLimits.from_config({"queued.max.messages.kbytes": 1024, "max.partition.fetch.bytes": 65536})
    e = estimate(limits, 10)
    assert e.queue == MiB
    assert e.in_flight == 10 * 65536
    assert e.per_record == (100000 + 10 * 65536 // 1024) * RECORD_OVERHEAD
    # Chunks are read while the values read total less than READ_AHEAD_BYTES; the last may hold the largest.
    assert e.read_ahead == READ_AHEAD_BYTES + READ_CHUNK * 65536 + READ_AHEAD * 512
    assert e.fixed == FIXED
    assert e.total == sum(e.parts().values())
    # A topic allowing larger records: partitions x largest record.
    assert estimate(limits, 10, largest_record=4 * MiB).in_flight == 40 * MiB
    # ... but never more per response than librdkafka accepts.
    assert estimate(limits, 1, largest_record=10**9).in_flight == limits.receive_max
    # With the brokers known: one response each, up to max(fetch.max.bytes, record).
    assert estimate(limits, 100, brokers=2).in_flight == 2 * limits.fetch_max
    assert estimate(limits, 2, brokers=5).in_flight == 2 * 65536
    three = e.times(3)
    assert (three.total, three.consumers) == (3 * e.total, 3)
    assert e.describe().startswith(f"{e.total / MiB:.1f} MiB = ")


@pytest.mark.parametrize(
    ("value", "error"), [(True, TypeError), ("1g", TypeError), (1.5, TypeError), (0, ValueError), (-1, ValueError)]
)
def test_budget_must_be_positive_bytes(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="fetch_memory_budget"):
        parse_budget(value)


def test_process_sums_its_consumers_and_warns_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    reg = ProcessFetchMemory()
    limits = FetchLimits.from_config({})
    idle, one = estimate(limits, 0).total, estimate(limits, 1).total
    reg.join(1, limits, None)
    reg.join(2, limits, 2 * idle + (one - idle))  # fits 1 partition in the process, not 2
    assert not reg.check(1, 1, "g")
    assert reg.check(2, 1, "g")  # two partitions now
    assert not reg.check(2, 1, "g"), "the same assignment reported again is not a new warning"
    assert not reg.check(2, 0, "g"), "a revocation is no growth"
    assert reg.check(2, 1, "g"), "growing again is"
    assert len(caplog.records) == 2 and "2 SafeConsumer(s)" in caplog.records[0].getMessage()
    reg.leave(1)
    total, budget = reg.owned(2, 1)
    assert total.total == one and budget is not None
    reg.leave(2)
    assert reg.owned(3, 0)[1] is None


def test_a_consumer_alone_over_its_budget_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"fetch_memory_budget 1\.0 MiB .*queued\.max\.messages\.kbytes"):
        SafeConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"}, fetch_memory_budget=MiB)
    with pytest.raises(TypeError, match="fetch_memory_budget must be a number of bytes"):
        SafeConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"}, fetch_memory_budget="1g")  # type: ignore[arg-type]
    SafeConsumer({"group.id": "g", "bootstrap.servers": "127.0.0.1:1"}, fetch_memory_budget=1 << 30).close()
