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
by its coordinator through :mod:`..group._wire` and judged by :mod:`._share_check` (``share_start_latest``,
``lock_too_short``, ``batch_outlives_lock`` with ``--processing-time``, ``share_no_progress`` and
``share_archived`` with ``--observe``, ``group_size``, ``group_empty``).

This module gathers, checks and reports (:func:`diagnose`, :func:`main`); its parts: what it reads
from the cluster (:mod:`._group_look`), the findings above (:mod:`._group_check`), the report and
its text (:mod:`._report`), the command line (:mod:`._doctor_cli`).

Exit status: 0 healthy, 1 findings, 2 cannot connect (or bad arguments). ``--json`` prints one
object whose shape is documented in ``docs/group-health.md`` (``"schema": 1``).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ..base._clients import HELPER_LOG, admin_config
from ..base._errors import is_auth_failure
from ..group._describe import describe_group
from ..group._memory import FetchLimits
from . import dead_letters
from ._doctor_cli import build_parser, read_properties
from ._group_check import fetch_memory, findings
from ._group_look import (
    broker_settings,
    member_reports,
    membership_changes,
    name_of,
    observe_members,
    probe_share,
    share_member_reports,
    size_limit,
    topic_limits,
)
from ._migrate_check import NOT_A_CONSUMER_GROUP, group_config, migration_plan
from ._report import DEFAULT_BUDGET, SCHEMA, MemberReport, Report, render
from ._share_check import observe_share, progress, share_section
from ._share_look import ShareGroup

# The doctor's names, where the console script, safeconsumer.doctor and the tests reach them.
__all__ = [
    "CannotConnect",
    "MemberReport",
    "Report",
    "SCHEMA",
    "build_parser",
    "diagnose",
    "fetch_memory",
    "findings",
    "main",
    "membership_changes",
    "read_properties",
    "render",
]

EXIT_HEALTHY, EXIT_FINDINGS, EXIT_UNREACHABLE = 0, 1, 2


class CannotConnect(Exception):
    """The cluster did not answer (the doctor exits with status 2)."""


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
    librdkafka does not describe: the doctor then asks the coordinator itself (:mod:`..group._wire`).
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
    shared, share_check = probe_share(first, wire_conf, bootstrap_servers, group, timeout)
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
        observed = observe_members(admin, group, observe, timeout)
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
    members = member_reports(description) if description is not None else []
    protocol = name_of(getattr(description, "type", "classic"))
    if protocol not in ("classic", "consumer"):
        protocol = "classic"
    coordinator = description.coordinator if description is not None else None
    coord = None if coordinator is None else {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port}
    # The brokers' group settings are alike; a group of another protocol type has no coordinator here.
    asked = coordinator.id if coordinator is not None else min(cluster.brokers, default=None) if migrate else None
    settings = broker_settings(admin, asked, timeout)
    report = Report(
        group=group,
        bootstrap_servers=bootstrap_servers,
        protocol=protocol,
        state=name_of(description.state) if description is not None else "unknown",
        assignor=(description.partition_assignor or "") if description is not None else "",
        coordinator=coord,
        limit=size_limit(settings if coordinator is not None else None, protocol),
        members=members,
        findings=[],
        consumer=asdict(limits),
        brokers=len(cluster.brokers) or None,
        consumers_per_process=consumers_per_process,
        fetch_memory_budget=fetch_memory_budget,
        topics=topic_limits(admin, sorted({t for m in members for t in m.assignment}), timeout),
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
        changes = membership_changes([share_member_reports(s) for s in snapshots])
        report.observed = {"seconds": observe, **changes, "no_progress": progress(snapshots), "state_log": log}
    report.members = share_member_reports(described)
    report.state, report.assignor, report.coordinator = described.state, described.assignor, described.coordinator
    settings = broker_settings(admin, described.coordinator.get("id"), timeout)
    report.limit = size_limit(settings, "share")
    report.topics = topic_limits(admin, sorted({t for m in report.members for t in m.assignment}), timeout)
    report.share = share_section(
        admin, described, settings, config=config, processing_time=processing_time, timeout=timeout, connection=conf
    )
    report.findings = findings(report)
    return report


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
