"""The doctor on a share group (KIP-932): what it reads, what it finds, how it shows it.

The group itself comes from :mod:`._share_look` (members, assignment, where the group stands on each
partition and its lag); its settings from the admin API (the GROUP config resource:
``share.auto.offset.reset``, ``share.record.lock.duration.ms``, ``share.delivery.count.limit``,
the broker's where the group has none); each partition's start and end from ``list_offsets``.

Findings (pure, :func:`share_findings`):

- ``share_start_latest``: the group starts at ``latest`` because nobody chose otherwise (the broker's
  default), and partitions where it has no start yet hold records: a member's first fetch there
  skips everything already there, silently (where the group has a start, what lies before it was
  processed or skipped: the broker does not say which, and the doctor does not guess);
- ``lock_too_short`` (with ``--processing-time``): one record takes as long as the group's lock or
  longer: the broker hands it to another member while it is processed (done twice), and archives it
  after ``share.delivery.count.limit`` such deliveries;
- ``batch_outlives_lock`` (with ``--processing-time``): a batch of ``max.poll.records`` takes longer
  than the lock: its tail is processed twice by a raw ``ShareConsumer`` (SafeShareConsumer gives
  it back unprocessed, and each delivery counts toward the limit);
- ``share_archived`` (with ``--observe``): the share-group state log (:mod:`._share_state`) showed
  records archived while watched, past the delivery count limit or rejected: never delivered again;
- ``share_dlq_cannot_copy``: the group names a dead-letter queue in the broker (Kafka 4.4, KIP-1191)
  that the broker cannot write a full copy to (``share.version`` below 2, a topic that does not exist,
  lacks ``errors.deadletterqueue.group.enable=true`` or the brokers' name prefix, or copies without
  the record): the broker accepts such a config without a word and, at each archive, logs an error
  and archives the record without a copy;
- ``share_no_dlq``: on a cluster with share-group DLQs (``share.version`` 2), the group has none: what
  it archives (rejected, or past its delivery count limit) leaves no copy in the broker;
- ``share_no_progress`` (with ``--observe`` of at least :data:`NO_PROGRESS_LOCKS` locks): an assigned
  partition with records to deliver whose start did not move while watched: records are redelivered
  (work past the lock, or a record failing again and again toward its archive).

What no client-visible API gives is said, not guessed: the number of records in flight (the
broker's metrics only), and archived records before the watch (the state log keeps only what lies
past the group's start); the state log's counts are lower bounds (a change the coordinator writes
as a full snapshot is not counted). Whether a record given back was released or its lock ran out the log does not
say; lock overruns are seen by the members (SafeShareConsumer's ``lock_overruns``, its WARNINGs and
its telemetry).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ..group._dlq import DLQ_SHARE_VERSION, BrokerDlq, check_broker_dlq, share_version
from ..group._share import DEFAULT_DELIVERY_LIMIT, DEFAULT_LOCK_MS, read_settings, watermarks
from ..group._wire import WireError
from ..share._batch import RELEASE_AT
from ._findings import Finding
from ._share_look import ShareGroup, describe_share_group
from ._share_state import StateWatch

#: librdkafka's default ``max.poll.records`` for a share consumer.
DEFAULT_MAX_POLL_RECORDS = 500

#: The broker settings that cap a group's lock duration, and give a group without its own settings
#: its lock and delivery count limit.
MAX_LOCK = "group.share.max.record.lock.duration.ms"
BROKER_LOCK = "group.share.record.lock.duration.ms"
BROKER_LIMIT = "group.share.delivery.count.limit"

#: How many of the group's locks ``--observe`` must cover before a start that did not move is a
#: finding (the broker writes a new start at the write after the acknowledgements that allow it).
NO_PROGRESS_LOCKS = 2


def share_section(
    admin: AdminClient,
    described: ShareGroup,
    broker_settings: Mapping[str, str] | None,
    *,
    config: Mapping[str, Any],
    processing_time: float | None,
    timeout: float,
    connection: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report's ``share`` object: the group's settings, its dead-letter queue in the broker and
    where it stands on each partition. ``connection``: the client settings (the cluster's feature
    levels are read with them)."""
    group = described.group
    brokers = broker_settings or {}
    dlq: dict[str, Any] | None = None
    try:
        settings = read_settings(admin, group, timeout)
        start, start_set = settings.auto_offset_reset, settings.reset_is_the_groups
        lock_ms, limit = settings.lock_ms, settings.delivery_limit
        readable = True
    except (KafkaException, concurrent.futures.TimeoutError):
        # The group's own settings unreadable: the coordinator's defaults for every group, if read.
        start, start_set, readable = "latest", False, False
        lock_ms = _number(brokers.get(BROKER_LOCK)) or DEFAULT_LOCK_MS
        limit = _number(brokers.get(BROKER_LIMIT)) or DEFAULT_DELIVERY_LIMIT
    if readable and settings.dlq.known and connection is not None:
        dlq = _dlq_section(settings.dlq, admin, connection, timeout)
    topics = sorted({t for m in described.members for t in m.subscribed} | {p.topic for p in described.partitions})
    low: dict[tuple[str, int], int] = {}
    high: dict[tuple[str, int], int] = {}
    with contextlib.suppress(KafkaException, concurrent.futures.TimeoutError):
        low, high = watermarks(admin, topics, timeout)
    stands = {(p.topic, p.partition): p for p in described.partitions}
    rows: list[dict[str, Any]] = []
    for key in sorted(set(high) | set(stands)):
        there = stands.get(key)
        error = there.error if there is not None and there.error else None
        offset = there.start_offset if there is not None and there.start_offset >= 0 and not error else None
        begin, end = low.get(key), high.get(key)
        unstarted: int | None = None  # what a first fetch at latest skips: known only with no start
        if offset is None and error is None and begin is not None and end is not None:
            unstarted = max(0, end - begin)
        rows.append(
            {
                "topic": key[0],
                "partition": key[1],
                "log_start": begin,
                "log_end": end,
                "start_offset": offset,
                "lag": None if there is None or error else there.lag,
                "unstarted_records": unstarted,
                "error": error,
            }
        )
    return {
        "epoch": described.epoch,
        "settings_readable": readable,
        "start": start,
        "start_set_on_group": start_set,
        "lock_ms": lock_ms,
        "max_lock_ms": _number(brokers.get(MAX_LOCK)),
        "delivery_count_limit": limit,
        "max_poll_records": _number(config.get("max.poll.records")) or DEFAULT_MAX_POLL_RECORDS,
        "processing_time": processing_time,
        "lag": sum(r["lag"] or 0 for r in rows) if any(r["lag"] is not None for r in rows) else None,
        "partitions": rows,
        "in_flight": None,  # not told to clients (the broker's metrics only)
        "archived": None,
        "dlq": dlq,  # None: the cluster has no share-group DLQs (before Kafka 4.4) or it was not read
    }


def _dlq_section(dlq: BrokerDlq, admin: AdminClient, connection: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """The group's dead-letter queue in the broker (Kafka 4.4): its topic, copy mode, the cluster's
    ``share.version``, and why the broker cannot write a full copy to it (None: it can; ``unchecked``
    says why that could not be told)."""
    level = share_version(connection, timeout)
    section: dict[str, Any] = {
        "topic": dlq.topic or None,
        "copy_record": dlq.copy_record,
        "share_version": level,
        "problem": None,
        "unchecked": None,
    }
    if not dlq.topic:
        return section
    if level is None:
        section["unchecked"] = "the cluster's share.version could not be read"
        return section
    try:
        section["problem"] = check_broker_dlq(dlq, admin, connection, timeout, level=level).problem
    except (KafkaException, concurrent.futures.TimeoutError) as exc:
        section["unchecked"] = f"could not be checked: {exc}"
    return section


def _number(value: object) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.lstrip("-").isdigit() else None


def observe_share(
    conf: dict[str, Any], bootstrap_servers: str, group: str, seconds: float, timeout: float
) -> tuple[list[ShareGroup], dict[str, Any]]:
    """Describe the share group every half second for ``seconds``, and read the share-group state
    log meanwhile (:mod:`._share_state`): the snapshots (a describe that failed says nothing and
    is left out), and what the log showed (``{"error": why}`` if it could not be read)."""
    snapshots: list[ShareGroup] = []
    watch: StateWatch | None = None
    log: dict[str, Any] = {}
    try:
        watch = StateWatch({**conf, "bootstrap.servers": bootstrap_servers}, group, timeout)
    except WireError as exc:
        log = {"error": str(exc)}
    deadline = time.monotonic() + seconds
    try:
        while True:
            with contextlib.suppress(WireError):
                described = describe_share_group(conf, bootstrap_servers, group, min(timeout, 5.0))
                if described is not None:
                    snapshots.append(described)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wait = min(0.5, remaining)
            if watch is None:
                time.sleep(wait)
                continue
            try:
                watch.read(snapshots[-1].topic_ids if snapshots else {}, wait)
            except WireError as exc:
                log = {"error": str(exc)}
                watch.close()
                watch = None
        if watch is not None:
            try:
                watch.read(snapshots[-1].topic_ids if snapshots else {}, 0.5)  # the last writes of the window
                log = watch.seen.to_json()
            except WireError as exc:
                log = {"error": str(exc)}
    finally:
        if watch is not None:
            watch.close()
    return snapshots, log


def progress(snapshots: list[ShareGroup]) -> list[dict[str, Any]]:
    """Partitions whose start never moved across the snapshots, while records waited there (a lag) or
    the group had acknowledged nothing there yet (no start: ``start_offset`` None, ``lag`` None;
    :func:`share_findings` judges those by the group's start)."""
    if len(snapshots) < 2:
        return []
    still: list[dict[str, Any]] = []
    # Partitions a member is assigned now: one nobody consumes any more keeps its lag, and says nothing.
    assigned = {(t, p) for m in snapshots[-1].members for t, ps in m.assignment.items() for p in ps}
    known = {(p.topic, p.partition) for p in snapshots[0].partitions if not p.error}
    for key in sorted(known & assigned):
        seen = [{(q.topic, q.partition): q for q in s.partitions}.get(key) for s in snapshots]
        # A start first told (the broker writes the group's state at its first acknowledgement or
        # lock expiry) is not a move; one that changed after is.
        starts = {q.start_offset for q in seen if q is not None and q.start_offset >= 0}
        kept = [q for q in seen if q is not None and (q.lag or q.start_offset < 0)]
        if len(kept) == len(seen) and len(starts) <= 1:
            start = starts.pop() if starts else None
            still.append({"topic": key[0], "partition": key[1], "start_offset": start, "lag": kept[-1].lag})
    return still


def _waiting(share: Mapping[str, Any], stuck: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of the partitions :func:`progress` found, those where records certainly wait: a lag, or no
    acknowledgement yet on a group that starts at earliest on a partition holding records (at
    latest, a partition without a start may have nothing to deliver)."""
    held = {(r["topic"], r["partition"]): (r["log_end"] or 0) - (r["log_start"] or 0) for r in share["partitions"]}
    return [
        r
        for r in stuck
        if r["lag"]
        or (
            r["start_offset"] is None and share["start"] == "earliest" and held.get((r["topic"], r["partition"]), 0) > 0
        )
    ]


def share_findings(
    group: str, members: int, share: Mapping[str, Any], observed: Mapping[str, Any] | None
) -> list[Finding]:
    """Everything worth an operator's attention in a described share group (pure: unit-tested)."""
    out: list[Finding] = []
    lock_s = share["lock_ms"] / 1000
    if share["start"] == "latest" and not share["start_set_on_group"] and share["settings_readable"]:
        before = [r for r in share["partitions"] if r["unstarted_records"]]
        total = sum(r["unstarted_records"] for r in before)
        if total:
            topics = sorted({r["topic"] for r in before})
            out.append(
                Finding(
                    "share_start_latest",
                    "warning",
                    f"share group {group!r} starts at latest (share.auto.offset.reset is the broker's default, not "
                    f"set on the group), and has no start yet on {len(before)} partition(s) of {', '.join(topics)} "
                    f"holding {total} record(s): a member's first fetch there skips what is already there (all "
                    "of it, if it was there when the group began), and nothing says so",
                    "If the group must process what its topics hold, start it at earliest while it has no state "
                    "(SafeShareConsumer(start='earliest'), or kafka-share-groups.sh --reset-offsets --to-earliest "
                    "with no member running). If latest is meant, set share.auto.offset.reset=latest on the group "
                    "(kafka-configs.sh --entity-type groups) so that the choice is written down.",
                    {
                        "unstarted_records": total,
                        "partitions": [{k: r[k] for k in ("topic", "partition", "unstarted_records")} for r in before],
                    },
                )
            )
    processing = share.get("processing_time")
    raise_lock = (
        f"Raise share.record.lock.duration.ms on the group (kafka-configs.sh --entity-type groups --alter "
        f"--add-config); the brokers allow at most {share['max_lock_ms']} ms ({MAX_LOCK})."
        if share.get("max_lock_ms")
        else f"Raise share.record.lock.duration.ms on the group (up to the brokers' {MAX_LOCK})."
    )
    if processing is not None and members:
        limit = share["delivery_count_limit"]
        if processing >= lock_s:
            out.append(
                Finding(
                    "lock_too_short",
                    "critical",
                    f"one record takes up to {processing:g} s to process, the group's acquisition lock lasts "
                    f"{lock_s:g} s: the broker hands such a record to another member while it is still processed "
                    f"(done twice), and archives it after {limit} deliveries (share.delivery.count.limit)",
                    raise_lock + " SafeShareConsumer reports each record it still holds when its lock runs out.",
                    {"processing_time": processing, "lock_ms": share["lock_ms"], "delivery_count_limit": limit},
                )
            )
        else:
            batch = share["max_poll_records"]
            if batch * processing >= lock_s:
                fits = max(1, int(lock_s * RELEASE_AT / processing))
                out.append(
                    Finding(
                        "batch_outlives_lock",
                        "warning",
                        f"a batch of {batch} record(s) (max.poll.records) takes up to {batch * processing:g} s, past "
                        f"the group's {lock_s:g} s lock: a raw ShareConsumer processes the batch's tail twice "
                        "(another member gets it when the lock runs out); SafeShareConsumer gives the tail back "
                        f"unprocessed at {RELEASE_AT:.0%} of the lock, and each delivery counts toward "
                        f"share.delivery.count.limit={limit}",
                        f"Set max.poll.records to at most {fits} (the broker hands out whole record batches, so "
                        "polls can still be larger), or: " + raise_lock,
                        {
                            "max_poll_records": batch,
                            "processing_time": processing,
                            "batch_seconds": batch * processing,
                            "lock_ms": share["lock_ms"],
                            "fits": fits,
                        },
                    )
                )
    log = (observed or {}).get("state_log") or {}
    if log.get("archived"):
        limit = share["delivery_count_limit"]
        at_limit = sum(n for count, n in log["archived_by_delivery_count"].items() if int(count) >= limit)
        where = "; ".join(
            f"{tp} at {', '.join(f'{a}' if a == b else f'{a}-{b}' for a, b in ranges)}"
            for tp, ranges in sorted(log["archived_offsets"].items())
        )
        out.append(
            Finding(
                "share_archived",
                "warning",
                f"{log['archived']} record(s) were archived while watched ({where}): {at_limit} had reached the "
                f"group's delivery count limit of {limit}, {log['archived'] - at_limit} were rejected by a member; "
                "the broker never delivers them again and keeps no copy",
                "Find why they fail. SafeShareConsumer with poison=DeadLetter(topic) writes such a record to the "
                "dead-letter topic before rejecting it, and before its last delivery; safeconsumer dead-letters "
                "lists the copies. Records rejected after a dead-letter copy are expected here.",
                {"archived": log["archived"], "at_limit": at_limit, "offsets": log["archived_offsets"]},
            )
        )
    out += _dlq_findings(group, share)
    stuck = _waiting(share, observed.get("no_progress") or []) if observed is not None else []
    if observed is not None and observed.get("seconds", 0) >= NO_PROGRESS_LOCKS * lock_s and stuck and members:
        where = ", ".join(
            f"{r['topic']} [{r['partition']}] "
            + (f"at {r['start_offset']}" if r["start_offset"] is not None else "(nothing acknowledged there yet)")
            for r in stuck
        )
        out.append(
            Finding(
                "share_no_progress",
                "warning",
                f"watched for {observed['seconds']:g} s (at least {NO_PROGRESS_LOCKS} x the {lock_s:g} s lock), the "
                "group's start "
                f"did not move on {where} while records there wait: records are delivered again and again (work "
                "that outlives its lock, or a record failing each time until the broker archives it after "
                f"{share['delivery_count_limit']} deliveries, with no copy)",
                "Look at the members' processing of the record at that offset. SafeShareConsumer warns of each lock "
                "overrun (lock_overruns, the safeconsumer.share.lock_overruns metric) and, with "
                "poison=DeadLetter(...), copies a record to the dead-letter topic before its last delivery.",
                {"partitions": stuck, "seconds": observed["seconds"]},
            )
        )
    return out


def _dlq_findings(group: str, share: Mapping[str, Any]) -> list[Finding]:
    dlq = share.get("dlq")
    if not dlq:
        return []
    limit = share["delivery_count_limit"]
    if dlq["topic"] and dlq["problem"]:
        return [
            Finding(
                "share_dlq_cannot_copy",
                "critical",
                f"share group {group!r} names {dlq['topic']!r} its dead-letter queue, and the broker cannot write a "
                f"full copy there: {dlq['problem']}. Every record the group archives (rejected, or past "
                f"{limit} deliveries) is then archived without a copy; the broker logs an error, no client hears "
                "of it",
                "Fix what the problem names. SafeShareConsumer checks the same before relying on the broker's "
                "copies and, where it cannot, writes its own (poison=DeadLetter(topic)).",
                {"dlq": dlq},
            )
        ]
    if not dlq["topic"] and (dlq["share_version"] or 0) >= DLQ_SHARE_VERSION:
        return [
            Finding(
                "share_no_dlq",
                "warning",
                f"share group {group!r} has no dead-letter queue, on a cluster that has them (share.version "
                f"{dlq['share_version']}): what it archives (rejected, or past {limit} deliveries, "
                "share.delivery.count.limit) leaves no copy",
                "Name a topic with the brokers' prefix (dlq.), created with errors.deadletterqueue.group.enable=true, "
                "as the group's errors.deadletterqueue.topic.name with errors.deadletterqueue.copy.record.enable=true "
                "(kafka-configs.sh --entity-type groups), or SafeShareConsumer(poison=DeadLetter(topic), "
                "group_dlq=True) for a new group.",
                {"dlq": dlq},
            )
        ]
    return []


def render_share(share: Mapping[str, Any]) -> list[str]:
    """The share section of the human report."""
    start = share["start"] + (" (set on the group)" if share["start_set_on_group"] else " (the broker's default)")
    lines = [
        f"start        {start}",
        f"lock         {share['lock_ms'] / 1000:g} s per acquisition (share.record.lock.duration.ms), "
        f"archived after {share['delivery_count_limit']} deliveries (share.delivery.count.limit)",
        "lag          "
        + ("unknown" if share["lag"] is None else f"{share['lag']} record(s) not yet acknowledged")
        + "; in flight and archived: not told to clients (broker metrics)",
    ]
    dlq = share.get("dlq")
    if dlq:
        state = (
            "none"
            if not dlq["topic"]
            else f"{dlq['topic']} ({'records' if dlq['copy_record'] else 'headers only'}; "
            + (f"cannot be written: {dlq['problem']})" if dlq["problem"] else "the broker can write it)")
        )
        unchecked = f" ({dlq['unchecked']})" if dlq.get("unchecked") else ""
        lines.append(f"dlq          {state}{unchecked}, share.version {dlq['share_version']}")
    if share.get("processing_time") is not None:
        lines.append(f"processing   up to {share['processing_time']:g} s per record (--processing-time)")
    rows = [("topic", "partition", "log start", "group start", "log end", "lag", "no start, holds")]

    def text(value: Any) -> str:
        return "-" if value is None else str(value)

    for r in share["partitions"]:
        rows.append(
            (
                r["topic"],
                str(r["partition"]),
                text(r["log_start"]),
                text(r["start_offset"]),
                text(r["log_end"]),
                text(r["lag"]) if r["error"] is None else f"unreadable (error {r['error']})",
                text(r["unstarted_records"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines.append("")
    for i, row in enumerate(rows):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def share_members(described: ShareGroup) -> list[dict[str, Any]]:
    """The members as the report's ``members`` list takes them (MemberReport's fields)."""
    return [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.host,
            "instance_id": None,
            "assignment": m.assignment,
        }
        for m in described.members
    ]
