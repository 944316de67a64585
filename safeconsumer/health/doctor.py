"""``safeconsumer doctor``: describe a live consumer group and flag what causes incidents.

    python -m safeconsumer doctor --bootstrap-servers HOST:PORT --group GROUP [--json] [--migrate]

It describes the group with the admin API (protocol, state, assignor, coordinator, and per
member: member id, client id, host, group.instance.id, assigned partitions by topic), reads
the coordinator's group size limit, and reports findings, each with what to do:

- ``shared_group_id``: members consuming disjoint sets of topics share the group id, so every
  join or leave of one application rebalances the other (the "mysterious rebalances");
- ``group_size``: the group is at 80% of the broker's ``group.max.size`` (classic) or
  ``group.consumer.max.size`` (consumer protocol) or beyond; past it, new members are refused
  (KIP-389);
- ``fetch_memory``: the worst case the members' fetch buffers may take in one process (the
  consumer config given with ``--consumer-config``/``-X``, the busiest member's partitions, the
  topics' largest records, ``--consumers-per-process``) is above ``--fetch-memory-budget``;
- ``record_size``: a topic allows record batches that a fetch response cannot carry under the
  consumer config's ``receive.message.max.bytes``: a consumer reaching one stalls on that
  partition forever (``fetch.max.bytes`` and ``max.partition.fetch.bytes`` do not stall it);
- ``static_membership``: watched for ``--observe`` seconds, the group's membership changed
  again and again (restarts: a member left and one from the same client id and host joined)
  while its members have no ``group.instance.id``;
- ``group_empty``: no member consumes the group (it does not exist, or everyone left).

With ``--migrate`` the report also checks moving the group to ``group.protocol=consumer``
(KIP-848) by a rolling restart, and gets a ``migration`` section (:mod:`._migrate_check`):

- ``consumer_protocol_unsupported``: the brokers do not offer the consumer protocol
  (``group.coordinator.rebalance.protocols`` without ``consumer``);
- ``online_migration_disabled``: ``group.consumer.migration.policy`` forbids converting this
  classic group while it has members (upgrade), or converting it back (downgrade);
- ``classic_only_keys``: the consumer config carries keys librdkafka refuses with
  ``group.protocol=consumer`` (each named with what replaces it, and the config to use);
- ``upgrade_refused``: the broker will refuse to convert this group (KAFKA-18134: librdkafka's
  ``cooperative-sticky`` and ``sticky`` assignments carry assignor data; more members than
  ``group.consumer.max.size``; a group that is not a consumer group). The refused member dies
  of a fatal error (GROUP_ID_NOT_FOUND at its first heartbeat).

A share group (KIP-932), which librdkafka describes as an empty dead classic group, is described
by its coordinator through :mod:`._wire` and judged by :mod:`._share_check` (``share_start_latest``,
``lock_too_short``, ``batch_outlives_lock`` with ``--processing-time``, ``share_no_progress`` and
``share_archived`` with ``--observe``, ``group_size``, ``group_empty``).

Exit status: 0 healthy, 1 findings, 2 cannot connect (or bad arguments). ``--json`` prints one
object whose shape is documented in ``docs/group-health.md`` (``"schema": 1``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from ..base._clients import HELPER_LOG, admin_config
from ..base._errors import is_auth_failure
from ..group._describe import describe_group
from ..group._describe_process import enum_name
from ..group._memory import FetchEstimate, FetchLimits, estimate, mib
from ..group._wire import NotOffered, WireError
from . import dead_letters
from ._cli import add_config_option
from ._findings import Finding
from ._migrate_check import (
    NOT_A_CONSUMER_GROUP,
    group_config,
    integer,
    migration_findings,
    migration_plan,
    render_migration,
)
from ._share_check import observe_share, progress, render_share, share_findings, share_members, share_section
from ._share_look import ShareGroup, describe_share_group

#: Share of the broker's group size limit from which ``group_size`` is reported.
SIZE_WARNING = 0.8

#: Version of the ``--json`` shape (documented in docs/group-health.md).
SCHEMA = 1

EXIT_HEALTHY, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2

#: ``--fetch-memory-budget``'s default: what one process's consumers may buffer at worst.
DEFAULT_BUDGET = 1 << 30

#: Membership changes within ``--observe`` from which a group "rebalances often".
OFTEN = 2

#: Bytes a fetch response adds around one record batch (librdkafka's own margin).
RESPONSE_MARGIN = 512


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
    #: The worst-case fetch memory of one process (see :func:`fetch_memory`), if it has members.
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


def _name(value: Any) -> str:
    return enum_name(value).lower()


def diagnose(
    bootstrap_servers: str,
    group: str,
    *,
    config: dict[str, Any] | None = None,
    connection: dict[str, Any] | None = None,
    timeout: float = 10.0,
    consumers_per_process: int = 1,
    fetch_memory_budget: int = DEFAULT_BUDGET,
    observe: float = 0.0,
    migrate: bool = False,
    processing_time: float | None = None,
) -> Report:
    """Describe ``group`` and find what causes incidents. Raises :class:`CannotConnect`.

    ``config``: the members' consumer config (librdkafka keys): its fetch settings drive the
    fetch memory and record size findings, and unless ``connection`` is given, its connection
    settings (security, addressing) are used to connect. ``connection``: the admin client's
    settings as they are (``-X``).
    ``observe``: seconds to watch the group's membership for (0: describe once).
    ``migrate``: check moving the group to ``group.protocol=consumer`` (``Report.migration``);
    ``config``, if given (not empty), is then the config the members run with today.
    ``processing_time``: the longest one record's processing takes (seconds), for a share group's
    lock findings.

    A group librdkafka describes as empty and dead may be a share group (KIP-932), which
    librdkafka does not describe: the doctor then asks the coordinator itself (:mod:`._wire`).
    """
    limits = FetchLimits.from_config(config or {})
    refused: list[KafkaError] = []  # logins the cluster refused (librdkafka retries them silently)
    conf: dict[str, Any] = {
        **(admin_config(config or {}, "doctor") if connection is None else connection),
        "bootstrap.servers": bootstrap_servers,
        "logger": HELPER_LOG,  # librdkafka's own lines (connection refused, ...): logging, never stderr
        "error_cb": lambda err: refused.append(err) if is_auth_failure(err) else None,
    }
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args else exc
        raise CannotConnect(f"invalid configuration for the connection to {bootstrap_servers}: {reason}") from None
    try:
        cluster = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args else exc
        admin.poll(0)  # serves error_cb: why the connection failed
        if refused:
            reason = f"authentication failed: {refused[-1].str()}"
        raise CannotConnect(f"cannot connect to {bootstrap_servers}: {reason}") from None
    wire_conf = {k: v for k, v in conf.items() if isinstance(v, str | int | float | bool)}
    # The first description: a share group looks empty and dead to librdkafka. Reused below when
    # nothing is watched first (a describe that times out is not waited for twice).
    first: Any = None
    first_error: KafkaException | concurrent.futures.TimeoutError | None = None
    try:
        first = describe_group(admin, group, timeout)
    except (KafkaException, concurrent.futures.TimeoutError) as exc:
        first_error = exc
    shared, share_check = _probe_share(first, wire_conf, bootstrap_servers, group, timeout)
    if shared is not None:
        report = Report(
            group=group,
            bootstrap_servers=bootstrap_servers,
            protocol="share",
            state="",
            assignor="",
            coordinator=None,
            limit=None,
            members=[],
            findings=[],
            consumer=asdict(limits),
            brokers=len(cluster.brokers) or None,
            consumers_per_process=consumers_per_process,
            fetch_memory_budget=fetch_memory_budget,
        )
        return _diagnose_share(
            report,
            admin,
            wire_conf,
            shared,
            config=config or {},
            observe=observe,
            processing_time=processing_time,
            timeout=timeout,
        )
    observed = None
    if observe > 0:
        observed = _observe(admin, group, observe, timeout)
    protocol_type = "consumer"  # the group's, as far as the admin API describes it
    try:
        if observed is not None or (first is None and first_error is None):
            description = describe_group(admin, group, timeout)  # the membership after the watch
        elif first_error is not None:
            raise first_error
        else:
            description = first
    except (KafkaException, concurrent.futures.TimeoutError) as exc:
        reason = exc.args[0] if exc.args else "timed out"
        other = NOT_A_CONSUMER_GROUP.search(str(reason.str() if isinstance(reason, KafkaError) else reason))
        if not (migrate and other):
            raise CannotConnect(f"cannot describe group {group!r} on {bootstrap_servers}: {reason}") from None
        # A classic group of another protocol type (Kafka Connect's workers, ...): librdkafka
        # describes only consumer groups, and says which type this one has.
        protocol_type, description = other.group(1) or "unknown", None
    members = _members(description) if description is not None else []
    protocol = _name(getattr(description, "type", "classic"))
    if protocol not in ("classic", "consumer"):
        protocol = "classic"
    coordinator = description.coordinator if description is not None else None
    coord = None if coordinator is None else {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port}
    # The brokers' group settings are alike; a group of another protocol type has no coordinator here.
    asked = coordinator.id if coordinator is not None else min(cluster.brokers, default=None) if migrate else None
    settings = _broker_settings(admin, asked, timeout)
    report = Report(
        group=group,
        bootstrap_servers=bootstrap_servers,
        protocol=protocol,
        state=_name(description.state) if description is not None else "unknown",
        assignor=(description.partition_assignor or "") if description is not None else "",
        coordinator=coord,
        limit=_size_limit(settings if coordinator is not None else None, protocol),
        members=members,
        findings=[],
        consumer=asdict(limits),
        brokers=len(cluster.brokers) or None,
        consumers_per_process=consumers_per_process,
        fetch_memory_budget=fetch_memory_budget,
        topics=_topic_limits(admin, sorted({t for m in members for t in m.assignment}), timeout),
        observed=observed,
    )
    report.fetch_memory = fetch_memory(report)
    if migrate:
        report.migration = migration_plan(
            report,
            config or None,
            settings,
            group_config(admin, group, timeout),
            protocol_type=protocol_type,
        )
    report.share_check = share_check
    report.findings = findings(report)
    return report


def _probe_share(
    description: Any, conf: dict[str, Any], bootstrap_servers: str, group: str, timeout: float
) -> tuple[ShareGroup | None, str | None]:
    """The share group ``group``, if it is one; else None, with why the coordinator could not be
    asked (None if it answered, if librdkafka described a consumer group with members, or could not
    describe the group at all: the usual path reports that)."""
    if description is None or description.members or _name(description.state) not in ("dead", "unknown"):
        return None, None
    try:
        return describe_share_group(conf, bootstrap_servers, group, timeout), None
    except NotOffered:
        return None, None  # a broker without share groups (before Kafka 4.1): not a share group
    except WireError as exc:
        return None, f"could not ask the coordinator whether {group!r} is a share group: {exc}"


def _diagnose_share(
    report: Report,
    admin: AdminClient,
    conf: dict[str, Any],
    described: ShareGroup,
    *,
    config: Mapping[str, Any],
    observe: float,
    processing_time: float | None,
    timeout: float,
) -> Report:
    """The report on a share group (see :mod:`._share_check`)."""
    if observe > 0:
        snapshots, log = observe_share(conf, report.bootstrap_servers, report.group, observe, timeout)
        described = snapshots[-1] if snapshots else described
        changes = membership_changes([_share_member_reports(s) for s in snapshots])
        report.observed = {"seconds": observe, **changes, "no_progress": progress(snapshots), "state_log": log}
    report.members = _share_member_reports(described)
    report.state, report.assignor, report.coordinator = described.state, described.assignor, described.coordinator
    settings = _broker_settings(admin, described.coordinator.get("id"), timeout)
    report.limit = _size_limit(settings, "share")
    report.topics = _topic_limits(admin, sorted({t for m in report.members for t in m.assignment}), timeout)
    report.share = share_section(
        admin, described, settings, config=config, processing_time=processing_time, timeout=timeout, connection=conf
    )
    report.findings = findings(report)
    return report


def _share_member_reports(described: ShareGroup) -> list[MemberReport]:
    return [MemberReport(**m) for m in share_members(described)]


def _members(description: Any) -> list[MemberReport]:
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
    return members


def _observe(admin: AdminClient, group: str, seconds: float, timeout: float) -> dict[str, Any]:
    """Describe the group every half second for ``seconds``; count its membership changes."""
    snapshots: list[list[MemberReport]] = []
    deadline = time.monotonic() + seconds
    while True:
        # A describe that failed says nothing about the membership.
        with contextlib.suppress(KafkaException, concurrent.futures.TimeoutError):
            snapshots.append(_members(describe_group(admin, group, min(timeout, 5.0))))
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return {"seconds": seconds, **membership_changes(snapshots)}


def _identity(member: MemberReport) -> str:
    """A member across restarts if it is static (its instance id), else its member id."""
    return f"instance:{member.instance_id}" if member.instance_id else member.member_id


def membership_changes(snapshots: Sequence[Sequence[MemberReport]]) -> dict[str, Any]:
    """Membership changes between consecutive snapshots; restarts among them (a member left and,
    then or later, one from the same client id and host joined); and how many members of the last
    snapshot have no group.instance.id."""
    changes = restarts = 0
    departed: Counter[tuple[str, str]] = Counter()
    for before, after in itertools.pairwise(snapshots):
        old, new = {_identity(m): m for m in before}, {_identity(m): m for m in after}
        if set(old) == set(new):
            continue
        changes += 1
        departed.update((old[k].client_id, old[k].host) for k in set(old) - set(new))
        for k in set(new) - set(old):
            origin = (new[k].client_id, new[k].host)
            if departed[origin] > 0:
                departed[origin] -= 1
                restarts += 1
    last = snapshots[-1] if snapshots else []
    return {
        "membership_changes": changes,
        "restarts": restarts,
        "without_instance_id": sum(1 for m in last if not m.instance_id),
    }


def _topic_limits(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    """Each topic's ``max.message.bytes`` (the largest record batch it takes), None if unreadable."""
    out: dict[str, dict[str, Any]] = {t: {"max_message_bytes": None} for t in topics}
    if not topics:
        return out
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entry = future.result(timeout=timeout + 1).get("max.message.bytes")
        except (KafkaException, concurrent.futures.TimeoutError):
            continue
        if entry is not None and entry.value is not None:
            out[resource.name]["max_message_bytes"] = int(entry.value)
    return out


def fetch_memory(report: Report) -> dict[str, Any] | None:
    """Worst-case fetch memory of one process of the group's consumers (None without members).

    Each of ``consumers_per_process`` consumers is taken to own as many partitions as the
    busiest member, with records as large as the largest its topics allow.
    """
    if not report.members:
        return None
    limits = FetchLimits(**report.consumer)
    partitions = max(sum(len(p) for p in m.assignment.values()) for m in report.members)
    largest = max((t["max_message_bytes"] or 0 for t in report.topics.values()), default=0)
    one = estimate(limits, partitions, largest_record=largest, brokers=report.brokers)
    total = one.times(report.consumers_per_process)
    return {
        "partitions_per_consumer": partitions,
        "largest_record": max(largest, limits.partition_fetch),
        "consumers_per_process": report.consumers_per_process,
        "per_consumer": one.parts(),
        "total": total.total,
        "budget": report.fetch_memory_budget,
    }


def _by_topic(partitions: Sequence[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(p) for t, p in sorted(out.items())}


def _broker_settings(admin: AdminClient, broker_id: int | None, timeout: float) -> dict[str, str] | None:
    """One broker's config (the group coordinator's), or None if unreadable (no DescribeConfigs ACL)."""
    if broker_id is None:
        return None
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    except (KafkaException, concurrent.futures.TimeoutError):
        return None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def _size_limit(settings: Mapping[str, str] | None, protocol: str) -> dict[str, Any] | None:
    """The coordinator's group size limit for the group's protocol, or None if unreadable."""
    setting = {"consumer": "group.consumer.max.size", "share": "group.share.max.size"}.get(protocol, "group.max.size")
    value = integer((settings or {}).get(setting))
    return None if value is None else {"setting": setting, "value": value}


def findings(report: Report) -> list[Finding]:
    """Everything worth an operator's attention in a described group (pure: unit-tested)."""
    out = _group_findings(report) + migration_findings(report)
    if report.share is not None:
        out += share_findings(report.group, len(report.members), report.share, report.observed)
    return out


def _group_findings(report: Report) -> list[Finding]:
    out: list[Finding] = []
    other = report.migration is not None and report.migration["group"]["protocol_type"] != "consumer"
    if not report.members and other:
        return out  # not a consumer group: its members are not described (upgrade_refused says so)
    share = report.share is not None
    if not report.members:
        out.append(
            Finding(
                "group_empty",
                "warning",
                f"{'share ' if share else ''}group {report.group!r} has no members (state {report.state})"
                + (f"; {report.share_check}" if report.share_check else ""),
                "Check the group id your consumers use, or whether they are running.",
            )
        )
        return out
    apps = [] if share else _applications(report.members)  # a share group's members need not split topics
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
                    + (
                        "run fewer consumers, "
                        if share
                        else "run fewer consumers (more than the partitions do no work), "
                    )
                    + f"or raise {limit['setting']} on every broker.",
                    {"members": size, "limit": cap, "setting": limit["setting"]},
                )
            )
    # A share consumer's fetch buffers are not librdkafka's consumer queue: not estimated.
    memory = None if share else report.fetch_memory if report.fetch_memory is not None else fetch_memory(report)
    if memory is not None and memory["total"] > memory["budget"]:
        parts = FetchEstimate(**memory["per_consumer"]).times(memory["consumers_per_process"])
        out.append(
            Finding(
                "fetch_memory",
                "warning",
                f"{memory['consumers_per_process']} consumer(s) per process with {memory['partitions_per_consumer']} "
                f"partition(s) each may buffer {parts.describe()}, over the budget of {mib(memory['budget'])}",
                "Lower the settings of the largest parts (queued.max.messages.kbytes caps librdkafka's queue; "
                "max.partition.fetch.bytes each partition's fetch), run fewer consumers per process, "
                "or give each consumer fewer partitions.",
                {"total": memory["total"], "budget": memory["budget"], "parts": parts.parts()},
            )
        )
    receive = report.consumer["receive_max"]
    for topic, limits in sorted(report.topics.items()):
        allowed = limits.get("max_message_bytes")
        if allowed is not None and allowed + RESPONSE_MARGIN > receive:
            out.append(
                Finding(
                    "record_size",
                    "critical",
                    f"topic {topic!r} takes record batches of up to {allowed} bytes (max.message.bytes); a fetch "
                    f"response carrying one exceeds receive.message.max.bytes={receive}: the consumer stalls on "
                    "that partition for good (librdkafka drops the response and fetches it again; poll() "
                    "returns nothing, error_cb reports _BAD_MSG)",
                    f"Set receive.message.max.bytes to at least {allowed + RESPONSE_MARGIN} in the consumer "
                    f"config, or lower max.message.bytes of {topic!r}.",
                    {"topic": topic, "max_message_bytes": allowed, "receive_message_max_bytes": receive},
                )
            )
    seen = report.observed
    # Share groups have no static membership (no group.instance.id).
    if seen is not None and not share and seen["membership_changes"] >= OFTEN and seen["without_instance_id"]:
        out.append(
            Finding(
                "static_membership",
                "warning",
                f"the membership changed {seen['membership_changes']} time(s) in {seen['seconds']:g} s "
                f"({seen['restarts']} restart(s): a member left and one from the same client id and host joined), "
                f"and {seen['without_instance_id']} member(s) have no group.instance.id",
                "Give each long-lived consumer a stable group.instance.id (static membership, KIP-345): a member "
                "restarted within session.timeout.ms then gets its partitions back without rebalancing the group.",
                dict(seen),
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safeconsumer", description="safeconsumer's command line tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor",
        help="describe a live consumer or share group and flag what causes incidents",
        description="Describe a live consumer or share group and flag what causes incidents. "
        "Exit status: 0 healthy, 1 findings, 2 cannot connect.",
    )
    doctor.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    doctor.add_argument("--group", required=True, help="the consumer group id")
    doctor.add_argument("--json", action="store_true", help="print one JSON object (see docs/group-health.md)")
    add_config_option(
        doctor,
        "a librdkafka setting, as kcat's -X: for the connection (security, ...) and as part of the "
        "members' consumer config (fetch settings)",
    )
    doctor.add_argument(
        "--consumer-config",
        type=argparse.FileType("r"),
        metavar="FILE",
        help="the members' consumer config, librdkafka properties (key=value lines, # comments); "
        "-X settings override it",
    )
    doctor.add_argument(
        "--consumers-per-process",
        type=_positive_int,
        default=1,
        metavar="N",
        help="how many consumers of this group one process runs (fetch memory; default 1)",
    )
    doctor.add_argument(
        "--fetch-memory-budget",
        type=_size,
        default=DEFAULT_BUDGET,
        metavar="BYTES",
        help="memory one process may spend on fetch buffers: bytes, or with KiB/MiB/GiB (default 1GiB)",
    )
    doctor.add_argument(
        "--observe",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="watch the group's membership this long first (static membership finding; default 0: not watched)",
    )
    doctor.add_argument(
        "--migrate",
        action="store_true",
        help="check moving the group to group.protocol=consumer (KIP-848): the brokers' support and policy, "
        "the consumer config's classic-only keys (give the config the members run with today), and whether "
        "the broker can convert the group",
    )
    doctor.add_argument(
        "--processing-time",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="share groups: the longest one record's processing takes, judged against the group's lock "
        "(lock_too_short, batch_outlives_lock)",
    )
    doctor.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    dead_letters.add_command(commands)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 512MiB or 1073741824, got {text!r}")
    return int(match.group(1)) * _UNITS[unit]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 to 3600 seconds, got {text!r}")
    return value


def read_properties(lines: Sequence[str], source: str) -> dict[str, str]:
    """librdkafka-style properties: ``key=value`` lines; blank lines and ``#`` comments skipped."""
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{source}:{number}: expected key=value, got {text!r}")
        out[key.strip()] = value.strip()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    if args.command == "dead-letters":
        return dead_letters.run(args)
    config: dict[str, Any] = {}
    if args.consumer_config is not None:
        with args.consumer_config as f:
            try:
                config = read_properties(f.read().splitlines(), f.name)
            except ValueError as exc:
                parser.error(f"--consumer-config: {exc}")
    # -X reaches the admin connection as given (librdkafka judges it); the file only its
    # connection settings. Both describe the members' consumer config.
    connection = {**admin_config(config, "doctor"), **dict(args.config)}
    config.update(dict(args.config))
    try:
        FetchLimits.from_config(config)
    except ValueError as exc:
        parser.error(str(exc))
    polled = str(config.get("max.poll.records", "1")).strip()
    if not polled.isdigit() or int(polled) < 1:
        parser.error(f"max.poll.records: expected a whole number of at least 1, got {polled!r}")
    try:
        report = diagnose(
            args.bootstrap_servers,
            args.group,
            config=config,
            connection=connection,
            timeout=args.timeout,
            consumers_per_process=args.consumers_per_process,
            fetch_memory_budget=args.fetch_memory_budget,
            observe=args.observe,
            migrate=args.migrate,
            processing_time=args.processing_time,
        )
    except CannotConnect as exc:
        sys.stderr.write(f"safeconsumer doctor: {exc}\n")
        return EXIT_UNREACHABLE
    sys.stdout.write((json.dumps(report.to_json(), indent=2) if args.json else render(report)) + "\n")
    return EXIT_HEALTHY if report.healthy else EXIT_FINDINGS
