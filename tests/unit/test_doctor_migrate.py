"""``safeconsumer doctor --migrate``'s pure logic: a classic consumer config's keys and what replaces
each, the config to use, and the findings from a described group and its brokers' settings (the
broker scenarios are in tests/integration/test_doctor_migrate.py)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from safeconsumer.health._migrate_check import (
    CLASSIC_ONLY_KEYS,
    broker_support,
    classic_keys,
    consumer_config,
    group_timeouts,
    migration_plan,
    server_assignor,
)
from safeconsumer.health.doctor import MemberReport, Report, build_parser, findings, render

#: A Kafka 4.x broker's settings as describe_configs gives them (the defaults).
KAFKA_4 = {
    "group.coordinator.rebalance.protocols": "classic,consumer,streams",
    "group.consumer.migration.policy": "bidirectional",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.max.size": "2147483647",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.max.size": "2147483647",
}

CLASSIC = {
    "bootstrap.servers": "b:9092",
    "group.id": "orders",
    "session.timeout.ms": "10000",
    "heartbeat.interval.ms": "3000",
    "partition.assignment.strategy": "cooperative-sticky",
    "sasl.password": "hunter2",
}


def _members(n: int, *, static: bool = False) -> list[MemberReport]:
    return [
        MemberReport(f"m{i}", "orders", "/10.0.0.1", f"orders-{i}" if static else None, {"t": [i]}) for i in range(n)
    ]


def _report(
    members: list[MemberReport],
    *,
    assignor: str = "range",
    protocol: str = "classic",
    config: dict[str, Any] | None = None,
    settings: dict[str, str] | None = None,
    group_config: dict[str, tuple[str, str]] | None = None,
    protocol_type: str = "consumer",
) -> Report:
    report = Report(
        group="orders",
        bootstrap_servers="b:9092",
        protocol=protocol,
        state="stable" if members else "empty",
        assignor=assignor,
        coordinator={"id": 1, "host": "b", "port": 9092},
        limit=None,
        members=members,
        findings=[],
    )
    report.migration = migration_plan(
        report, config, KAFKA_4 if settings is None else settings, group_config, protocol_type=protocol_type
    )
    report.findings = findings(report)
    return report


def _codes(report: Report) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in report.findings]


# -- the brokers ------------------------------------------------------------------------------
def test_a_kafka_4_broker_offers_the_consumer_protocol_and_migrates_both_ways() -> None:
    broker = broker_support(KAFKA_4)
    assert broker == {
        "rebalance_protocols": ["classic", "consumer", "streams"],
        "consumer_protocol": True,
        "migration_policy": "bidirectional",
        "online_upgrade": True,
        "online_downgrade": True,
        "assignors": ["uniform", "range"],
        "consumer_max_size": 2147483647,
    }


@pytest.mark.parametrize(
    ("policy", "upgrade", "downgrade"),
    [("upgrade", True, False), ("downgrade", False, True), ("disabled", False, False), ("Bidirectional", True, True)],
)
def test_migration_policies(policy: str, upgrade: bool, downgrade: bool) -> None:
    broker = broker_support({**KAFKA_4, "group.consumer.migration.policy": policy})
    assert (broker["online_upgrade"], broker["online_downgrade"]) == (upgrade, downgrade)


def test_unreadable_broker_settings_are_unknown_not_findings() -> None:
    broker = broker_support(None)
    assert set(broker.values()) == {None}
    report = _report(_members(2), settings={})
    assert report.findings == []
    assert report.migration is not None and report.migration["timeouts"]["consumer.session.timeout.ms"]["value"] is None


def test_a_broker_without_the_consumer_protocol() -> None:
    report = _report(_members(2), settings={**KAFKA_4, "group.coordinator.rebalance.protocols": "classic"})
    assert _codes(report) == [("consumer_protocol_unsupported", "critical")]
    (finding,) = report.findings
    assert "group.coordinator.rebalance.protocols=classic" in finding.message
    assert finding.details == {"rebalance_protocols": ["classic"]}


def test_a_policy_without_online_upgrade_is_critical_for_a_classic_group_with_members() -> None:
    settings = {**KAFKA_4, "group.consumer.migration.policy": "downgrade"}
    (finding,) = _report(_members(2), settings=settings).findings
    assert finding.code == "online_migration_disabled" and finding.severity == "critical"
    assert finding.details == {"direction": "upgrade", "policy": "downgrade"}
    assert "migrate offline" in finding.advice and "committed offsets are kept" in finding.advice
    # An empty classic group is replaced by a consumer group whatever the policy (offline).
    assert [f.code for f in _report([], settings=settings).findings] == ["group_empty"]
    assert _report(_members(2), protocol="consumer", assignor="uniform", settings=settings).findings == []


def test_a_policy_without_online_downgrade_is_a_warning() -> None:
    settings = {**KAFKA_4, "group.consumer.migration.policy": "upgrade"}
    (finding,) = _report(_members(2), settings=settings).findings
    assert (finding.code, finding.severity) == ("online_migration_disabled", "warning")
    assert finding.details == {"direction": "downgrade", "policy": "upgrade"}
    both = _report(_members(2), settings={**KAFKA_4, "group.consumer.migration.policy": "disabled"})
    assert [f.details["direction"] for f in both.findings] == ["upgrade", "downgrade"]


# -- the config's keys ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("strategy", "assignors", "expected"),
    [
        ("range", None, ("range", True)),
        ("roundrobin", None, ("uniform", False)),
        ("cooperative-sticky", None, ("uniform", False)),
        ("sticky", None, ("uniform", False)),
        ("range,roundrobin", None, ("range", True)),  # librdkafka's default: range preferred
        ("Range", ["uniform", "range"], ("range", True)),
        ("range", ["range", "uniform"], ("range", False)),  # the broker's default is range here
        ("cooperative-sticky", ["range", "uniform"], ("uniform", True)),
        ("cooperative-sticky", ["range"], ("range", False)),  # uniform not offered: the default
        ("my-custom", None, ("uniform", False)),
    ],
)
def test_classic_assignors_map_to_the_broker_s(
    strategy: str, assignors: list[str] | None, expected: tuple[str, bool]
) -> None:
    assert server_assignor(strategy, assignors) == expected


def test_the_group_s_own_timeouts_come_first_then_the_broker_s() -> None:
    own = group_timeouts({"consumer.session.timeout.ms": ("12000", "group")}, KAFKA_4)
    assert own["consumer.session.timeout.ms"] == {
        "value": 12000,
        "source": "group",
        "broker_default": "group.consumer.session.timeout.ms",
        "min": 45000,
        "max": 60000,
    }
    assert own["consumer.heartbeat.interval.ms"]["value"] == 5000
    assert own["consumer.heartbeat.interval.ms"]["source"] == "broker"
    unreadable = group_timeouts(None, KAFKA_4)  # a broker without group configs
    assert unreadable["consumer.session.timeout.ms"]["value"] == 45000
    assert unreadable["consumer.session.timeout.ms"]["source"] == "broker"


def test_each_classic_key_is_named_with_what_replaces_it() -> None:
    config = {**CLASSIC, "group.protocol.type": "consumer", "session.timeout.ms": "50000"}
    timeouts = group_timeouts(None, KAFKA_4)
    keys = classic_keys(config, broker_support(KAFKA_4), timeouts, group="orders", bootstrap_servers="b:9092")
    by_key = {k["key"]: k for k in keys}
    assert [k["key"] for k in keys] == list(CLASSIC_ONLY_KEYS)
    session = by_key["session.timeout.ms"]
    assert (session["replacement"], session["current"], session["source"]) == (
        "consumer.session.timeout.ms",
        45000,
        "broker",
    )
    assert (
        "kafka-configs.sh --bootstrap-server b:9092 --alter --entity-type groups --entity-name orders "
        "--add-config consumer.session.timeout.ms=50000" in session["advice"]
    )
    heartbeat = by_key["heartbeat.interval.ms"]
    assert (heartbeat["replacement"], heartbeat["current"]) == ("consumer.heartbeat.interval.ms", 5000)
    assert "3000 ms is outside what the broker allows (5000..15000 ms)" in heartbeat["advice"]
    strategy = by_key["partition.assignment.strategy"]
    assert (strategy["replacement"], strategy["current"], strategy["source"]) == (
        "group.remote.assignor",
        "uniform",
        "broker",
    )
    assert "no group.remote.assignor needed" in strategy["advice"] and "incremental" in strategy["advice"]
    assert by_key["group.protocol.type"]["replacement"] is None


def test_a_timeout_already_as_the_group_has_it_needs_no_command() -> None:
    timeouts = group_timeouts(None, KAFKA_4)
    config = {"session.timeout.ms": "45000"}
    (key,) = classic_keys(config, broker_support(KAFKA_4), timeouts, group="g", bootstrap_servers="b")
    assert "kafka-configs" not in key["advice"] and "now 45000 ms" in key["advice"]


def test_a_clean_config_has_no_keys_to_remove() -> None:
    report = _report(_members(1), config={"group.id": "orders", "auto.offset.reset": "earliest"})
    assert report.migration is not None and report.migration["keys"] == []
    assert report.findings == []


def test_classic_only_keys_are_a_critical_finding() -> None:
    report = _report(_members(1), config=CLASSIC)
    (finding,) = report.findings
    assert (finding.code, finding.severity) == ("classic_only_keys", "critical")
    assert finding.details == {
        "keys": ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"],
        "replacements": {
            "session.timeout.ms": "consumer.session.timeout.ms",
            "heartbeat.interval.ms": "consumer.heartbeat.interval.ms",
            "partition.assignment.strategy": "group.remote.assignor",
        },
    }


def test_without_a_config_its_keys_are_not_checked() -> None:
    report = _report(_members(1), config=None)
    assert report.migration is not None and report.migration["keys"] is None and report.migration["config"] is None
    assert "not given" in render(report)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (CLASSIC, {"bootstrap.servers": "b:9092", "group.id": "orders", "sasl.password": "[redacted]"}),
        (
            {"group.id": "g", "group.protocol": "classic", "partition.assignment.strategy": "range"},
            {"group.id": "g", "group.remote.assignor": "range"},
        ),
        (
            {"group.id": "g", "partition.assignment.strategy": "range", "group.remote.assignor": "uniform"},
            {"group.id": "g", "group.remote.assignor": "uniform"},  # the config's own choice stays
        ),
        ({"group.id": "g", "group.instance.id": "orders-1"}, {"group.id": "g", "group.instance.id": "orders-1"}),
    ],
)
def test_the_config_to_use(config: dict[str, str], expected: dict[str, str]) -> None:
    assert consumer_config(config, broker_support(KAFKA_4)) == {**expected, "group.protocol": "consumer"}


def _quiet() -> logging.Logger:
    log = logging.getLogger("tests.unit.doctor_migrate.librdkafka")
    log.propagate = False
    log.addHandler(logging.NullHandler())
    return log


def test_librdkafka_refuses_the_classic_config_and_takes_the_config_to_use() -> None:
    """Construction only (no broker): librdkafka judges the config before it connects."""
    classic = {k: v for k, v in CLASSIC.items() if k != "sasl.password"}
    base = {"logger": _quiet(), "bootstrap.servers": "127.0.0.1:9"}
    for key in CLASSIC_ONLY_KEYS:
        with pytest.raises(KafkaException, match=f"`{key}` is not supported for `group.protocol=consumer`"):
            Consumer({**base, "group.id": "g", "group.protocol": "consumer", key: classic.get(key, "consumer")})
    for strategy in ("range", "roundrobin", "cooperative-sticky"):
        config = {**classic, "partition.assignment.strategy": strategy, "group.protocol.type": "consumer"}
        Consumer({**base, **consumer_config(config, broker_support(KAFKA_4))}).close()


# -- the group --------------------------------------------------------------------------------
@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_a_classic_group_the_broker_converts(assignor: str) -> None:
    report = _report(_members(3, static=True), assignor=assignor)
    assert report.findings == []
    assert report.migration is not None
    group = report.migration["group"]
    assert group["described_as"] == "classic" and group["refusals"] == [] and group["static_members"] == 3
    text = render(report)
    assert "converted at the first group.protocol=consumer member" in text
    assert "group.instance.id carries over unchanged" in text


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "sticky"])
def test_a_classic_group_whose_assignments_carry_assignor_data_is_refused(assignor: str) -> None:
    (finding,) = _report(_members(2), assignor=assignor).findings
    assert (finding.code, finding.severity) == ("upgrade_refused", "critical")
    assert finding.details == {"reason": "assignor_data", "assignor": assignor, "members": 2}
    assert "KAFKA-18134" in finding.message and "rolling upgrade will be refused" in finding.message
    assert "Stop every classic member" in finding.advice and "migration_timeout" in finding.advice
    assert "default 30; None waits for ever" in finding.advice


def test_an_empty_cooperative_sticky_group_converts() -> None:
    assert [f.code for f in _report([], assignor="cooperative-sticky").findings] == ["group_empty"]


def test_a_custom_assignor_may_be_refused() -> None:
    (finding,) = _report(_members(2), assignor="my-assignor").findings
    assert (finding.code, finding.severity) == ("upgrade_refused", "warning")
    assert finding.details["reason"] == "assignor_unknown"


def test_more_members_than_the_consumer_protocol_allows_is_refused() -> None:
    report = _report(_members(3), settings={**KAFKA_4, "group.consumer.max.size": "2"})
    (finding,) = report.findings
    assert finding.code == "upgrade_refused"
    assert finding.details == {"reason": "group_size", "members": 3, "limit": 2}
    assert not _report(_members(2), settings={**KAFKA_4, "group.consumer.max.size": "2"}).findings


def test_a_group_that_is_not_a_consumer_group_is_refused_and_not_called_empty() -> None:
    report = _report([], assignor="", protocol_type="connect")
    (finding,) = report.findings
    assert finding.code == "upgrade_refused" and finding.details == {
        "reason": "protocol_type",
        "protocol_type": "connect",
    }
    assert report.migration is not None
    assert report.migration["group"]["described_as"] == "not a consumer group (protocol type connect)"
    assert report.migration["group"]["type"] is None


def test_a_consumer_group_is_mixed_or_consumer() -> None:
    report = _report(_members(2), protocol="consumer", assignor="uniform")
    assert report.findings == []
    assert report.migration is not None
    assert report.migration["group"]["described_as"] == "mixed or consumer"
    assert "conversion" not in render(report)


# -- the command ------------------------------------------------------------------------------
def test_the_migration_section_is_in_the_json_only_when_asked() -> None:
    report = _report(_members(1), assignor="cooperative-sticky", config=CLASSIC)
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == 1
    assert set(data["migration"]) == {"broker", "group", "timeouts", "keys", "config"}
    assert set(data["migration"]["keys"][0]) == {"key", "value", "replacement", "current", "source", "advice"}
    assert "hunter2" not in json.dumps(data) and "hunter2" not in render(report)
    report.migration = None
    assert "migration" not in report.to_json()


def test_the_flag() -> None:
    args = build_parser().parse_args(["doctor", "--bootstrap-servers", "b", "--group", "g", "--migrate"])
    assert args.migrate is True
    assert build_parser().parse_args(["doctor", "--bootstrap-servers", "b", "--group", "g"]).migrate is False
