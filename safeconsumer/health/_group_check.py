"""The doctor's findings from a described group (pure): its own checks, then ``--migrate``'s and a share group's."""

from __future__ import annotations

import math
from typing import Any

from ..group._memory import FetchEstimate, FetchLimits, estimate, mib
from ._findings import Finding
from ._migrate_check import migration_findings
from ._report import MemberReport, Report
from ._share_check import share_findings

#: Share of the broker's group size limit from which ``group_size`` is reported.
SIZE_WARNING = 0.8

#: Membership changes within ``--observe`` from which a group "rebalances often".
OFTEN = 2

#: Bytes a fetch response adds around one record batch (librdkafka's own margin).
RESPONSE_MARGIN = 512


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
