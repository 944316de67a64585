"""I6: GROUP_MAX_SIZE_REACHED is fatal under both group protocols."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from safeconsumer import EXIT_GROUP_MAX_SIZE, GroupMaxSizeReachedError, SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import fatal_error_of, full_group, poll_each

ROOT = Path(__file__).resolve().parents[2]


def test_third_member_fails_fast_and_stops_joining(
    full_group_kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    kafka = full_group_kafka
    topic, group, members = full_group(kafka, protocol)
    third = SafeConsumer(kafka.consumer_conf(group, protocol))
    third.subscribe([topic])
    started = time.monotonic()
    err = fatal_error_of(third, members, timeout=15)
    assert isinstance(err, GroupMaxSizeReachedError), err
    assert err.group_id == group and err.kafka_error is not None
    assert isinstance(err.__cause__, Exception)
    print(f"{protocol}: GroupMaxSizeReachedError after {time.monotonic() - started:.1f}s")
    for call in (lambda: third.poll(0), lambda: third.consume(1, 0), third.assignment, third.commit):
        with pytest.raises(GroupMaxSizeReachedError) as again:
            call()
        assert again.value is err
    third.close()  # closing a stopped consumer is allowed and does nothing
    causes = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"rebalance of group {group!r}")]
    assert any(": group full;" in m for m in causes), causes

    before = kafka.describe_group(group)
    assert len(before.members) == 2
    kafka.produce(topic, 200, partitions=4)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        poll_each(members)  # the stopped third member is not polled again
        now = kafka.describe_group(group)
        assert now.member_ids == before.member_ids and now.assignment == before.assignment, "the group rebalanced"
    assert sum(len(r.records) for _, r in members) == 200, "the two members stopped consuming"
    for c, _ in members:
        c.close()


def test_the_fatal_error_reaches_the_next_awaited_call(full_group_kafka: KafkaTestKit, protocol: Protocol) -> None:
    """SafeAIOConsumer: the third member's awaited poll() raises, and so does every later call."""
    kafka = full_group_kafka
    topic, group, members = full_group(kafka, protocol)

    async def third_member() -> GroupMaxSizeReachedError:
        third = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        await third.subscribe([topic])
        deadline = time.monotonic() + 15
        try:
            while True:
                assert time.monotonic() < deadline, "no fatal error within 15 s"
                await asyncio.to_thread(poll_each, members)
                await third.poll(0.2)
        except GroupMaxSizeReachedError as err:
            for call in (lambda: third.poll(0), lambda: third.consume(1, 0), third.assignment, third.commit):
                with pytest.raises(GroupMaxSizeReachedError) as again:
                    await call()
                assert again.value is err
            await third.close()
            return err

    err = asyncio.run(third_member())
    assert err.group_id == group
    for c, _ in members:
        c.close()


@pytest.mark.parametrize("where", ["poll", "keepalive", "aio", "aio-keepalive"])
def test_exit_policy_ends_the_process(full_group_kafka: KafkaTestKit, protocol: Protocol, where: str) -> None:
    kafka = full_group_kafka
    topic, group, members = full_group(kafka, protocol)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fatal_proc", kafka.bootstrap_servers, topic, group, protocol, where],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: child.poll() is not None, timeout=30, what="the process to exit", step=lambda: poll_each(members)
        )
        out, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        for c, _ in members:
            c.close()
    assert child.returncode == EXIT_GROUP_MAX_SIZE, (child.returncode, out, err[-2000:])
    critical = [line for line in err.splitlines() if "is full" in line and "group.max.size" in line]
    assert len(critical) == 1 and group in critical[0], err[-2000:]
