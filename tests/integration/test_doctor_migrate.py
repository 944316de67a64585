"""``safeconsumer doctor --migrate`` against live groups on the real broker: moving a group from the
classic protocol to ``group.protocol=consumer`` (KIP-848) by a rolling restart.

Each scenario is real: a clean config and one carrying classic-only keys (the group's own session
timeout set with a group config), a broker started without the consumer protocol, a
cooperative-sticky group that rebalanced (the broker refuses to convert it: KAFKA-18134) beside a
range group (it converts), a group already converted by a consumer-protocol member, and a group
of another protocol type (joined over the wire as Kafka Connect's workers join). The doctor runs
as a process while the members keep polling.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ConfigResource,
    ResourceType,
)

from safeconsumer.base._clients import HELPER_LOG
from safeconsumer.testing import Broker, KafkaTestKit, wait_until

from ..support import Received, pump, set_group_config
from .test_doctor import ROOT, _doctor

#: A broker whose group coordinator speaks only the classic protocol (valid in Kafka 4.x).
CLASSIC_ONLY = {"group.coordinator.rebalance.protocols": "classic"}


def _classic(kafka: KafkaTestKit, group: str, topic: str, assignor: str, client_id: str) -> Consumer:
    conf = kafka.consumer_conf(group, "range", partition_assignment_strategy=assignor)
    c = Consumer({**conf, "client.id": client_id, "logger": HELPER_LOG})
    c.subscribe([topic])
    return c


def _args(kafka: KafkaTestKit, group: str, *extra: str) -> list[str]:
    return ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--migrate", *extra]


def _properties(path: Path, config: Mapping[str, str]) -> str:
    path.write_text("# the members' config today\n" + "".join(f"{k}={v}\n" for k, v in config.items()))
    return str(path)


def _broker_setting(kafka: KafkaTestKit, name: str) -> int:
    broker = ConfigResource(ResourceType.BROKER, str(min(kafka.admin.list_topics(timeout=10).brokers)))
    return int(kafka.admin.describe_configs([broker])[broker].result(timeout=15)[name].value)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in done.stderr, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _alone(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The doctor on a group none of this process's consumers is a member of."""
    command = [sys.executable, "-m", "safeconsumer", "doctor", *args]
    return subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_clean_config_on_a_range_group_is_ready(kafka: KafkaTestKit, tmp_path: Path) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    a = _classic(kafka, group, topic, "range", "orders")
    members = [(a, Received())]
    config = _properties(tmp_path / "c.properties", {"group.id": group, "auto.offset.reset": "earliest"})
    try:
        pump(members, lambda: len(a.assignment()) == 2, timeout=45, what="the member to own both partitions")
        done = _doctor([*_args(kafka, group, "--consumer-config", config), "--json"], members)
        assert done.returncode == 0, (done.stdout, done.stderr)
        report = _json(done)
        assert report["schema"] == 1 and report["findings"] == [] and report["healthy"] is True
        migration = report["migration"]
        assert migration["broker"]["consumer_protocol"] is True
        assert migration["broker"]["migration_policy"] == "bidirectional"
        assert migration["broker"]["online_upgrade"] is migration["broker"]["online_downgrade"] is True
        assert migration["group"] == {
            "type": "classic",
            "protocol_type": "consumer",
            "described_as": "classic",
            "members": 1,
            "assignor": "range",
            "static_members": 0,
            "refusals": [],
        }
        assert migration["keys"] == []
        assert migration["config"] == {"group.id": group, "auto.offset.reset": "earliest", "group.protocol": "consumer"}
        human = _doctor([*_args(kafka, group, "--consumer-config", config)], members)
        assert human.returncode == 0, (human.stdout, human.stderr)
        assert "consumer protocol  supported" in human.stdout and "bidirectional" in human.stdout
        assert "converted at the first group.protocol=consumer member" in human.stdout
    finally:
        a.close()


def test_classic_only_keys_are_named_with_the_group_s_values(kafka: KafkaTestKit, tmp_path: Path) -> None:
    """The group's session timeout set on the group (20 s); its heartbeat the broker's default."""
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    set_group_config(kafka, group, consumer_session_timeout_ms="20000")
    heartbeat = _broker_setting(kafka, "group.consumer.heartbeat.interval.ms")
    a = _classic(kafka, group, topic, "range", "orders")
    members = [(a, Received())]
    classic = {
        "group.id": group,
        "session.timeout.ms": "10000",
        "partition.assignment.strategy": "cooperative-sticky",
        "heartbeat.interval.ms": "1000",
        "enable.auto.commit": "false",
    }
    config = _properties(tmp_path / "c.properties", classic)
    try:
        pump(members, lambda: len(a.assignment()) == 2, timeout=45, what="the member to own both partitions")
        done = _doctor([*_args(kafka, group, "--consumer-config", config), "--json"], members)
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = _json(done)
        (finding,) = report["findings"]
        assert (finding["code"], finding["severity"]) == ("classic_only_keys", "critical")
        assert finding["details"] == {
            "keys": ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"],
            "replacements": {
                "session.timeout.ms": "consumer.session.timeout.ms",
                "heartbeat.interval.ms": "consumer.heartbeat.interval.ms",
                "partition.assignment.strategy": "group.remote.assignor",
            },
        }
        keys = {k["key"]: k for k in report["migration"]["keys"]}
        assert set(keys) == set(finding["details"]["keys"])
        assert {k: (v["replacement"], v["current"], v["source"]) for k, v in keys.items()} == {
            "session.timeout.ms": ("consumer.session.timeout.ms", 20000, "group"),
            "heartbeat.interval.ms": ("consumer.heartbeat.interval.ms", heartbeat, "broker"),
            "partition.assignment.strategy": ("group.remote.assignor", "uniform", "broker"),
        }
        assert (
            f"--entity-name {group} --add-config consumer.session.timeout.ms=10000"
            in keys["session.timeout.ms"]["advice"]
        )
        assert report["migration"]["timeouts"]["consumer.session.timeout.ms"]["value"] == 20000
        assert report["migration"]["config"] == {
            "group.id": group,
            "enable.auto.commit": "false",
            "group.protocol": "consumer",
        }
    finally:
        a.close()


def test_a_broker_without_the_consumer_protocol_is_found(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker],
) -> None:
    kafka = KafkaTestKit(kafka_broker_factory(CLASSIC_ONLY).bootstrap_servers, prefix="classic-only")
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    a = _classic(kafka, group, topic, "range", "orders")
    members = [(a, Received())]
    started: list[Consumer] = [a]
    try:
        pump(members, lambda: len(a.assignment()) == 2, timeout=45, what="the member to own both partitions")
        done = _doctor([*_args(kafka, group), "--json"], members)
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = _json(done)
        assert [f["code"] for f in report["findings"]] == ["consumer_protocol_unsupported"]
        assert report["findings"][0]["details"] == {"rebalance_protocols": ["classic"]}
        assert report["migration"]["broker"]["consumer_protocol"] is False
        # What the finding foretells: a consumer-protocol member dies at its first heartbeat.
        c = Consumer({**kafka.consumer_conf(group, "consumer"), "logger": HELPER_LOG})
        started.append(c)
        c.subscribe([topic])
        seen = Received()
        members.append((c, seen))
        fatal = [KafkaError._FATAL]
        pump(members, lambda: [e for e in seen.errors if e.code() in fatal], timeout=30, what="a fatal error")
        assert "ConsumerGroupHeartbeat fatal error: Broker: API version not supported" in seen.errors[-1].str()
    finally:
        for c in started:
            c.close()
        kafka.close()


@pytest.mark.parametrize(
    ("assignor", "codes"),
    [("cooperative-sticky", [("upgrade_refused", "critical")]), ("range", [])],
)
def test_a_cooperative_sticky_group_that_rebalanced_is_refused_and_a_range_group_is_not(
    kafka: KafkaTestKit, assignor: str, codes: list[tuple[str, str]]
) -> None:
    """Member A alone, then B joins: the group rebalanced after its first assignment."""
    topic, group = kafka.create_topic(partitions=4), kafka.name("g")
    a = _classic(kafka, group, topic, assignor, "orders")
    members = [(a, Received())]
    started: list[Consumer] = [a]
    try:
        pump(members, lambda: len(a.assignment()) == 4, timeout=45, what="A to own the 4 partitions")
        b = _classic(kafka, group, topic, assignor, "orders")
        started.append(b)
        members.append((b, Received()))
        pump(members, lambda: len(a.assignment()) == 2 == len(b.assignment()), timeout=60, what="A and B assigned")
        done = _doctor([*_args(kafka, group), "--json"], members)
        assert done.returncode == (1 if codes else 0), (done.stdout, done.stderr)
        report = _json(done)
        assert [(f["code"], f["severity"]) for f in report["findings"]] == codes, report["findings"]
        assert report["migration"]["group"]["assignor"] == assignor
        if codes:
            (finding,) = report["findings"]
            assert finding["details"] == {"reason": "assignor_data", "assignor": assignor, "members": 2}
            assert "KAFKA-18134" in finding["message"] and "migration_timeout" in finding["advice"]
        # What the finding foretells: the first consumer-protocol member of a rolling upgrade.
        c = Consumer({**kafka.consumer_conf(group, "consumer"), "logger": HELPER_LOG})
        started.append(c)
        c.subscribe([topic])
        seen = Received()  # librdkafka's fatal error arrives as poll()'s error event (not error_cb)
        members.append((c, seen))
        if codes:
            fatal = [KafkaError._FATAL]
            pump(members, lambda: [e for e in seen.errors if e.code() in fatal], timeout=30, what="a fatal error")
            assert "ConsumerGroupHeartbeat fatal error" in seen.errors[-1].str(), seen.errors
        else:
            pump(members, lambda: kafka.describe_group(group).type == "CONSUMER", timeout=30, what="the conversion")
    finally:
        for c in started:
            c.close()


def test_a_group_a_consumer_protocol_member_converted_is_reported_as_consumer(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=4), kafka.name("g")
    a = _classic(kafka, group, topic, "range", "classic-member")
    members = [(a, Received())]
    started: list[Consumer] = [a]
    try:
        pump(members, lambda: len(a.assignment()) == 4, timeout=45, what="the classic member to own 4 partitions")
        b = Consumer({**kafka.consumer_conf(group, "consumer"), "client.id": "consumer-member", "logger": HELPER_LOG})
        started.append(b)
        b.subscribe([topic])
        members.append((b, Received()))
        pump(
            members,
            lambda: a.assignment() and b.assignment() and kafka.describe_group(group).type == "CONSUMER",
            timeout=60,
            what="the group converted, both members assigned",
        )
        done = _doctor([*_args(kafka, group), "--json"], members)
        assert done.returncode == 0, (done.stdout, done.stderr)
        report = _json(done)
        assert report["protocol"] == "consumer" and report["findings"] == []
        group_part = report["migration"]["group"]
        assert (group_part["type"], group_part["described_as"], group_part["members"]) == (
            "consumer",
            "mixed or consumer",
            2,
        )
        assert sorted(m["client_id"] for m in report["members"]) == ["classic-member", "consumer-member"]
        human = _doctor(_args(kafka, group), members)
        assert "group              mixed or consumer, 2 member(s)" in human.stdout, human.stdout
    finally:
        for c in started:
            c.close()


# -- a group of another protocol type -----------------------------------------------------------
def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


@contextmanager
def _joined_as(kafka: KafkaTestKit, group: str, protocol_type: str) -> Iterator[None]:
    """One member joined to ``group`` with the classic JoinGroup request (v2) and ``protocol_type``,
    as a Kafka Connect worker joins its group (librdkafka joins only as "consumer"). It stays a
    member for the session timeout, 60 s, without heartbeats."""
    node = kafka.admin.describe_consumer_groups([group])[group].result(timeout=15).coordinator
    metadata = b"\x00\x01worker"
    body = (
        _string(group)
        + struct.pack(">ii", 60000, 60000)
        + _string("")
        + _string(protocol_type)
        + struct.pack(">i", 1)
        + _string("sessioned")
        + struct.pack(">i", len(metadata))
        + metadata
    )
    with socket.create_connection((node.host, node.port), timeout=30) as sock:
        correlation = iter(range(1, 1000))

        def joined() -> bool:
            header = struct.pack(">hhi", 11, 2, next(correlation)) + _string("doctor-test")
            sock.sendall(struct.pack(">i", len(header + body)) + header + body)
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            response = sock.recv(size, socket.MSG_WAITALL)
            error: int = struct.unpack(">h", response[8:10])[0]  # correlation id, throttle time, error code
            assert error in (0, 14, 15, 16), f"JoinGroup answered error {error}"  # 14-16: coordinator not ready
            return error == 0

        wait_until(joined, timeout=30, what="the JoinGroup to be answered", interval=0.5)
        yield


def test_a_group_that_is_not_a_consumer_group_is_refused(kafka: KafkaTestKit) -> None:
    group = kafka.name("connect")
    with _joined_as(kafka, group, "connect"):
        done = _alone([*_args(kafka, group), "--json"])
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = _json(done)
        (finding,) = report["findings"]
        assert (finding["code"], finding["severity"]) == ("upgrade_refused", "critical")
        assert finding["details"] == {"reason": "protocol_type", "protocol_type": "connect"}
        assert report["migration"]["group"]["described_as"] == "not a consumer group (protocol type connect)"
        plain = _alone(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group])
        assert plain.returncode == 2 and "is not a consumer group (connect)" in plain.stderr, plain.stderr
