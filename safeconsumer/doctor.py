"""``safeconsumer doctor``: describe a live consumer group and flag what causes incidents.

    python -m safeconsumer doctor --bootstrap-servers HOST:PORT --group GROUP [--json]

It describes the group with the admin API (protocol, state, assignor, coordinator, and per
member: member id, client id, host, group.instance.id, assigned partitions by topic), reads
the coordinator's group size limit, and reports findings, each with what to do:

- ``shared_group_id``: members consuming disjoint sets of topics share the group id, so every
  join or leave of one application rebalances the other (the "mysterious rebalances");
- ``group_size``: the group is at 80% of the broker's ``group.max.size`` (classic) or
  ``group.consumer.max.size`` (consumer protocol) or beyond; past it, new members are refused
  (KIP-389);
- ``group_empty``: no member consumes the group (it does not exist, or everyone left).

Exit status: 0 healthy, 1 findings, 2 cannot connect (or bad arguments). ``--json`` prints one
object whose shape is documented in ``docs/group-health.md`` (``"schema": 1``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

#: Share of the broker's group size limit from which ``group_size`` is reported.
SIZE_WARNING = 0.8

#: Version of the ``--json`` shape (documented in docs/group-health.md).
SCHEMA = 1

EXIT_HEALTHY, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2


class CannotConnect(Exception):
    """The cluster did not answer (the doctor exits with status 2)."""


@dataclass
class MemberReport:
    """One member as the broker describes it; ``assignment``: partitions by topic."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: dict[str, list[int]]


@dataclass
class Finding:
    """Something worth an operator's attention: a stable ``code``, what was found, what to do."""

    code: str
    severity: str  # "warning" | "critical"
    message: str
    advice: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """A described group and its findings (``to_json()``: the ``--json`` object)."""

    group: str
    bootstrap_servers: str
    protocol: str
    state: str
    assignor: str
    coordinator: dict[str, Any] | None
    limit: dict[str, Any] | None
    members: list[MemberReport]
    findings: list[Finding]

    @property
    def healthy(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return {"schema": SCHEMA, **out, "healthy": self.healthy}


def _quiet_logger() -> logging.Logger:
    """librdkafka's own log lines (connection refused, ...) go nowhere: the doctor reports."""
    log = logging.getLogger("safeconsumer.doctor.librdkafka")
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return log


def _name(value: Any) -> str:
    return str(getattr(value, "name", value)).lower()


def diagnose(
    bootstrap_servers: str, group: str, *, config: dict[str, Any] | None = None, timeout: float = 10.0
) -> Report:
    """Describe ``group`` and find what causes incidents. Raises :class:`CannotConnect`."""
    conf: dict[str, Any] = {**(config or {}), "bootstrap.servers": bootstrap_servers, "logger": _quiet_logger()}
    try:
        admin = AdminClient(conf)
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args else exc
        raise CannotConnect(f"cannot connect to {bootstrap_servers}: {reason}") from None
    try:
        future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
        description = future.result(timeout=timeout + 1)
    except (KafkaException, concurrent.futures.TimeoutError) as exc:
        reason = exc.args[0] if exc.args else "timed out"
        raise CannotConnect(f"cannot describe group {group!r} on {bootstrap_servers}: {reason}") from None
    members = [
        MemberReport(
            member_id=m.member_id,
            client_id=m.client_id,
            host=m.host,
            instance_id=m.group_instance_id,
            assignment=_by_topic(m.assignment.topic_partitions if m.assignment else []),
        )
        for m in description.members or []
    ]
    members.sort(key=lambda m: (m.client_id, m.member_id))
    protocol = _name(getattr(description, "type", "classic"))
    if protocol not in ("classic", "consumer"):
        protocol = "classic"
    coordinator = description.coordinator
    coord = None if coordinator is None else {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port}
    limit = _size_limit(admin, coordinator.id if coordinator is not None else None, protocol, timeout)
    report = Report(
        group=group,
        bootstrap_servers=bootstrap_servers,
        protocol=protocol,
        state=_name(description.state),
        assignor=description.partition_assignor or "",
        coordinator=coord,
        limit=limit,
        members=members,
        findings=[],
    )
    report.findings = findings(report)
    return report


def _by_topic(partitions: Sequence[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(p) for t, p in sorted(out.items())}


def _size_limit(admin: AdminClient, broker_id: int | None, protocol: str, timeout: float) -> dict[str, Any] | None:
    """The coordinator's group size limit for the group's protocol, or None if unreadable."""
    if broker_id is None:
        return None
    setting = "group.consumer.max.size" if protocol == "consumer" else "group.max.size"
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    except (KafkaException, concurrent.futures.TimeoutError):
        return None
    entry = entries.get(setting)
    if entry is None or entry.value is None:
        return None
    return {"setting": setting, "value": int(entry.value)}


def findings(report: Report) -> list[Finding]:
    """Everything worth an operator's attention in a described group (pure: unit-tested)."""
    out: list[Finding] = []
    if not report.members:
        out.append(
            Finding(
                "group_empty",
                "warning",
                f"group {report.group!r} has no members (state {report.state})",
                "Check the group id your consumers use, or whether they are running.",
            )
        )
        return out
    apps = _applications(report.members)
    if len(apps) > 1:
        described = "; ".join(
            f"{', '.join(sorted({m.client_id for m in ms}))} consume {', '.join(sorted(topics))}" for topics, ms in apps
        )
        out.append(
            Finding(
                "shared_group_id",
                "warning",
                f"{len(apps)} sets of members consume disjoint topics under one group id: {described}",
                "Give each application its own group.id: every join or leave of one rebalances the others.",
                {"applications": [{"topics": sorted(t), "members": sorted(m.member_id for m in ms)} for t, ms in apps]},
            )
        )
    limit = report.limit
    if limit is not None and limit["value"] > 0:
        size, cap = len(report.members), limit["value"]
        if size >= math.ceil(cap * SIZE_WARNING):
            at_limit = size >= cap
            out.append(
                Finding(
                    "group_size",
                    "critical" if at_limit else "warning",
                    f"the group has {size} member(s); the broker allows {cap} ({limit['setting']})",
                    (
                        "New members are refused (GROUP_MAX_SIZE_REACHED): "
                        if at_limit
                        else f"At {cap} members new ones will be refused: "
                    )
                    + "run fewer consumers (more than the partitions do no work), "
                    f"or raise {limit['setting']} on every broker.",
                    {"members": size, "limit": cap, "setting": limit["setting"]},
                )
            )
    return out


def _applications(members: list[MemberReport]) -> list[tuple[set[str], list[MemberReport]]]:
    """Members grouped by the topics they consume: members sharing a topic are one application.

    Members with no assignment say nothing about their topics and are left out.
    """
    groups: list[tuple[set[str], list[MemberReport]]] = []
    for member in members:
        topics = set(member.assignment)
        if not topics:
            continue
        joined = [g for g in groups if g[0] & topics]
        merged_topics, merged_members = set(topics), [member]
        for g in joined:
            merged_topics |= g[0]
            merged_members += g[1]
            groups.remove(g)
        groups.append((merged_topics, merged_members))
    return groups


# -- output ----------------------------------------------------------------------------------
def render(report: Report) -> str:
    """The human report: the group, a table of members, then the findings."""
    coord = report.coordinator
    lines = [
        f"group        {report.group}",
        f"protocol     {report.protocol} (assignor {report.assignor or '-'})",
        f"state        {report.state}",
        "coordinator  " + ("-" if coord is None else f"broker {coord['id']} at {coord['host']}:{coord['port']}"),
        "size limit   "
        + ("unknown" if report.limit is None else f"{report.limit['value']} ({report.limit['setting']})"),
        f"members      {len(report.members)}",
        "",
    ]
    rows = [("member id", "client id", "host", "instance id", "partitions")]
    for m in report.members:
        parts = "; ".join(f"{t}: {','.join(map(str, p))}" for t, p in m.assignment.items()) or "-"
        rows.append((m.member_id, m.client_id, m.host, m.instance_id or "-", parts))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for i, row in enumerate(rows):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    if not report.findings:
        lines.append("healthy: no findings")
    for f in report.findings:
        lines += [f"{f.severity.upper()} {f.code}: {f.message}", f"  what to do: {f.advice}"]
    return "\n".join(lines)


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safeconsumer", description="safeconsumer's command line tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor",
        help="describe a live consumer group and flag what causes incidents",
        description="Describe a live consumer group and flag what causes incidents. "
        "Exit status: 0 healthy, 1 findings, 2 cannot connect.",
    )
    doctor.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    doctor.add_argument("--group", required=True, help="the consumer group id")
    doctor.add_argument("--json", action="store_true", help="print one JSON object (see docs/group-health.md)")
    doctor.add_argument(
        "-X",
        dest="config",
        action="append",
        type=_config_pair,
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting for the admin connection (security, ...), as kcat's -X",
    )
    doctor.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout <= 0:
        build_parser().error("--timeout must be positive")
    try:
        report = diagnose(args.bootstrap_servers, args.group, config=dict(args.config), timeout=args.timeout)
    except CannotConnect as exc:
        sys.stderr.write(f"safeconsumer doctor: {exc}\n")
        return EXIT_UNREACHABLE
    sys.stdout.write((json.dumps(report.to_json(), indent=2) if args.json else render(report)) + "\n")
    return EXIT_HEALTHY if report.healthy else EXIT_FINDINGS
