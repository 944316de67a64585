"""What the doctor reads from the cluster: a group's members, their changes, its limits, whether it is a share group."""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from ..group._describe import describe_group
from ..group._describe_process import enum_name
from ..group._wire import NotOffered, WireError
from ._migrate_check import integer
from ._report import MemberReport
from ._share_check import share_members
from ._share_look import ShareGroup, describe_share_group


def name_of(value: Any) -> str:
    """An admin API enum's name in lower case (``ConsumerGroupState.STABLE`` -> ``"stable"``)."""
    return enum_name(value).lower()


def probe_share(
    description: Any, conf: dict[str, Any], bootstrap_servers: str, group: str, timeout: float
) -> tuple[ShareGroup | None, str | None]:
    """The share group ``group``, if it is one; else None, with why the coordinator could not be
    asked (None if it answered, if librdkafka described a consumer group with members, or could not
    describe the group at all: the usual path reports that)."""
    if description is None or description.members or name_of(description.state) not in ("dead", "unknown"):
        return None, None
    try:
        return describe_share_group(conf, bootstrap_servers, group, timeout), None
    except NotOffered:
        return None, None  # a broker without share groups (before Kafka 4.1): not a share group
    except WireError as exc:
        return None, f"could not ask the coordinator whether {group!r} is a share group: {exc}"


def share_member_reports(described: ShareGroup) -> list[MemberReport]:
    """A share group's members, as the report takes them."""
    return [MemberReport(**m) for m in share_members(described)]


def member_reports(description: Any) -> list[MemberReport]:
    """The members librdkafka described, by client id and member id."""
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


def observe_members(admin: AdminClient, group: str, seconds: float, timeout: float) -> dict[str, Any]:
    """Describe the group every half second for ``seconds``; count its membership changes."""
    snapshots: list[list[MemberReport]] = []
    deadline = time.monotonic() + seconds
    while True:
        # A describe that failed says nothing about the membership.
        with contextlib.suppress(KafkaException, concurrent.futures.TimeoutError):
            snapshots.append(member_reports(describe_group(admin, group, min(timeout, 5.0))))
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


def topic_limits(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, dict[str, Any]]:
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


def _by_topic(partitions: Sequence[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return {t: sorted(p) for t, p in sorted(out.items())}


def broker_settings(admin: AdminClient, broker_id: int | None, timeout: float) -> dict[str, str] | None:
    """One broker's config (the group coordinator's), or None if unreadable (no DescribeConfigs ACL)."""
    if broker_id is None:
        return None
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    except (KafkaException, concurrent.futures.TimeoutError):
        return None
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def size_limit(settings: Mapping[str, str] | None, protocol: str) -> dict[str, Any] | None:
    """The coordinator's group size limit for the group's protocol, or None if unreadable."""
    setting = {"consumer": "group.consumer.max.size", "share": "group.share.max.size"}.get(protocol, "group.max.size")
    value = integer((settings or {}).get(setting))
    return None if value is None else {"setting": setting, "value": value}
