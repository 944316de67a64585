"""Fetch memory: the estimate bounds what a consumer really buffers, and the budget warns."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.base._keys import READ_AHEAD, READ_AHEAD_BYTES, READ_CHUNK
from safeconsumer.group._memory import FetchLimits, ProcessFetchMemory, estimate
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, checked_pump

MiB = 1 << 20


def test_estimate_bounds_the_measured_rss_growth(kafka: KafkaTestKit) -> None:
    """A flood of 200 kB records: librdkafka fills its queue; RSS grows by no more than the estimate."""
    topic = kafka.create_topic(partitions=3)
    kafka.produce(topic, 300, partitions=3, value_size=200_000)  # 60 MB, more than the queue holds
    conf = {"queued.max.messages.kbytes": 32768, "queued.min.messages": 1000, "max.partition.fetch.bytes": 262144}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.memory_proc",
            kafka.bootstrap_servers,
            topic,
            kafka.name("g"),
            json.dumps(conf),
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    growth, bound = result["growth"], sum(result["estimate"].values())
    print(f"RSS growth {growth / MiB:.1f} MiB, estimate {bound / MiB:.1f} MiB, parts {result['estimate']}")
    assert result["partitions"] == 3
    # The flood reached librdkafka's queue cap (32 MiB) plus the read-ahead: the bound was tested.
    assert growth >= 32 * MiB * 0.9, f"only {growth / MiB:.1f} MiB fetched: the queue never filled"
    assert growth <= bound, f"measured {growth / MiB:.1f} MiB above the estimate {bound / MiB:.1f} MiB"


@pytest.fixture(autouse=True)
def _own_process_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget counts every SafeConsumer of the process: here only this test's."""
    monkeypatch.setattr("safeconsumer.group._memory.PROCESS", ProcessFetchMemory())


SMALL = {"queued.max.messages.kbytes": 1024, "queued.min.messages": 1000, "max.partition.fetch.bytes": 65536}


def test_budget_warns_when_an_assignment_takes_the_process_over_it(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    """Two consumers fit the budget while idle; eight partitions for one of them do not: one WARNING."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    limits = FetchLimits.from_config(SMALL)
    idle, per_partition = estimate(limits, 0).total, estimate(limits, 1).total - estimate(limits, 0).total
    budget = 2 * idle + 4 * per_partition  # over it at 5 partitions or more
    topic = kafka.create_topic(partitions=8)
    a = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **_us(SMALL)), fetch_memory_budget=budget)
    b = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **_us(SMALL)), fetch_memory_budget=budget)
    try:
        assert not _warnings(caplog), "two idle consumers fit the budget"
        a.subscribe([topic])
        ra = Received()
        checked_pump([(a, ra)], lambda: len(a.assignment()) == 8, timeout=45, what="A owns all 8 partitions")
        (warning,) = _warnings(caplog)
        assert "2 SafeConsumer(s) in this process" in warning, warning
        for setting in ("queued.max.messages.kbytes", "max.partition.fetch.bytes", "queued.min.messages"):
            assert setting in warning, warning
    finally:
        a.close()
        b.close()


def test_budget_is_quiet_when_the_process_fits(kafka: KafkaTestKit, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    limits = FetchLimits.from_config(SMALL)
    topic = kafka.create_topic(partitions=8)
    a = SafeConsumer(
        kafka.consumer_conf(kafka.name("g"), "range", **_us(SMALL)), fetch_memory_budget=estimate(limits, 8).total
    )
    try:
        a.subscribe([topic])
        checked_pump([(a, Received())], lambda: len(a.assignment()) == 8, timeout=45, what="A owns all 8 partitions")
        assert not _warnings(caplog)
    finally:
        a.close()


def _us(conf: dict[str, int]) -> dict[str, object]:
    """consumer_conf()'s keyword form (underscores for dots)."""
    return {k.replace(".", "_"): v for k, v in conf.items()}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("fetch memory:")]


def test_large_records_are_read_ahead_a_few_at_a_time(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """poll() reads ahead READ_AHEAD small records (a chunk at a time) but about READ_AHEAD_BYTES of
    large ones: the read-ahead of 200 kB records is 5 records (1 MiB), not 512 (100 MiB per
    consumer). librdkafka's own position on the handle shows how far it was read."""
    large, small = kafka.create_topic(), kafka.create_topic()
    kafka.produce(large, 80, value_size=200_000)
    kafka.produce(small, READ_AHEAD + 100, value_size=100)
    for topic, read in ((large, READ_AHEAD_BYTES // 200_000), (small, READ_AHEAD)):
        # One fetch response brings some 50 records: librdkafka holds plenty when poll() reads.
        c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, max_partition_fetch_bytes=10 << 20))
        got = Received()
        try:
            c.assign([TopicPartition(topic, 0)])
            checked_pump([(c, got)], got.records.__len__, timeout=30, what="a record")
            position = Consumer.position(c, [TopicPartition(topic, 0)])[0].offset
            # Large: at most 5 (fewer when librdkafka had fetched fewer yet: one record batch of 4).
            assert 1 <= position <= read if topic == large else position == read, (
                f"{topic}: {position} read, not {read}"
            )
        finally:
            c.close()


def test_a_small_first_record_reads_one_chunk_of_large_ones(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """The read-ahead is judged chunk by chunk: a small record followed by 50 kB ones is read with
    one chunk of those (READ_CHUNK records, 3 MiB, the estimate's worst case), and no further chunk,
    although READ_AHEAD small records would have been read."""
    topic = kafka.create_topic()
    kafka.produce(topic, 1, value_size=100)
    kafka.produce(topic, 2 * READ_CHUNK, value_size=50_000)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, max_partition_fetch_bytes=20 << 20))
    got = Received()
    try:
        c.assign([TopicPartition(topic, 0)])
        checked_pump([(c, got)], got.records.__len__, timeout=30, what="a record")
        assert [len(value) for value in got.values] == [100]
        position = Consumer.position(c, [TopicPartition(topic, 0)])[0].offset
        assert position == READ_CHUNK, f"{position} read, not one chunk ({READ_CHUNK})"
        # What was read ahead is handed out in order, and nothing is lost or read twice.
        checked_pump([(c, got)], lambda: len(got.records) > 2 * READ_CHUNK, timeout=30, what="every record")
        assert [r[2] for r in got.records] == list(range(2 * READ_CHUNK + 1))
    finally:
        c.close()
