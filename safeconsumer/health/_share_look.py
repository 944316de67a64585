"""A share group (KIP-932) as its coordinator describes it, asked with :mod:`._wire`.

``ShareGroupDescribe`` (API 77, v1, Kafka 4.1+) gives the group's state, assignor and members (member
id, client id, host, subscribed topics, assignment); ``DescribeShareGroupOffsets`` (API 90, v1
for the lag) gives, per partition the group has state for, its start offset (the share-partition
start offset: every record before it is acknowledged, archived or skipped) and its lag (records from
there to the end not yet acknowledged). A partition the group has no state for yet is absent:
a member's first fetch of it starts it at the group's ``share.auto.offset.reset``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..group._wire import (
    GROUP_AUTHORIZATION_FAILED,
    GROUP_ID_NOT_FOUND,
    NONE,
    RETRIABLE,
    Connection,
    KafkaProtocolError,
    Reader,
    Settings,
    Unsupported,
    WireError,
    Writer,
    bootstrap,
    find_coordinator,
)

SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS = 77, 90


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    host: str
    rack: str | None
    epoch: int
    subscribed: list[str]
    assignment: dict[str, list[int]]


@dataclass
class SharePartition:
    """Where the group stands on one partition (``start_offset`` -1: the broker has none;
    ``error``: the broker's error code for this partition, 0 if none: then nothing is known)."""

    topic: str
    partition: int
    start_offset: int
    lag: int | None
    error: int = 0


@dataclass
class ShareGroup:
    group: str
    state: str
    epoch: int
    assignor: str
    coordinator: dict[str, Any]
    members: list[ShareMember]
    partitions: list[SharePartition] = field(default_factory=list)
    #: Topic names by topic id (the share-group state log names topics by id).
    topic_ids: dict[bytes, str] = field(default_factory=dict, repr=False)


def describe_share_group(conf: dict[str, Any], bootstrap_servers: str, group: str, timeout: float) -> ShareGroup | None:
    """``group`` if it is a share group, None if the coordinator knows no share group of that id
    (another kind of group, or none). Raises :class:`WireError` (:class:`Unsupported` where the
    connection settings or the broker's versions are out of this client's reach)."""
    settings = Settings.from_config(conf)
    deadline = time.monotonic() + timeout
    with bootstrap(bootstrap_servers, settings, timeout) as first:
        while True:
            coordinator = find_coordinator(first, group, settings, max(1.0, deadline - time.monotonic()))
            try:
                described = _describe(coordinator, group)
                if described is not None:
                    described.partitions = _offsets(coordinator, group, described.topic_ids)
                return described
            except KafkaProtocolError as exc:
                # The coordinator moved or is loading (a broker restarted): asked again where it is now.
                if exc.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
            finally:
                if coordinator is not first:
                    coordinator.close()
            time.sleep(0.2)


def _describe(conn: Connection, group: str) -> ShareGroup | None:
    version = conn.version(SHARE_GROUP_DESCRIBE, 1, 1)
    body = Writer().compact_array([group], Writer.compact_string).boolean(False).tags().bytes()
    r = conn.request(SHARE_GROUP_DESCRIBE, version, body, flexible=True)
    r.int32()  # throttle
    groups = r.compact_array(lambda x: _group(x, conn))
    if not groups:
        raise WireError(f"the coordinator at {conn.address} described nothing for {group!r}")
    code, message, described = groups[0]
    if code == GROUP_ID_NOT_FOUND:
        return None
    if code == GROUP_AUTHORIZATION_FAILED:
        raise KafkaProtocolError(code, f"not authorized to describe group {group!r} (Describe on the group)")
    if code != NONE:
        raise KafkaProtocolError(code, f"cannot describe share group {group!r}: {message or f'error {code}'}")
    return described


def _group(r: Reader, conn: Connection) -> tuple[int, str | None, ShareGroup]:
    code, message = r.int16(), r.compact_string()
    group_id, state = r.compact_str(), r.compact_str()
    epoch = r.int32()
    r.int32()  # assignment epoch
    assignor = r.compact_str()
    ids: dict[bytes, str] = {}
    members = r.compact_array(lambda x: _member(x, ids))
    r.int32()  # authorized operations
    r.skip_tags()
    host, _, port = conn.address.rpartition(":")
    members.sort(key=lambda m: (m.client_id, m.member_id))
    return (
        code,
        message,
        ShareGroup(
            group_id,
            state.lower(),
            epoch,
            assignor,
            {"id": conn.node_id, "host": host, "port": int(port)},
            members,
            topic_ids=ids,
        ),
    )


def _member(r: Reader, ids: dict[bytes, str]) -> ShareMember:
    member_id, rack, epoch = r.compact_str(), r.compact_string(), r.int32()
    client_id, host = r.compact_str(), r.compact_str()
    subscribed = r.compact_array(Reader.compact_str)
    assignment: dict[str, list[int]] = {}
    for topic_id, topic, partitions in r.compact_array(_topic_partitions):
        ids[topic_id] = topic
        assignment.setdefault(topic, []).extend(partitions)
    r.skip_tags()  # the Assignment struct's
    r.skip_tags()
    return ShareMember(
        member_id,
        client_id,
        host,
        rack,
        epoch,
        sorted(subscribed),
        {t: sorted(p) for t, p in sorted(assignment.items())},
    )


def _topic_partitions(r: Reader) -> tuple[bytes, str, list[int]]:
    topic_id = r.uuid()
    topic = r.compact_str()
    partitions = r.compact_array(Reader.int32)
    r.skip_tags()
    return topic_id, topic, partitions


def _offsets(conn: Connection, group: str, ids: dict[bytes, str]) -> list[SharePartition]:
    try:
        version = conn.version(DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
    except Unsupported:
        return []
    body = (
        Writer()
        .compact_array([group], lambda w, g: w.compact_string(g).uvarint(0).tags())  # topics null: all of them
        .tags()
        .bytes()
    )
    r = conn.request(DESCRIBE_SHARE_GROUP_OFFSETS, version, body, flexible=True)
    r.int32()  # throttle
    out: list[SharePartition] = []

    def partition(x: Reader, topic: str) -> None:
        index, start = x.int32(), x.int64()
        x.int32()  # leader epoch
        lag = x.int64() if version >= 1 else -1
        code = x.int16()
        x.compact_string()
        x.skip_tags()
        if code == NONE:
            out.append(SharePartition(topic, index, start, None if lag < 0 else lag))
        else:  # not readable (an ACL, ...): unknown, never taken for "no state"
            out.append(SharePartition(topic, index, -1, None, code))

    def topic(x: Reader) -> None:
        name = x.compact_str()
        ids[x.uuid()] = name
        x.compact_array(lambda y: partition(y, name))
        x.skip_tags()

    def one_group(x: Reader) -> tuple[int, str | None]:
        x.compact_str()
        x.compact_array(topic)
        code, message = x.int16(), x.compact_string()
        x.skip_tags()
        return code, message

    results = r.compact_array(one_group)
    if results and results[0][0] not in (NONE, GROUP_ID_NOT_FOUND):
        code, message = results[0]
        raise KafkaProtocolError(code, f"cannot read share group {group!r}'s offsets: {message or f'error {code}'}")
    return sorted(out, key=lambda p: (p.topic, p.partition))
