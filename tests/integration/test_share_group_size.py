"""S7: a share group at the broker's ``group.share.max.size`` (2 on the full-group broker).

Raw first (characterized: the refused member's ``poll()`` raises librdkafka's fatal error once, then
answers every later call with an empty batch, so a loop that logs and goes on polls a dead member
forever), then ours: ``GroupMaxSizeReachedError``, closed, every later call raising it, the members
in the group unaffected, and ``on_fatal="exit"`` ending the process with 78.

Which of three members joining together is refused is the broker's choice, so each test starts
three and finds the one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, ShareConsumer

from safeconsumer import EXIT_GROUP_MAX_SIZE, GroupMaxSizeReachedError, SafeShareConsumer
from safeconsumer.testing import KafkaTestKit, wait_until

from ..support import set_group_config

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = pytest.mark.kafka_versions

ROOT = Path(__file__).resolve().parents[2]


def _group(kafka: KafkaTestKit) -> tuple[str, str]:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    return topic, group


def _conf(kafka: KafkaTestKit, group: str, mode: str = "implicit") -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


def test_raw_raises_the_refusal_once_then_polls_empty_forever(
    full_group_kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    kafka = full_group_kafka
    topic, group = _group(kafka)
    members = [ShareConsumer(_conf(kafka, group)) for _ in range(3)]
    closing.extend(members)
    for m in members:
        m.subscribe([topic])
    raised: dict[int, KafkaError] = {}

    def step() -> None:
        for i, m in enumerate(members):
            try:
                m.poll(0.2)
            except KafkaException as exc:
                raised[i] = exc.args[0]

    wait_until(lambda: raised, timeout=30, what="a member refused", step=step)
    [(refused, error)] = raised.items()
    assert (error.code(), error.fatal()) == (KafkaError.GROUP_MAX_SIZE_REACHED, True)
    # Later: no error, ever; the records produced now go to the two members in the group only.
    kafka.produce(topic, 20, partitions=2)
    got: dict[int, int] = {0: 0, 1: 0, 2: 0}

    def read() -> None:
        for i, m in enumerate(members):
            got[i] += len([r for r in m.poll(0.2) if r.error() is None])

    wait_until(lambda: sum(got.values()) >= 20, timeout=60, what="the 20 records", step=read)
    assert got[refused] == 0 and sum(got.values()) == 20
    assert members[refused].poll(0.5).records() == []  # still no error


@pytest.mark.parametrize("mode", ["implicit", "explicit"])
def test_ours_fails_with_group_max_size_reached_and_keeps_failing(
    full_group_kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    kafka = full_group_kafka
    topic, group = _group(kafka)
    members = [SafeShareConsumer(_conf(kafka, group, mode)) for _ in range(3)]
    closing.extend(members)
    for m in members:
        m.subscribe([topic])
    failed: dict[int, GroupMaxSizeReachedError] = {}
    got: dict[int, int] = {0: 0, 1: 0, 2: 0}

    def step() -> None:
        for i, m in enumerate(members):
            if i in failed:
                continue
            try:
                for r in m.poll(0.2):
                    if r.error() is None:
                        got[i] += 1
                        if mode == "explicit":
                            m.acknowledge(r)
            except GroupMaxSizeReachedError as exc:
                failed[i] = exc

    wait_until(lambda: failed, timeout=30, what="a member refused", step=step)
    [(refused, error)] = failed.items()
    assert repr(group) in str(error) and "group.share.max.size" in str(error)
    assert error.kafka_error is not None and error.kafka_error.code() == KafkaError.GROUP_MAX_SIZE_REACHED
    c = members[refused]
    for call in (lambda: c.poll(0.1), lambda: c.commit_sync(1.0), c.commit_async, lambda: c.subscribe([topic])):
        with pytest.raises(GroupMaxSizeReachedError) as again:
            call()
        assert again.value is error
    # The two members in the group read on, unaffected.
    kafka.produce(topic, 20, partitions=2)
    wait_until(lambda: sum(got.values()) >= 20, timeout=60, what="the 20 records", step=step)
    assert got[refused] == 0 and sum(got.values()) == 20


def test_on_fatal_exit_ends_the_process_with_78(full_group_kafka: KafkaTestKit) -> None:
    kafka = full_group_kafka
    topic, group = _group(kafka)
    script = textwrap.dedent(
        f"""
        import time
        from safeconsumer import SafeShareConsumer
        conf = {{"bootstrap.servers": {kafka.bootstrap_servers!r}, "group.id": {group!r}}}
        members = [SafeShareConsumer(conf, on_fatal="exit") for _ in range(3)]
        for m in members:
            m.subscribe([{topic!r}])
        end = time.monotonic() + 40
        while time.monotonic() < end:
            for m in members:
                m.poll(0.2)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=90, check=False
    )
    assert child.returncode == EXIT_GROUP_MAX_SIZE, (child.returncode, child.stderr[-2000:])
