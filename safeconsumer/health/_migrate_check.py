"""The doctor's ``--migrate`` check: moving a group to ``group.protocol=consumer`` (KIP-848).

From a described group (:class:`Described`: the doctor's ``Report``), the coordinator's broker
config and the group's own config, all pure functions except :func:`group_config` (one
``describe_configs`` call): what the brokers allow (:func:`broker_support`), the group's
consumer-protocol timeouts (:func:`group_timeouts`), the consumer config's classic-only keys and
what replaces each (:func:`classic_keys`, :func:`consumer_config`), whether the broker can convert
the group (:func:`migration_plan`; the join gate's rule, :data:`._migration.CONVERTIBLE_ASSIGNORS`),
the findings (:func:`migration_findings`) and the human report's section (:func:`render_migration`).
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType  # type: ignore[attr-defined]

from ..base._clients import redact_config
from ..consumer._join_gate import CONVERTIBLE_ASSIGNORS, MIGRATION_TIMEOUT
from ._findings import Finding


class Member(Protocol):
    @property
    def instance_id(self) -> str | None: ...


class Described(Protocol):
    """What the check reads of the doctor's ``Report``."""

    @property
    def group(self) -> str: ...
    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def assignor(self) -> str: ...
    @property
    def members(self) -> Sequence[Member]: ...
    @property
    def migration(self) -> dict[str, Any] | None: ...


#: Classic-protocol settings librdkafka refuses in a ``group.protocol=consumer`` config, at
#: construction (``_INVALID_ARG``), even when set to their defaults.
CLASSIC_ONLY_KEYS = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "group.protocol.type",
)

#: A classic timeout's replacement: the group config that holds it, the broker setting that is
#: its default, and the broker settings bounding it.
GROUP_TIMEOUTS = {
    "session.timeout.ms": (
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ),
    "heartbeat.interval.ms": (
        "consumer.heartbeat.interval.ms",
        "group.consumer.heartbeat.interval.ms",
        ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    ),
}

#: A classic assignor and the broker's assignor that spreads partitions the same way.
SERVER_ASSIGNORS = {"range": "range", "roundrobin": "uniform", "cooperative-sticky": "uniform", "sticky": "uniform"}

#: Classic assignors whose librdkafka assignments carry assignor data (librdkafka echoes each
#: member's sticky subscription userData into the assignment): Kafka refuses to convert such a
#: group once it rebalanced after its first assignment (KAFKA-18134).
USER_DATA_ASSIGNORS = frozenset({"cooperative-sticky", "sticky"})

#: ``group.consumer.migration.policy``: (online upgrade, online downgrade) allowed.
MIGRATION_POLICIES = {
    "bidirectional": (True, True),
    "upgrade": (True, False),
    "downgrade": (False, True),
    "disabled": (False, False),
}

NOT_A_CONSUMER_GROUP = re.compile(r"is not a consumer group \(([^)]*)\)")

#: What to do about a classic group the broker cannot convert while it has members.
_REMEDY = (
    "Stop every classic member (the group empties; its committed offsets are kept), then start them with "
    "group.protocol=consumer: an empty classic group becomes a consumer group at the first one. With "
    "safeconsumer, consumer-protocol SafeConsumers started first wait for the classic members to leave and "
    f"join as soon as the group is empty (option migration_timeout, seconds, default {MIGRATION_TIMEOUT:g}; "
    "None waits for ever)."
)


def integer(text: str | None) -> int | None:
    """``text`` as an int (None: absent or not a number)."""
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip().lower() for n in text.split(",") if n.strip()]


def broker_support(settings: Mapping[str, str] | None) -> dict[str, Any]:
    """What the brokers allow, from the coordinator's config (``settings``: None when unreadable;
    each answer is then None, unknown)."""
    settings = settings or {}
    protocols = _names(settings.get("group.coordinator.rebalance.protocols"))
    policy = settings.get("group.consumer.migration.policy")
    upgrade, downgrade = MIGRATION_POLICIES.get((policy or "").lower(), (None, None))
    return {
        "rebalance_protocols": protocols,
        "consumer_protocol": None if protocols is None else "consumer" in protocols,
        "migration_policy": policy,
        "online_upgrade": upgrade,
        "online_downgrade": downgrade,
        "assignors": _names(settings.get("group.consumer.assignors")),
        "consumer_max_size": integer(settings.get("group.consumer.max.size")),
    }


def group_timeouts(
    group_config: Mapping[str, tuple[str, str]] | None, settings: Mapping[str, str] | None
) -> dict[str, dict[str, Any]]:
    """Each consumer-protocol timeout as it applies to the group now: the group's own config
    (``group_config``: name -> (value, "group" or "broker"), None when unreadable), else the
    broker's default; with the broker's bounds."""
    settings = settings or {}
    out: dict[str, dict[str, Any]] = {}
    for name, default, (low, high) in GROUP_TIMEOUTS.values():
        value, source = (group_config or {}).get(name, (settings.get(default), "broker"))
        out[name] = {
            "value": integer(value),
            "source": source if value is not None else None,
            "broker_default": default,
            "min": integer(settings.get(low)),
            "max": integer(settings.get(high)),
        }
    return out


def classic_keys(
    config: Mapping[str, Any],
    broker: Mapping[str, Any],
    timeouts: Mapping[str, Mapping[str, Any]],
    *,
    group: str,
    bootstrap_servers: str,
) -> list[dict[str, Any]]:
    """The classic-only keys in ``config``, each with what replaces it (pure: unit-tested).

    ``broker``: :func:`broker_support`'s answer; ``timeouts``: :func:`group_timeouts`'."""
    out: list[dict[str, Any]] = []
    for key in CLASSIC_ONLY_KEYS:
        if key not in config:
            continue
        value = str(config[key])
        entry: dict[str, Any] = {"key": key, "value": value, "replacement": None, "current": None, "source": None}
        if key in GROUP_TIMEOUTS:
            name = GROUP_TIMEOUTS[key][0]
            now = timeouts[name]
            entry.update(replacement=name, current=now["value"], source=now["source"])
            entry["advice"] = _timeout_advice(value, name, now, group=group, bootstrap_servers=bootstrap_servers)
        elif key == "partition.assignment.strategy":
            assignor, set_it = server_assignor(value, broker.get("assignors"))
            entry.update(replacement="group.remote.assignor", current=assignor, source="config" if set_it else "broker")
            entry["advice"] = _assignor_advice(_first_assignor(value), assignor, set_it=set_it)
        else:
            entry["advice"] = "the consumer protocol has no protocol type (its members are always consumers)."
        out.append(entry)
    return out


def _assignor_advice(classic: str, assignor: str, *, set_it: bool) -> str:
    if classic == assignor:
        like = " (as before)"
    elif SERVER_ASSIGNORS.get(classic) == assignor:
        like = f" (it spreads partitions evenly, as {classic} did, and moves as few as it can)"
    else:
        like = ""
    named = (
        f"Set group.remote.assignor={assignor}{like}."
        if set_it
        else f"The broker's default assignor, {assignor}, takes its place{like}: no group.remote.assignor needed."
    )
    return (
        f"the broker assigns the partitions. {named} With the consumer protocol every assignment is incremental: "
        "no eager revoke-all, a member only gives up the partitions that move."
    )


def _timeout_advice(value: str, name: str, now: Mapping[str, Any], *, group: str, bootstrap_servers: str) -> str:
    current = now["value"]
    where = "set on the group" if now["source"] == "group" else f"the broker's {now['broker_default']}"
    text = f"the broker keeps it per group, as group config {name}" + (
        "." if current is None else f": now {current} ms ({where})."
    )
    wanted = integer(value)
    if wanted is None or wanted == current:
        return text
    low, high = now["min"], now["max"]
    if (low is not None and wanted < low) or (high is not None and wanted > high):
        return text + f" {wanted} ms is outside what the broker allows ({low}..{high} ms)."
    return (
        text + f" To keep {wanted} ms: kafka-configs.sh --bootstrap-server {bootstrap_servers} --alter "
        f"--entity-type groups --entity-name {group} --add-config {name}={wanted}"
    )


def _first_assignor(strategy: str) -> str:
    """A classic ``partition.assignment.strategy``'s preferred assignor (librdkafka's default: range)."""
    return (strategy.split(",", maxsplit=1)[0].strip() or "range").lower()


def server_assignor(strategy: str, assignors: Sequence[str] | None) -> tuple[str, bool]:
    """The broker assignor for a classic ``partition.assignment.strategy`` (its first, preferred
    one), and whether the config must name it (``group.remote.assignor``): not when it is the
    broker's default, the first of ``group.consumer.assignors`` (``uniform,range`` by default)."""
    available = list(assignors) if assignors else ["uniform", "range"]
    first = _first_assignor(strategy)
    wanted = SERVER_ASSIGNORS.get(first, available[0])
    if wanted not in available:
        wanted = available[0]
    return wanted, wanted != available[0]


def consumer_config(config: Mapping[str, Any], broker: Mapping[str, Any]) -> dict[str, str]:
    """The config to run the members with: ``config`` without its classic-only keys, with
    ``group.protocol=consumer`` (and ``group.remote.assignor`` where the broker's default does not
    spread partitions as the classic assignor did). Secrets redacted."""
    out = {str(k): str(v) for k, v in config.items() if k not in CLASSIC_ONLY_KEYS}
    out["group.protocol"] = "consumer"
    strategy = config.get("partition.assignment.strategy")
    if strategy is not None and "group.remote.assignor" not in config:
        assignor, set_it = server_assignor(str(strategy), broker.get("assignors"))
        if set_it:
            out["group.remote.assignor"] = assignor
    return redact_config(out)


def migration_plan(
    report: Described,
    config: Mapping[str, Any] | None,
    settings: Mapping[str, str] | None,
    group_config: Mapping[str, tuple[str, str]] | None,
    *,
    protocol_type: str = "consumer",
) -> dict[str, Any]:
    """The ``migration`` section for a described group (pure: unit-tested).

    ``config``: the consumer config given (None: none given); ``settings``: the coordinator's
    broker config; ``group_config``: the group's own timeouts (None: unreadable);
    ``protocol_type``: the group's, when the broker said it is not "consumer"."""
    broker = broker_support(settings)
    timeouts = group_timeouts(group_config, settings)
    kind = report.protocol if protocol_type == "consumer" else None
    if protocol_type != "consumer":
        described = f"not a consumer group (protocol type {protocol_type})"
    elif kind == "consumer":
        described = "mixed or consumer"
    elif not report.members:
        described = "empty"
    else:
        described = "classic"
    refusals: list[str] = []
    if protocol_type != "consumer":
        refusals.append("protocol_type")
    elif kind == "classic" and report.members:
        cap = broker["consumer_max_size"]
        if cap is not None and len(report.members) > cap:
            refusals.append("group_size")
        assignor = report.assignor.lower()
        if assignor in USER_DATA_ASSIGNORS:
            refusals.append("assignor_data")
        elif assignor not in CONVERTIBLE_ASSIGNORS:
            refusals.append("assignor_unknown")
    return {
        "broker": broker,
        "group": {
            "type": kind,
            "protocol_type": protocol_type,
            "described_as": described,
            "members": len(report.members),
            "assignor": report.assignor,
            "static_members": sum(1 for m in report.members if m.instance_id),
            "refusals": refusals,
        },
        "timeouts": timeouts,
        "keys": None
        if config is None
        else classic_keys(config, broker, timeouts, group=report.group, bootstrap_servers=report.bootstrap_servers),
        "config": None if config is None else consumer_config(config, broker),
    }


def migration_findings(report: Described) -> list[Finding]:
    """The findings of a ``--migrate`` check (pure: unit-tested)."""
    plan = report.migration
    if plan is None:
        return []
    out: list[Finding] = []
    broker, group = plan["broker"], plan["group"]
    if broker["consumer_protocol"] is False:
        listed = ",".join(broker["rebalance_protocols"])
        out.append(
            Finding(
                "consumer_protocol_unsupported",
                "critical",
                f"the brokers do not offer the consumer group protocol (group.coordinator.rebalance.protocols="
                f"{listed}): every group.protocol=consumer member dies at its first heartbeat (librdkafka's fatal "
                "error: ConsumerGroupHeartbeat answered UNSUPPORTED_VERSION)",
                "Add consumer to group.coordinator.rebalance.protocols on every broker (Kafka 4's default: "
                "classic,consumer,streams; a static setting: restart the brokers one at a time) before moving any "
                "member to group.protocol=consumer.",
                {"rebalance_protocols": broker["rebalance_protocols"]},
            )
        )
    policy = broker["migration_policy"]
    if broker["online_upgrade"] is False and group["type"] == "classic" and group["members"]:
        out.append(
            Finding(
                "online_migration_disabled",
                "critical",
                f"group.consumer.migration.policy={policy} forbids upgrading a classic group with members online: "
                "the first group.protocol=consumer member of a rolling upgrade is refused (a fatal error: "
                "GROUP_ID_NOT_FOUND at its first heartbeat)",
                "Set group.consumer.migration.policy to bidirectional or upgrade on every broker (a static "
                "setting), or migrate offline: " + _REMEDY,
                {"direction": "upgrade", "policy": policy},
            )
        )
    if broker["online_downgrade"] is False:
        out.append(
            Finding(
                "online_migration_disabled",
                "warning",
                f"group.consumer.migration.policy={policy} forbids downgrading online: a rolling rollback to "
                "group.protocol=classic does not turn the group back into a classic group while it has members "
                "(the classic members stay in a consumer group, assigned by the broker)",
                "To be able to roll back online, set group.consumer.migration.policy to bidirectional or "
                "downgrade on every broker before migrating; or roll back offline: stop every member, then "
                "start them with group.protocol=classic.",
                {"direction": "downgrade", "policy": policy},
            )
        )
    keys = plan["keys"] or []
    if keys:
        names = ", ".join(k["key"] for k in keys)
        out.append(
            Finding(
                "classic_only_keys",
                "critical",
                f"the consumer config sets {names}: with group.protocol=consumer librdkafka refuses it at "
                "construction (_INVALID_ARG: not supported for group.protocol=consumer)",
                f"Remove {names} and run the members with the config to use (the migration section, which "
                "names what replaces each key and its value for this group now).",
                {"keys": [k["key"] for k in keys], "replacements": {k["key"]: k["replacement"] for k in keys}},
            )
        )
    for reason in group["refusals"]:
        out.append(_refusal(reason, report, plan))
    return out


def _refusal(reason: str, report: Described, plan: Mapping[str, Any]) -> Finding:
    group, members, assignor = report.group, plan["group"]["members"], report.assignor
    if reason == "protocol_type":
        kind = plan["group"]["protocol_type"]
        return Finding(
            "upgrade_refused",
            "critical",
            f"group {group!r} is not a consumer group (protocol type {kind}, e.g. Kafka Connect's workers): "
            "the broker converts only consumer groups, so a group.protocol=consumer member joining it is refused "
            "(a fatal error: GROUP_ID_NOT_FOUND at its first heartbeat)",
            "Give the consumers their own group.id; this group is not theirs to migrate.",
            {"reason": reason, "protocol_type": kind},
        )
    if reason == "group_size":
        cap = plan["broker"]["consumer_max_size"]
        return Finding(
            "upgrade_refused",
            "critical",
            f"the classic group has {members} member(s), more than the consumer protocol allows "
            f"(group.consumer.max.size={cap}): the broker refuses to convert it, and the first "
            "group.protocol=consumer member of a rolling upgrade dies (GROUP_ID_NOT_FOUND)",
            f"Run at most {cap} members, or raise group.consumer.max.size on every broker, before the upgrade.",
            {"reason": reason, "members": members, "limit": cap},
        )
    if reason == "assignor_data":
        return Finding(
            "upgrade_refused",
            "critical",
            f"the classic group's members use the {assignor} assignor: librdkafka puts each member's sticky "
            "userData into the assignments, and Kafka refuses to convert a group whose assignments carry "
            "assignor data once it rebalanced after its first assignment (KAFKA-18134: 'userData from a custom "
            "assignor would be lost'): a rolling upgrade will be refused, its first group.protocol=consumer "
            "member dies (ConsumerGroupHeartbeat fatal error: GROUP_ID_NOT_FOUND)",
            _REMEDY,
            {"reason": reason, "assignor": assignor, "members": members},
        )
    return Finding(
        "upgrade_refused",
        "warning",
        f"the classic group's members use the {assignor or 'unnamed'} assignor: Kafka refuses to convert a group "
        "whose assignments carry assignor data (KAFKA-18134); if this assignor's do, a rolling upgrade will be "
        "refused (range and roundrobin convert)",
        "Move the group to range or roundrobin first (a rolling restart), or: " + _REMEDY,
        {"reason": reason, "assignor": assignor, "members": members},
    )


def group_config(admin: AdminClient, group: str, timeout: float) -> dict[str, tuple[str, str]] | None:
    """The group's consumer-protocol timeouts as the broker applies them (its group config):
    name -> (value, "group" when set on the group, else "broker"); None when unreadable."""
    resource = ConfigResource(ResourceType.GROUP, group)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    except (KafkaException, concurrent.futures.TimeoutError):
        return None
    out: dict[str, tuple[str, str]] = {}
    for name, _default, _bounds in GROUP_TIMEOUTS.values():
        entry = entries.get(name)
        if entry is not None and entry.value is not None:
            source = getattr(entry.source, "value", entry.source)
            out[name] = (entry.value, "group" if source == ConfigSource.GROUP_CONFIG.value else "broker")
    return out


def _known(value: object) -> str:
    return "unknown" if value is None else str(value)


def render_migration(plan: Mapping[str, Any]) -> list[str]:
    """The ``--migrate`` section of the human report."""
    broker, group = plan["broker"], plan["group"]
    protocols = broker["rebalance_protocols"]
    offered = {True: "supported", False: "NOT supported", None: "unknown"}[broker["consumer_protocol"]]
    directions = [d for d in ("upgrade", "downgrade") if broker[f"online_{d}"]]
    lines = [
        "moving to group.protocol=consumer (KIP-848)",
        f"  consumer protocol  {offered} (group.coordinator.rebalance.protocols="
        f"{_known(None if protocols is None else ','.join(protocols))})",
        f"  migration policy   {_known(broker['migration_policy'])} (group.consumer.migration.policy; online: "
        + (" and ".join(directions) or ("unknown" if broker["online_upgrade"] is None else "neither"))
        + ")",
        f"  group              {group['described_as']}, {group['members']} member(s)"
        + (f", assignor {group['assignor']}" if group["assignor"] else ""),
    ]
    if group["static_members"]:
        lines.append(f"  static members     {group['static_members']}: group.instance.id carries over unchanged")
    if group["type"] == "classic" and group["members"]:
        refusals = ", ".join(group["refusals"])
        verdict = f"REFUSED ({refusals})" if refusals else "converted at the first group.protocol=consumer member"
        lines.append(f"  conversion         {verdict}")
    for name, now in plan["timeouts"].items():
        where = "group config" if now["source"] == "group" else f"broker default {now['broker_default']}"
        lines.append(f"  {name:<32} {_known(now['value'])} ({where})")
    if plan["keys"] is None:
        lines.append("  consumer config    not given (--consumer-config/-X): its keys were not checked")
        return lines
    for key in plan["keys"]:
        lines.append(f"  remove {key['key']}={key['value']}: {key['advice']}")
    lines.append("  config to use:")
    lines += [f"    {k}={v}" for k, v in plan["config"].items()]
    return lines
