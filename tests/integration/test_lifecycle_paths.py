"""I9 one behaviour under every protocol: each lifecycle path of SPEC.md's I9 table, one test per row.

Every test runs under range (eager), cooperative-sticky and KIP-848 and asserts the same end
state under each: partition marks (``pause_state().partitions``), ``paused()``, the delivery
gate's counters (withheld, held, purged) and the group's committed offsets.

Withheld records are made the same way everywhere: records are produced first, a few are
polled, then their partition is paused. poll() takes records from librdkafka a batch at a
time and hands them out one by one, so those it already took wait at the gate: withheld.
Every test asserts that some were, so none of them is vacuous.

Topic and consumer marks are the application's intent about topics and the consumer: the
unsubscribe, unassign and on_lost rows also check that no path drops them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from safeconsumer import DeliveryStats, GroupMaxSizeReachedError, SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol, WaitTimeout, wait_until

from ..support import Received, checked_poll, checked_pump, fatal_error_of, keys, pump

#: Records produced to the partition whose records get withheld.
RECORDS = 200
#: Records delivered before that partition is paused (the rest of poll()'s batch is withheld).
DELIVERED = 5
#: Classic member ids start with the client id: the range assignor, which orders members by id,
#: then gives a partition both subscribe to to the peer. Balance does the same under the others.
PEER_CLIENT_ID = "a-peer"
MEMBER_CLIENT_ID = "z-member"

Member = tuple[SafeConsumer, Received]


def _tp(topic: str, offset: int | None = None) -> TopicPartition:
    return TopicPartition(topic, 0) if offset is None else TopicPartition(topic, 0, offset)


def _offsets(received: Received, topic: str) -> list[int]:
    """Offsets of the records of ``topic``'s partition 0 a member got, in the order it got them."""
    return [r[2] for r in received.records if r[0] == topic and r[1] == 0]


def _purged(stats: DeliveryStats) -> int:
    return stats.purged_revoked + stats.purged_lost + stats.purged_unowned + stats.purged_seek


def _committed(kafka: KafkaTestKit, group: str, topic: str) -> int:
    return kafka.committed(group, topic, 1)[0]


def _short_max_poll(protocol: Protocol) -> dict[str, Any]:
    """Settings under which a member that stops polling is dropped within seconds (keepalive off)."""
    conf: dict[str, Any] = {"max_poll_interval_ms": 3000}
    if protocol != "consumer":
        conf["session_timeout_ms"] = 3000  # librdkafka wants max.poll.interval.ms >= session.timeout.ms
    return conf


def _withhold(c: SafeConsumer, got: Received, topic: str, *, deliver: int = DELIVERED) -> DeliveryStats:
    """Have ``deliver`` records of ``topic``[0] delivered, pause it, and return the gate's counters
    once the records poll() had already taken wait at the gate (and a poll came back idle)."""
    checked_pump(
        [(c, got)], lambda: len(_offsets(got, topic)) >= deliver, timeout=45, what=f"{deliver} records of {topic}"
    )
    assert _offsets(got, topic) == list(range(deliver))
    c.pause([_tp(topic)])
    idle: list[bool] = []

    def step() -> None:
        before = len(got.records)
        checked_poll(c, got, 0.1)
        idle.append(len(got.records) == before)

    wait_until(lambda: idle[-1] and delivery_stats(c).held > 0, timeout=15, what="withheld records", step=step)
    stats = delivery_stats(c)
    assert stats.withheld > 0 and stats.held == stats.withheld, f"the scenario needs withheld records: {stats}"
    assert _offsets(got, topic) == list(range(deliver)), "a record of a paused partition was delivered"
    return stats


def _wait_committed(kafka: KafkaTestKit, group: str, topic: str, *, at: int, member: Member) -> None:
    """Keep ``member`` polling until the group's committed offset of ``topic``[0] is ``at``."""
    c, got = member
    wait_until(
        lambda: _committed(kafka, group, topic) == at,
        timeout=20,
        what=f"{topic}[0] committed at {at}",
        step=lambda: checked_poll(c, got, 0.1),
    )


#: Every member here gets a short stall bound: the guard's bound follows socket.timeout.ms (10 s here).
#: assign() or a rebalance followed at once by the pause a kept mark needs is librdkafka #2190's race:
#: the partition's fetch start can lose to the pause's newer op version and be dropped as outdated, so
#: the partition never fetches and has no position. Full-suite runs met it three times, under
#: two protocols; a raw consumer pausing and resuming 50 freshly assigned partitions under load met it
#: once in eight tries (one partition: position -1001, nothing fetched in 15 s). I11 heals
#: it within two bounds of the resume: up to 120 s with the default bound (60 s, checked every 30 s).
GUARD = {"socket_timeout_ms": 10_000}
#: Longer than the guard's reaction under :data:`GUARD` (at most 20 s) and a read.
READ_DEADLINE = 90.0


def _read_to_end(c: SafeConsumer, got: Received, topic: str, *, end: int = RECORDS) -> None:
    try:
        checked_pump(
            [(c, got)], lambda: end - 1 in _offsets(got, topic), timeout=READ_DEADLINE, what=f"{topic} read to {end}"
        )
    except WaitTimeout as exc:  # say where the partition stands, so a rare stall can be told apart
        offsets = _offsets(got, topic)
        raise WaitTimeout(
            f"{exc}: got {len(offsets)} record(s), last {offsets[-1:]}; position {c.position([_tp(topic)])}; "
            f"{delivery_stats(c)}; {c.pause_state()}"
        ) from exc


# -- rebalances ------------------------------------------------------------------------------


@dataclass
class TwoTopics:
    """A member subscribed to ``mine``, which only it ever subscribes to, and ``shared``, which a
    peer (:func:`_join_peer`) takes from it under every protocol."""

    group: str
    mine: str
    shared: str
    a: SafeConsumer
    ra: Received

    @classmethod
    def start(cls, kafka: KafkaTestKit, protocol: Protocol) -> TwoTopics:
        mine, shared, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
        a = SafeConsumer(
            kafka.consumer_conf(group, protocol, **GUARD, client_id=MEMBER_CLIENT_ID, auto_commit_interval_ms=100)
        )
        a.subscribe([mine, shared])
        return cls(group, mine, shared, a, Received())


def _join_peer(kafka: KafkaTestKit, protocol: Protocol, s: TwoTopics) -> Member:
    """A peer subscribing to ``shared`` only joins (it never commits); wait until it owns ``shared``[0]."""
    group, mine, shared, a = s.group, s.mine, s.shared, s.a
    b = SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, client_id=PEER_CLIENT_ID, enable_auto_commit=False))
    b.subscribe([shared])
    rb = Received()
    try:
        checked_pump(
            [(a, s.ra), (b, rb)],
            lambda: keys(a.assignment()) == {(mine, 0)} and keys(b.assignment()) == {(shared, 0)},
            timeout=45,
            what="the peer to own shared[0] and the member mine[0]",
        )
    except BaseException:
        b.close()
        raise
    return b, rb


def test_rebalance_keeps_the_mark_and_withheld_records_of_a_partition_that_stays(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """Row 1: the partition stays (incremental), or is revoked and returned in the same rebalance (eager)."""
    s = TwoTopics.start(kafka, protocol)
    group, mine, a, ra = s.group, s.mine, s.a, s.ra
    kafka.produce(mine, RECORDS, partitions=1)
    before = _withhold(a, ra, mine)
    _wait_committed(kafka, group, mine, at=DELIVERED, member=(a, ra))
    b, _rb = _join_peer(kafka, protocol, s)
    try:
        assert a.pause_state().partitions == {(mine, 0)}, "the mark of a partition that stayed was dropped"
        assert keys(a.paused()) == {(mine, 0)}
        after = delivery_stats(a)
        assert (after.withheld, after.held, _purged(after)) == (before.withheld, before.held, _purged(before)), (
            f"the withheld records of a partition that stayed must be kept: before {before}, after {after}"
        )
        assert _committed(kafka, group, mine) == DELIVERED, "the stored offset of a partition that stayed changed"
        a.resume([_tp(mine)])
        _read_to_end(a, ra, mine)
        assert _offsets(ra, mine) == list(range(RECORDS)), "records lost, repeated or out of order"
        assert delivery_stats(a).released == before.released + before.held, "withheld records were not released"
    finally:
        b.close()
        a.close()


def test_rebalance_drops_the_mark_and_purges_withheld_records_of_a_partition_that_leaves(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """Row 2: the partition leaves and is not returned; when it comes back later it is not paused."""
    s = TwoTopics.start(kafka, protocol)
    group, shared, a, ra = s.group, s.shared, s.a, s.ra
    kafka.produce(shared, RECORDS, partitions=1)
    before = _withhold(a, ra, shared)
    _wait_committed(kafka, group, shared, at=DELIVERED, member=(a, ra))
    b, rb = _join_peer(kafka, protocol, s)
    try:
        assert a.pause_state().partitions == frozenset(), "the mark of a partition that left must be dropped"
        assert a.paused() == []
        after = delivery_stats(a)
        assert after.held == 0, f"records of a partition that left are still withheld: {after}"
        assert after.purged_revoked - before.purged_revoked == before.held, (
            f"every withheld record of the partition that left must be purged and counted: before {before}, "
            f"after {after}"
        )
        assert _committed(kafka, group, shared) == DELIVERED, "the final store before revoke must be what was delivered"
        _read_to_end(b, rb, shared)
        assert _offsets(rb, shared) == list(range(DELIVERED, RECORDS)), "the next owner must start where A stopped"
    finally:
        b.close()
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="shared[0] back on the member")
    assert a.paused() == [], "a partition that left and came back must not be paused"
    _read_to_end(a, ra, shared)
    assert _offsets(ra, shared) == list(range(RECORDS)), "records lost, repeated or out of order"
    a.close()


# -- the application's own calls ---------------------------------------------------------------


def _assert_marks_after_rejoin(c: SafeConsumer, paused_topic: str, *, consumer: bool) -> None:
    state = c.pause_state()
    assert state.topics == {paused_topic}, f"a topic mark was dropped: {state}"
    assert state.consumer is consumer, f"the consumer mark changed: {state}"
    assert state.partitions == frozenset(), f"the partition mark must be dropped: {state}"


def _assert_purged(before: DeliveryStats, after: DeliveryStats) -> None:
    assert after.held == 0, f"withheld records survived: {after}"
    assert _purged(after) - _purged(before) == before.held, (
        f"every withheld record must be purged and counted: before {before}, after {after}"
    )


def test_unsubscribe_then_subscribe_drops_partition_marks_and_withheld_records(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """Row 3: the partition comes back unpaused and is read from the offset stored before unsubscribe."""
    topic, other, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=1)
    kafka.produce(other, 20, partitions=1)
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=100)), Received()
    a.subscribe([topic, other])
    a.pause_topics([other])
    before = _withhold(a, ra, topic)
    _wait_committed(kafka, group, topic, at=DELIVERED, member=(a, ra))
    a.pause()
    a.unsubscribe()
    checked_pump([(a, ra)], lambda: not a.assignment(), timeout=30, what="the unsubscribe to revoke everything")
    a.subscribe([topic, other])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="both partitions assigned again")
    try:
        _assert_marks_after_rejoin(a, other, consumer=True)
        assert keys(a.paused()) == {(topic, 0), (other, 0)}, "the consumer mark covers every partition"
        _assert_purged(before, delivery_stats(a))
        assert _committed(kafka, group, topic) == DELIVERED, "the offset stored before unsubscribe changed"
        a.resume()
        assert keys(a.paused()) == {(other, 0)}, f"only the topic mark may pause now: {a.pause_state()}"
        _read_to_end(a, ra, topic)
        assert _offsets(ra, topic) == list(range(RECORDS)), "records lost, repeated or out of order"
        assert not _offsets(ra, other), "a record of a topic-paused partition was delivered"
    finally:
        a.close()


# Serial, as its sibling below: it is librdkafka #2190's sequence (see GUARD), which load makes likelier.
# A KIP-848 run under the parallel phase's load once read nothing for 90 s after incremental_unassign,
# incremental_assign and a consumer pause, and a serial cooperative-sticky unassign run did the same in
# CI, both with the default stall bound, under which I11 heals it only after up to 120 s.
@pytest.mark.serial
@pytest.mark.parametrize("how", ["unassign", "incremental_unassign"])
def test_unassign_then_assign_drops_partition_marks_and_withheld_records(
    kafka: KafkaTestKit, protocol: Protocol, how: str
) -> None:
    """Row 4, for an assign()-based consumer: read again from the offset stored before unassign."""
    topic, other, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=1)
    kafka.produce(other, 20, partitions=1)
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=100)), Received()
    a.assign([_tp(topic), _tp(other)])
    a.pause_topics([other])
    before = _withhold(a, ra, topic)
    _wait_committed(kafka, group, topic, at=DELIVERED, member=(a, ra))
    a.pause()
    if how == "unassign":
        a.unassign()
        a.assign([_tp(topic), _tp(other)])
    else:
        a.incremental_unassign([_tp(topic)])
        a.incremental_assign([_tp(topic)])
    try:
        assert keys(a.assignment()) == {(topic, 0), (other, 0)}
        _assert_marks_after_rejoin(a, other, consumer=True)
        assert keys(a.paused()) == {(topic, 0), (other, 0)}, "the consumer mark covers every partition"
        _assert_purged(before, delivery_stats(a))
        assert _committed(kafka, group, topic) == DELIVERED, "the offset stored before unassign changed"
        a.resume()
        assert keys(a.paused()) == {(other, 0)}, f"only the topic mark may pause now: {a.pause_state()}"
        _read_to_end(a, ra, topic)
        assert _offsets(ra, topic) == list(range(RECORDS)), "records lost, repeated or out of order"
        assert not _offsets(ra, other), "a record of a topic-paused partition was delivered"
    finally:
        a.close()


# Serial: under the parallel phase's load this test once timed out with nothing fetched after the
# resume (1 of 1,283 tests; 36 runs under a lighter load passed): assign() at an explicit offset
# followed at once by the pause the kept mark needs is librdkafka #2190's sequence (see GUARD).
@pytest.mark.serial
def test_assign_at_an_explicit_offset_keeps_the_mark_and_reads_from_that_offset(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """Row 5: assign() of a partition already owned, rewound: nothing withheld from the old position survives."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=1)
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=100)), Received()
    a.assign([_tp(topic)])
    delivered, rewind = 20, 7
    before = _withhold(a, ra, topic, deliver=delivered)
    _wait_committed(kafka, group, topic, at=delivered, member=(a, ra))
    a.assign([_tp(topic, rewind)])
    try:
        assert a.pause_state().partitions == {(topic, 0)}, "assign() of an owned partition must keep its mark"
        assert keys(a.paused()) == {(topic, 0)}
        _assert_purged(before, delivery_stats(a))
        assert _committed(kafka, group, topic) <= delivered, "an offset past what was delivered was committed"
        a.resume([_tp(topic)])
        _read_to_end(a, ra, topic)
        assert _offsets(ra, topic) == list(range(delivered)) + list(range(rewind, RECORDS)), (
            "after the assign() the partition must be read from the explicit offset, in order, once"
        )
        _wait_committed(kafka, group, topic, at=RECORDS, member=(a, ra))
    finally:
        a.close()


# -- the member is dropped, closes, or fails ------------------------------------------------------


def test_on_lost_drops_marks_and_withheld_records_and_commits_nothing_for_them(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """Row 6: max.poll.interval.ms exceeded with keepalive off; the member rejoins on its next poll."""
    topic, other, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=1)
    conf = kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=100, **_short_max_poll(protocol))
    a, ra = SafeConsumer(conf, keepalive="off"), Received()
    lost: list[set[tuple[str, int]]] = []
    moves: list[str] = []

    def on_lost(_c: object, partitions: list[TopicPartition]) -> None:
        lost.append(keys(partitions))
        moves.append("lost")

    a.subscribe([topic, other], on_lost=on_lost, on_assign=lambda _c, _p: moves.append("assigned"))
    a.pause_topics([other])
    before = _withhold(a, ra, topic)
    _wait_committed(kafka, group, topic, at=DELIVERED, member=(a, ra))
    try:
        # The application stops polling (no keepalive): librdkafka leaves the group for it.
        wait_until(
            lambda: not kafka.describe_group(group).members,
            timeout=30,
            interval=0.5,
            what="the member that stopped polling to leave the group",
        )
        checked_pump([(a, ra)], lambda: lost, timeout=30, what="on_lost")
        assert (topic, 0) in lost[0]
        # As upstream, the poll() that runs on_lost may also run the re-assignment.
        assert not a.owns(_tp(topic)) or moves[-1] == "assigned", "the lost partition is owned without a new assignment"
        _assert_marks_after_rejoin(a, other, consumer=False)
        after = delivery_stats(a)
        assert after.held == 0, f"records of a lost partition are still withheld: {after}"
        assert after.purged_lost - before.purged_lost == before.held, (
            f"every withheld record of the lost partition must be purged and counted: before {before}, after {after}"
        )
        assert _committed(kafka, group, topic) == DELIVERED, "something was committed for the lost partition"
        checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="the member back with both")
        assert keys(a.paused()) == {(other, 0)}, f"the lost partition must come back unpaused: {a.pause_state()}"
        _assert_marks_after_rejoin(a, other, consumer=False)
        _read_to_end(a, ra, topic)
        assert _offsets(ra, topic) == list(range(RECORDS)), "records lost, repeated or out of order"
    finally:
        a.close()


def test_close_purges_withheld_records_and_commits_what_was_delivered(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """Row 7: close() stores what the application came back from, then auto-commits it, and nothing else."""
    topic, last, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=1)
    # No periodic auto-commit during the test: the commit under test is close()'s.
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=600_000)), Received()
    a.subscribe([topic, last])
    before = _withhold(a, ra, topic)
    kafka.produce(last, 3, partitions=1)
    checked_pump([(a, ra)], lambda: _offsets(ra, last), timeout=30, what="a record of the second topic")
    assert _offsets(ra, last) == [0]
    assert (_committed(kafka, group, topic), _committed(kafka, group, last)) == (-1001, -1001)
    a.close()  # straight after a record was handed out: close() is the application coming back
    after = delivery_stats(a)
    assert after.held == 0, f"records are still withheld after close(): {after}"
    assert _purged(after) - _purged(before) >= before.held, f"withheld records were not purged: {after}"
    committed = {t: _committed(kafka, group, t) for t in (topic, last)}
    assert committed == {topic: DELIVERED, last: 1}, "close() must commit exactly what was delivered"


def test_a_fatal_error_stores_nothing_more(full_group_kafka: KafkaTestKit, protocol: Protocol) -> None:
    """Row 8: a member with withheld records is dropped, two others fill the group, its rejoin is fatal."""
    kafka = full_group_kafka
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    kafka.produce(topic, RECORDS, partitions=[0])
    conf = kafka.consumer_conf(group, protocol, **GUARD, auto_commit_interval_ms=100, **_short_max_poll(protocol))
    a, ra = SafeConsumer(conf, keepalive="off"), Received()
    a.subscribe([topic])
    before = _withhold(a, ra, topic)
    _wait_committed(kafka, group, topic, at=DELIVERED, member=(a, ra))
    wait_until(
        lambda: not kafka.describe_group(group).members,
        timeout=30,
        interval=0.5,
        what="the member that stopped polling to leave the group",
    )
    others = [
        (SafeConsumer(kafka.consumer_conf(group, protocol, **GUARD, enable_auto_commit=False)), Received())
        for _ in "bc"
    ]
    for c, _ in others:
        c.subscribe([topic])
    try:
        pump(others, lambda: all(len(c.assignment()) == 1 for c, _ in others), timeout=45, what="a full group")
        err = fatal_error_of(a, others, timeout=30)
        assert isinstance(err, GroupMaxSizeReachedError), err
        after = delivery_stats(a)
        assert after.held == 0 and _purged(after) - _purged(before) >= before.held, f"withheld records kept: {after}"
        assert kafka.committed(group, topic, 2) == {0: DELIVERED, 1: -1001}
        with pytest.raises(GroupMaxSizeReachedError):
            a.store_offsets(offsets=[TopicPartition(topic, 0, RECORDS)])
        with pytest.raises(GroupMaxSizeReachedError):
            a.commit(asynchronous=False)
        # The next owner of partition 0 reads what the failed member withheld; nothing else committed.
        owner = next(member for member in others if (topic, 0) in keys(member[0].assignment()))
        pump([owner], lambda: RECORDS - 1 in _offsets(owner[1], topic), timeout=45, what="partition 0 read to its end")
        # (Neither commits: a rebalance between them may hand partition 0 over and repeat records.)
        assert {r[2] for _, got in others for r in got.records} == set(range(DELIVERED, RECORDS))
        assert kafka.committed(group, topic, 2) == {0: DELIVERED, 1: -1001}, "something was stored after the error"
    finally:
        for c, _ in others:
            c.close()
