"""The doctor's report: a described group and its findings, as the ``--json`` object and as text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..group._memory import FetchLimits, mib
from ._findings import Finding
from ._migrate_check import render_migration
from ._share_check import render_share

#: Version of the ``--json`` shape (documented in docs/group-health.md).
SCHEMA = 1

#: ``--fetch-memory-budget``'s default: what one process's consumers may buffer at worst.
DEFAULT_BUDGET = 1 << 30


@dataclass
class MemberReport:
    """One member as the broker describes it; ``assignment``: partitions by topic."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: dict[str, list[int]]


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
    #: The consumer config's fetch settings, as librdkafka applies them (FetchLimits' fields).
    consumer: dict[str, int] = field(default_factory=lambda: asdict(FetchLimits.from_config({})))
    #: Brokers in the cluster (each answers at most one fetch of a consumer at a time).
    brokers: int | None = None
    consumers_per_process: int = 1
    fetch_memory_budget: int = DEFAULT_BUDGET
    #: Per consumed topic: ``max_message_bytes`` (None if unreadable).
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The worst-case fetch memory of one process (see :func:`._group_check.fetch_memory`), if it has members.
    fetch_memory: dict[str, Any] | None = None
    #: What ``--observe`` saw: seconds, membership changes, restarts (None: not observed).
    observed: dict[str, Any] | None = None
    #: The ``--migrate`` check (``_migrate_check.migration_plan``; None: not asked, left out of the JSON).
    migration: dict[str, Any] | None = None
    #: A share group's settings and where it stands per partition (``_share_check.share_section``;
    #: None: not a share group, left out of the JSON).
    share: dict[str, Any] | None = None
    #: Why the doctor could not ask whether an empty-looking group is a share group (None: it could,
    #: or did not need to; left out of the JSON).
    share_check: str | None = None

    @property
    def healthy(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["consumers_per_process"], out["fetch_memory_budget"]  # both in fetch_memory
        for optional in ("migration", "share", "share_check"):
            if out[optional] is None:
                del out[optional]  # only where it applies: the shape without it is as it was
        return {"schema": SCHEMA, **out, "healthy": self.healthy}


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
    ]
    if report.share is not None:
        lines += render_share(report.share)
    memory = report.fetch_memory
    if memory is not None:
        lines.append(
            f"fetch memory {mib(memory['total'])} at worst for {memory['consumers_per_process']} consumer(s) "
            f"per process of {memory['partitions_per_consumer']} partition(s) (budget {mib(memory['budget'])})"
        )
    if report.observed is not None:
        seen = report.observed
        lines.append(
            f"observed     {seen['membership_changes']} membership change(s), {seen['restarts']} restart(s) "
            f"in {seen['seconds']:g} s"
        )
        log = seen.get("state_log")
        if log is not None:
            lines.append(
                f"             state log: {log['error']}"
                if "error" in log
                else f"             state log: {log['archived']} record(s) archived, {log['given_back']} given back "
                "for redelivery (released or lock expired)"
            )
    lines.append("")
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
    if report.migration is not None:
        lines += [*render_migration(report.migration), ""]
    if not report.findings:
        lines.append("healthy: no findings")
    for f in report.findings:
        lines += [f"{f.severity.upper()} {f.code}: {f.message}", f"  what to do: {f.advice}"]
    return "\n".join(lines)
