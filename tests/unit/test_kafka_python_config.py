"""kafka-python's config names judged and translated (no broker): safeconsumer.kafka_python._config."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from kafka import TopicPartition
from kafka import errors as kerrors
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from safeconsumer.kafka_python import KafkaConsumer
from safeconsumer.kafka_python._config import judge


def translated(**configs: Any) -> dict[str, Any]:
    return judge((), configs, group_protocol="classic").librdkafka


def test_kafka_python_names_become_librdkafka_properties() -> None:
    conf = translated(
        bootstrap_servers=["a:1", "b:2"],
        group_id="g",
        client_id="app",
        enable_auto_commit=False,
        auto_commit_interval_ms=100,
        max_poll_interval_ms=60_000,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1000,
        isolation_level="read_committed",
        ssl_check_hostname=False,
        sasl_plain_password="s3cret",
        partition_assignment_strategy=(RangePartitionAssignor, RoundRobinPartitionAssignor),
    )
    assert conf["bootstrap.servers"] == "a:1,b:2" and conf["group.id"] == "g" and conf["client.id"] == "app"
    assert conf["enable.auto.commit"] is False and conf["auto.commit.interval.ms"] == 100
    assert conf["max.poll.interval.ms"] == 60_000 and conf["session.timeout.ms"] == 10_000
    assert conf["heartbeat.interval.ms"] == 1000 and conf["isolation.level"] == "read_committed"
    assert conf["ssl.endpoint.identification.algorithm"] == "none" and conf["sasl.password"] == "s3cret"
    assert conf["partition.assignment.strategy"] == "range,roundrobin"
    assert conf["auto.offset.reset"] == "latest", "kafka-python's default, not librdkafka's"


def test_defaults_are_kafka_pythons() -> None:
    conf = translated(group_id="g")
    assert conf["bootstrap.servers"] == "localhost"
    assert conf["client.id"].startswith("kafka-python-")
    assert conf["enable.auto.commit"] is True and conf["auto.commit.interval.ms"] == 5000
    assert conf["socket.timeout.ms"] == 30_000 and conf["fetch.wait.max.ms"] == 500


def test_aliases_and_unknown_reset_policies_are_judged_as_kafka_python_judges_them() -> None:
    assert translated(auto_offset_reset="smallest")["auto.offset.reset"] == "earliest"
    assert translated(auto_offset_reset="largest")["auto.offset.reset"] == "latest"
    assert translated(auto_offset_reset="none")["auto.offset.reset"] == "error"


def test_small_fetch_sizes_are_raised_to_librdkafkas_floor() -> None:
    conf = translated(fetch_max_bytes=1)
    assert conf["fetch.max.bytes"] == 1000 == conf["message.max.bytes"]
    assert conf["receive.message.max.bytes"] >= 1000 + 1024 * 1024


@pytest.mark.parametrize(
    ("configs", "words"),
    [
        ({"max_poll_timeout_ms": 1}, "Unrecognized configs"),
        ({"fetch_max_wait_ms": 50_000, "request_timeout_ms": 40_000}, "must be larger than"),
        ({"request_timeout_ms": 600_000}, "must be larger than"),
        ({"group_instance_id": "x"}, "group_instance_id requires group_id"),
        ({"isolation_level": "dirty"}, "Unrecognized isolation_level"),
        ({"ssl_context": ssl.create_default_context()}, "ssl_context cannot be honoured"),
        ({"proxy_url": "http://proxy:8080"}, "proxy_url cannot be honoured"),
        ({"exclude_internal_topics": False}, "exclude_internal_topics cannot be honoured"),
        ({"partition_assignment_strategy": (StickyPartitionAssignor,)}, "no assignor 'sticky'"),
        ({"socket_options": []}, "socket_options"),
    ],
)
def test_what_cannot_be_honoured_is_an_error_naming_it(configs: dict[str, Any], words: str) -> None:
    with pytest.raises(kerrors.KafkaConfigurationError, match=words):
        KafkaConsumer(api_version=(4, 0), **configs)


def test_classic_only_settings_are_refused_under_kip_848() -> None:
    with pytest.raises(kerrors.KafkaConfigurationError, match="session_timeout_ms cannot be set"):
        judge((), {"group_id": "g", "session_timeout_ms": 6000}, group_protocol="consumer")
    conf = judge((), {"group_id": "g"}, group_protocol="consumer").librdkafka
    assert conf["group.protocol"] == "consumer" and "session.timeout.ms" not in conf
    with pytest.raises(kerrors.KafkaConfigurationError, match="group_protocol"):
        judge((), {"group_id": "g"}, group_protocol="eager")


def test_no_group_means_no_commits() -> None:
    settings = judge((), {"group_id": None}, group_protocol="classic")
    assert settings.groupless and settings.librdkafka["enable.auto.commit"] is False


def test_subscription_modes_exclude_each_other_as_in_kafka_python() -> None:
    c = KafkaConsumer(api_version=(4, 0), group_id="g")
    try:
        assert c.subscription() is None and c.assignment() == set()
        c.subscribe(["foo"])
        first, second = c.subscription(), c.subscription()
        assert first == {"foo"} and first is not second
        with pytest.raises(kerrors.IllegalStateError):
            c.assign([TopicPartition("foo", 0)])
        with pytest.raises(kerrors.IllegalStateError):
            c.subscribe(pattern="^f")
        with pytest.raises(TypeError):
            c.subscribe("foo")
        with pytest.raises(ValueError, match="Must provide topics or pattern"):
            c.subscribe()
        with pytest.raises(TypeError):
            c.subscribe(["foo"], listener=object())
        with pytest.raises(TypeError):
            c.pause(("foo", 0))
    finally:
        c.close()
    with pytest.raises(kerrors.IllegalStateError, match="KafkaConsumer is closed"):
        c.poll()
    c.close()  # twice: nothing


def test_group_metadata_before_joining() -> None:
    with KafkaConsumer(api_version=(4, 0)) as c:
        meta = c.group_metadata()
        assert (meta.group_id, meta.generation_id, meta.member_id) == (None, -1, "")
    with KafkaConsumer(api_version=(4, 0), group_id="grp") as c:
        meta = c.group_metadata()
        assert (meta.group_id, meta.generation_id, meta.member_id) == ("grp", -1, "")
