"""The rebalance explainer's describe process against the real broker, every protocol: it
describes the group as the admin API does in this process, and its death (librdkafka #4605's
abort, simulated with the same signal) costs one answer: the next describe starts another child.
"""

from __future__ import annotations

import logging
import os
import signal

import pytest
from confluent_kafka import Consumer

from safeconsumer.base._clients import HELPER_LOG, admin_config
from safeconsumer.group._describe import view_of
from safeconsumer.group._describe_process import DescribeProcess
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until


def test_a_describe_process_describes_the_group_and_outlives_an_abort(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    member = Consumer({**kafka.consumer_conf(group, protocol), "client.id": "described"})
    process = DescribeProcess(admin_config(kafka.client_config), HELPER_LOG)
    try:
        member.subscribe([topic])
        wait_until(
            lambda: member.poll(0.2) is None and len(member.assignment()) == 2, timeout=45, what="the member owns both"
        )
        snapshot = kafka.describe_group(group)

        def described() -> bool:
            fields = process.describe(group, timeout=2.0)
            return fields is not None and view_of(fields).state.upper() == "STABLE"

        wait_until(described, timeout=30, what="the group described STABLE by the child")
        fields = process.describe(group, timeout=2.0)
        assert fields is not None
        view = view_of(fields)
        assert set(view.members) == snapshot.member_ids and len(view.members) == 1
        (only,) = view.members.values()
        assert only.client_id == "described"
        assert view.owning == frozenset(view.members)
        assert view.kind.upper() == ("CONSUMER" if protocol == "consumer" else "CLASSIC")
        assert view.assignor == ("uniform" if protocol == "consumer" else protocol)  # the broker's default for KIP-848

        first = process.pid
        assert first is not None
        os.kill(first, signal.SIGABRT)
        assert process.describe(group, timeout=2.0) is None, "the dead child's answer is none"
        assert any("helper process was given up" in r.getMessage() for r in caplog.records)
        again = process.describe(group, timeout=2.0)
        assert again is not None and set(view_of(again).members) == set(view.members)
        assert process.pid not in (None, first)
    finally:
        process.stop()
        member.close()
