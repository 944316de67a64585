"""Groups between protocols: a live group moved from classic to KIP-848 and back, member by member.

First what the broker and the raw client do (characterization, Kafka 4.3.1 and confluent-kafka
2.16.1): a ``group.protocol=consumer`` member converts a classic ``range`` or ``roundrobin``
group, and a ``cooperative-sticky`` one only while it is in its first generation; once a
librdkafka cooperative-sticky group rebalanced, the broker refuses the conversion (it logs
"userData from a custom assignor would be lost", KAFKA-18134) with GROUP_ID_NOT_FOUND, which
librdkafka makes a fatal error of the joining client. librdkafka echoes each member's sticky
data into the assignments its leader sends.

Then SafeConsumer: a consumer-protocol member does not join such a group; it waits, never dies
of the refusal, and joins once the group can be converted (its classic members left), or after
``migration_timeout``, when a refusal is a :class:`GroupMigrationError` saying why and what to do.

Last, the upgrade and downgrade steps of confluent-kafka-python's own integration test
(``tests/integration/consumer/test_consumer_upgrade_downgrade.py``: one classic member, then a
consumer-protocol member joins, it leaves, under ``roundrobin``, ``range`` and
``cooperative-sticky``), written again here, run with raw members and with SafeConsumer members.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from safeconsumer import FatalConsumerError, GroupMigrationError, SafeConsumer
from safeconsumer.group._describe import GroupDescriber, GroupView
from safeconsumer.testing import Broker, KafkaTestKit, wait_until

from ..support import Received, checked_poll, checked_pump, keys

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = pytest.mark.kafka_versions

PARTITIONS = 4


def _conf(kafka: KafkaTestKit, group: str, protocol: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        **kafka.client_config,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "group.protocol": "consumer" if protocol == "consumer" else "classic",
        **extra,
    }
    if protocol != "consumer":
        # As the kit's classic configs: a member that leaves uncleanly is noticed in seconds.
        conf.update(
            {"partition.assignment.strategy": protocol, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        )
    return conf


def _polled_until(
    members: Sequence[Consumer], condition: Callable[[], object], *, what: str, timeout: float = 30.0
) -> None:
    wait_until(condition, timeout=timeout, what=what, step=lambda: [m.poll(0.05) for m in members])


def _rebalanced_classic_group(kafka: KafkaTestKit, topic: str, group: str, assignor: str) -> list[Consumer]:
    """Two raw classic members that rebalanced once after the first one's first assignment."""
    first = Consumer(_conf(kafka, group, assignor))
    first.subscribe([topic])
    _polled_until([first], lambda: len(first.assignment()) == PARTITIONS, what="the first member's assignment")
    second = Consumer(_conf(kafka, group, assignor))
    second.subscribe([topic])
    members = [first, second]
    _polled_until(
        members,
        lambda: first.assignment() and second.assignment() and kafka.describe_group(group).state == "STABLE",
        what="both members assigned, the group stable",
    )
    return members


def _fatal_event(c: Consumer, others: Sequence[Consumer], *, timeout: float) -> KafkaError | None:
    """The first _FATAL event ``c`` returns within ``timeout`` (None: none; ``c`` got partitions)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for other in others:
            other.poll(0.02)
        msg = c.poll(0.1)
        error = msg.error() if msg is not None else None
        if error is not None and error.code() == KafkaError._FATAL:
            return error
        if c.assignment():
            return None
    raise AssertionError(f"neither a fatal error nor an assignment within {timeout} s")


# -- characterization: the broker and the raw client -------------------------------------------------


def test_raw_consumer_protocol_member_dies_joining_a_rebalanced_cooperative_sticky_group(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, "cooperative-sticky")
    joiner = Consumer(_conf(kafka, group, "consumer"))
    joiner.subscribe([topic])
    error = _fatal_event(joiner, members, timeout=20)
    assert error is not None, "the broker converted a rebalanced cooperative-sticky group"
    assert "ConsumerGroupHeartbeat fatal error" in error.str()
    assert "group id does not exist" in error.str()
    # The group stays classic and its members keep their partitions.
    snapshot = kafka.describe_group(group)
    assert snapshot.type == "CLASSIC"
    assert len(snapshot.members) == 2
    joiner.close()
    for m in members:
        m.close()


def test_raw_consumer_refused_at_its_first_join_can_be_initialized_again_in_place(kafka: KafkaTestKit) -> None:
    """What a SafeConsumer refused at its first join builds on (``RawClient.renew``): once
    ``close()`` released a ``Consumer``'s failed librdkafka instance, ``Consumer.__init__`` on the
    same object creates a new one, which joins the group when it can be converted."""
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, "cooperative-sticky")
    conf = _conf(kafka, group, "consumer")
    joiner = Consumer(conf)
    joiner.subscribe([topic])
    assert _fatal_event(joiner, members, timeout=20) is not None
    joiner.close()
    with pytest.raises(RuntimeError, match="closed"):
        joiner.assignment()
    Consumer.__init__(joiner, conf)
    for m in members:
        m.close()
    joiner.subscribe([topic])
    _polled_until([joiner], lambda: len(joiner.assignment()) == PARTITIONS, what="the new instance owns them all")
    assert kafka.describe_group(group).type == "CONSUMER"
    joiner.close()


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
@pytest.mark.parametrize("rebalancing", [False, True], ids=["stable", "rebalancing"])
def test_raw_consumer_protocol_member_converts_a_rebalanced_eager_group(
    kafka: KafkaTestKit, assignor: str, rebalancing: bool
) -> None:
    """Also while the group rebalances: a classic member has just left, the other not rejoined."""
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, assignor)
    if rebalancing:
        members.pop().close()
        wait_until(lambda: kafka.describe_group(group).state != "STABLE", timeout=10, what="the group rebalancing")
    joiner = Consumer(_conf(kafka, group, "consumer"))
    joiner.subscribe([topic])
    assert _fatal_event(joiner, members, timeout=30) is None
    assert kafka.describe_group(group).type == "CONSUMER"
    joiner.close()
    for m in members:
        m.close()


def test_raw_consumer_protocol_member_converts_a_cooperative_sticky_group_in_its_first_generation(
    kafka: KafkaTestKit,
) -> None:
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    first = Consumer(_conf(kafka, group, "cooperative-sticky"))
    first.subscribe([topic])
    _polled_until([first], lambda: len(first.assignment()) == PARTITIONS, what="the first assignment")
    joiner = Consumer(_conf(kafka, group, "consumer"))
    joiner.subscribe([topic])
    assert _fatal_event(joiner, [first], timeout=30) is None
    assert kafka.describe_group(group).type == "CONSUMER"
    joiner.close()
    first.close()


# -- SafeConsumer: waits, never dies of a refusal, joins once it can --------------------------------


def test_safe_member_waits_for_an_unconvertible_group_and_joins_when_its_classic_members_leave(
    kafka: KafkaTestKit,
) -> None:
    """Beside it, a raw member dies of the same join (pinned above). The SafeConsumer neither
    dies nor disturbs the classic members while it waits; once they close, it converts the group
    and reads on from their committed offsets: nothing skipped, nothing read twice."""
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, "cooperative-sticky")
    kafka.produce(topic, 40, partitions=PARTITIONS)
    classic_read: list[bytes] = []

    def classic_step() -> None:
        for m in members:
            msg = m.poll(0.02)
            if msg is not None and msg.error() is None:
                classic_read.append(msg.value() or b"")

    wait_until(
        lambda: len(classic_read) == 40, timeout=30, what="the classic members read the backlog", step=classic_step
    )
    for m in members:
        m.commit(asynchronous=False)
    before = kafka.describe_group(group)
    joiner = SafeConsumer(_conf(kafka, group, "consumer"), migration_timeout=None)
    joiner.subscribe([topic])
    # It waits: no fatal error, no join, the classic members undisturbed.
    waited_until = time.monotonic() + 4
    while time.monotonic() < waited_until:
        classic_step()
        assert joiner.poll(0.1) is None
    after = kafka.describe_group(group)
    assert after.type == "CLASSIC"
    assert after.member_ids == before.member_ids
    assert not joiner.assignment()
    for m in members:
        m.close()
    got: list[bytes] = []

    def step() -> None:
        msg = joiner.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")

    kafka.produce(topic, 40, partitions=PARTITIONS, start=40)
    wait_until(lambda: len(got) >= 40, timeout=60, what="the joiner read what came after", step=step)
    assert kafka.describe_group(group).type == "CONSUMER"
    assert sorted(int(v) for v in got) == list(range(40, 80))
    joiner.close()


def test_safe_member_refused_after_a_stale_look_waits_again_instead_of_dying(
    kafka: KafkaTestKit, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The group changed between the join gate's look and the member's first heartbeat (in a mixed
    group, the last consumer-protocol member left and the group turned classic again; seen in the
    mixed soak). Played here by a first look that answers "consumer group" for a classic
    cooperative-sticky group that rebalanced: the broker refuses the join, which kills a raw member
    (pinned above). The SafeConsumer is made anew, waits, and joins once the classic members left."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, "cooperative-sticky")
    looks: list[str] = []
    real_listed = GroupDescriber.listed

    def stale_first_look(self: GroupDescriber, timeout: float) -> GroupView | None:
        view = real_listed(self, timeout)
        if not looks and view is not None:
            view = GroupView("STABLE", {}, kind="CONSUMER")  # what the group was a moment ago
        looks.append(view.kind if view is not None else "")
        return view

    monkeypatch.setattr(GroupDescriber, "listed", stale_first_look)
    joiner = SafeConsumer(_conf(kafka, group, "consumer"), migration_timeout=None)
    joiner.subscribe([topic])

    def refused_and_waiting() -> bool:
        return any("refused this consumer-protocol member's first heartbeat" in r.getMessage() for r in caplog.records)

    got = Received()

    def step() -> None:
        for m in members:
            m.poll(0.02)
        got.add(joiner.poll(0.1))

    wait_until(refused_and_waiting, timeout=30, what="the refusal absorbed", step=step)
    assert looks[0] == "CONSUMER"
    # Waiting again: no error event, no record, the classic group undisturbed.
    wait_until(lambda: len(looks) >= 2, timeout=10, what="the gate's next look", step=step)
    assert looks[1] == "CLASSIC"
    assert got.errors == [] and got.records == []
    assert not joiner.assignment()
    snapshot = kafka.describe_group(group)
    assert snapshot.type == "CLASSIC" and len(snapshot.members) == 2
    for m in members:
        m.close()
    kafka.produce(topic, 20, partitions=PARTITIONS)
    checked_pump([(joiner, got)], lambda: len(got.records) == 20, timeout=60, what="the joiner read the backlog")
    assert kafka.describe_group(group).type == "CONSUMER"
    assert got.errors == []
    joiner.close()


#: A classic group's first rebalance after it was empty waits this long for more members, in
#: PreparingRebalance at generation 0 (the test brokers set 0). Kafka's default is 3 s; the tests
#: take 10: they must see the group preparing and have a joiner heartbeat inside that window, and
#: on a loaded machine (a full parallel run) describing the group took longer than 3 s.
INITIAL_DELAY = {"group.initial.rebalance.delay.ms": "10000"}


def _classic_first_rebalance(kafka: KafkaTestKit, topic: str, group: str) -> Consumer:
    """A raw classic ``range`` member whose first join is under way: the group is classic and
    PreparingRebalance at generation 0 (no protocol chosen yet) for the broker's initial delay."""
    first = Consumer(_conf(kafka, group, "range"))
    first.subscribe([topic])

    def preparing() -> bool:
        try:
            return kafka.describe_group(group, timeout=5.0).state == "PREPARING_REBALANCING"
        except KafkaException:  # a loaded broker (CI) did not answer in time: asked again
            return False

    _polled_until([first], preparing, what="the first rebalance")
    return first


def test_raw_consumer_protocol_member_dies_joining_a_classic_group_in_its_first_rebalance(
    kafka_broker_factory: Callable[..., Broker],
) -> None:
    """Kafka 4.3.1 cannot convert a classic group whose first rebalance has not completed: the
    conversion reads the group's protocol, which it does not have yet (NoSuchElementException in
    ``ConsumerGroup.fromClassicGroup``), and answers the heartbeat UNKNOWN_SERVER_ERROR, which
    librdkafka makes fatal. Seen in the mixed soak: a classic member had just joined the empty group
    between the consumer-protocol member's look at it and its first heartbeat."""
    broker = kafka_broker_factory(INITIAL_DELAY)
    kafka = KafkaTestKit(broker.bootstrap_servers, prefix="first-rebalance")
    try:
        topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
        first = _classic_first_rebalance(kafka, topic, group)
        joiner = Consumer(_conf(kafka, group, "consumer"))
        joiner.subscribe([topic])
        error = _fatal_event(joiner, [first], timeout=20)
        assert error is not None, "the broker converted a classic group in its first rebalance"
        assert "ConsumerGroupHeartbeat fatal error: Unknown broker error" in error.str()
        assert broker.log_path is not None
        wait_until(
            lambda: "ConsumerGroup.fromClassicGroup" in broker.log_path.read_text(errors="replace"),  # type: ignore[union-attr]
            timeout=10,
            what="the broker's stack trace of the failed conversion",
        )
        # The classic member's rebalance completes; the group stays classic.
        _polled_until([first], lambda: len(first.assignment()) == PARTITIONS, what="the classic member's assignment")
        assert kafka.describe_group(group).type == "CLASSIC"
        joiner.close()
        first.close()
    finally:
        kafka.close()


def test_safe_member_whose_conversion_failed_in_a_first_rebalance_waits_again(
    kafka_broker_factory: Callable[..., Broker], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The soak's case: the join gate saw the group empty, a classic member joined it before the
    first heartbeat, and the broker failed the conversion (pinned above). The SafeConsumer is made
    anew, waits, and joins once the classic member left; the application sees no error."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    kafka = KafkaTestKit(kafka_broker_factory(INITIAL_DELAY).bootstrap_servers, prefix="first-rebalance")
    try:
        topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
        first = _classic_first_rebalance(kafka, topic, group)
        looks: list[str] = []
        real_listed = GroupDescriber.listed

        def stale_first_look(self: GroupDescriber, timeout: float) -> GroupView | None:
            view = real_listed(self, timeout)
            if not looks and view is not None:
                view = GroupView("EMPTY", {}, kind="CLASSIC")  # what the group was a moment ago
            looks.append(view.state if view is not None else "")
            return view

        monkeypatch.setattr(GroupDescriber, "listed", stale_first_look)
        joiner = SafeConsumer(_conf(kafka, group, "consumer"), migration_timeout=None)
        joiner.subscribe([topic])
        got = Received()

        def step() -> None:
            first.poll(0.02)
            got.add(joiner.poll(0.1))

        def failed_and_waiting() -> bool:
            return any("failed to convert" in r.getMessage() for r in caplog.records)

        wait_until(failed_and_waiting, timeout=30, what="the failed conversion absorbed", step=step)
        assert looks[0] == "EMPTY"
        wait_until(lambda: len(looks) >= 2, timeout=10, what="the gate's next look", step=step)
        assert got.errors == [] and got.records == []
        assert not joiner.assignment()
        _polled_until([first], lambda: len(first.assignment()) == PARTITIONS, what="the classic member's assignment")
        first.close()
        kafka.produce(topic, 20, partitions=PARTITIONS)
        checked_pump([(joiner, got)], lambda: len(got.records) == 20, timeout=60, what="the joiner read the backlog")
        assert kafka.describe_group(group).type == "CONSUMER"
        assert got.errors == []
        joiner.close()
    finally:
        kafka.close()


def test_safe_member_refused_after_migration_timeout_raises_group_migration_error(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    members = _rebalanced_classic_group(kafka, topic, group, "cooperative-sticky")
    joiner = SafeConsumer(_conf(kafka, group, "consumer"), migration_timeout=2.0)
    joiner.subscribe([topic])
    started = time.monotonic()
    with pytest.raises(GroupMigrationError) as raised:
        deadline = started + 30
        while time.monotonic() < deadline:
            for m in members:
                m.poll(0.02)
            joiner.poll(0.1)
    waited = time.monotonic() - started
    assert waited >= 2.0, "it joined before its migration_timeout"
    err = raised.value
    assert isinstance(err, FatalConsumerError)
    assert err.kafka_error is not None and err.kafka_error.code() == KafkaError._FATAL
    assert "classic group with members" in str(err) and "KAFKA-18134" in str(err)
    assert "group.protocol=consumer" in str(err)
    # Every later call raises it again; the classic group is undisturbed.
    with pytest.raises(GroupMigrationError):
        joiner.poll(0)
    assert kafka.describe_group(group).type == "CLASSIC"
    for m in members:
        m.close()


def test_a_classic_safe_member_joins_a_consumer_group_without_waiting(kafka: KafkaTestKit) -> None:
    """The downgrade side: a classic member is taken into a consumer group as a mixed member; when
    the last consumer-protocol member leaves, the group is classic again and keeps reading."""
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    upgraded = SafeConsumer(_conf(kafka, group, "consumer"))
    upgraded.subscribe([topic])
    _polled_until([upgraded], lambda: len(upgraded.assignment()) == PARTITIONS, what="the consumer member")
    classic = SafeConsumer(_conf(kafka, group, "cooperative-sticky"))
    classic.subscribe([topic])
    _polled_until(
        [upgraded, classic],
        lambda: classic.assignment() and len(upgraded.assignment()) + len(classic.assignment()) == PARTITIONS,
        what="the classic member in the consumer group",
    )
    assert kafka.describe_group(group).type == "CONSUMER"
    upgraded.close()
    _polled_until([classic], lambda: len(classic.assignment()) == PARTITIONS, what="the classic member alone")
    wait_until(lambda: kafka.describe_group(group).type == "CLASSIC", timeout=30, what="the group classic again")
    got: list[Message] = []
    kafka.produce(topic, 20, partitions=PARTITIONS)
    wait_until(
        lambda: len(got) == 20,
        timeout=30,
        what="the classic member reads",
        step=lambda: got.append(m) if (m := classic.poll(0.1)) is not None and m.error() is None else None,
    )
    classic.close()


# -- upstream's upgrade / downgrade scenario --------------------------------------------------------

UPSTREAM_PARTITIONS = 10


def _upstream_check(kafka: KafkaTestKit, topic: str, members: Sequence[Consumer], expected_type: str) -> None:
    """One step of upstream's scenario: the last member reaches its share, then every member has
    exactly its share, the group has the expected type, and 100 new records are read."""
    share = UPSTREAM_PARTITIONS // len(members)
    _polled_until(members, lambda: len(members[-1].assignment()) == share, what="the last member's share", timeout=90)
    counts = [len(m.assignment()) for m in members]
    assert counts == [share] * len(members), f"assignments {counts}, each should hold {share}"
    assert len({(tp.topic, tp.partition) for m in members for tp in m.assignment()}) == UPSTREAM_PARTITIONS
    assert kafka.describe_group(topic).type == expected_type
    kafka.produce(topic, 100, partitions=UPSTREAM_PARTITIONS)
    read = 0

    def step() -> None:
        nonlocal read
        for m in members:
            msg = m.poll(0.1)
            if msg is not None and msg.error() is None:
                read += 1

    wait_until(lambda: read >= 100, timeout=60, what="100 records read", step=step)
    assert read == 100


@pytest.mark.parametrize("strategy", ["roundrobin", "range", "cooperative-sticky"])
@pytest.mark.parametrize("kind", ["raw", "safe"])
def test_upstream_upgrade_downgrade_scenario(kafka: KafkaTestKit, strategy: str, kind: str) -> None:
    cls: type[Consumer] = Consumer if kind == "raw" else SafeConsumer
    topic = kafka.create_topic(partitions=UPSTREAM_PARTITIONS)
    classic = cls(_conf(kafka, topic, strategy))
    classic.subscribe([topic])
    _upstream_check(kafka, topic, [classic], "CLASSIC")
    upgraded = cls(_conf(kafka, topic, "consumer"))
    upgraded.subscribe([topic])
    _upstream_check(kafka, topic, [classic, upgraded], "CONSUMER")
    upgraded.close()
    _upstream_check(kafka, topic, [classic], "CLASSIC")
    classic.close()


def test_the_rebalance_explainer_names_each_conversion(kafka: KafkaTestKit, caplog: pytest.LogCaptureFixture) -> None:
    """A classic member's rebalances during an upgrade and a rollback: the peer is named, and so
    is what it did to the group (never ``unknown``)."""
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=PARTITIONS), kafka.name("g")
    classic = SafeConsumer(_conf(kafka, group, "range", **{"client.id": "classic-member"}))
    classic.subscribe([topic])
    _polled_until([classic], lambda: len(classic.assignment()) == PARTITIONS, what="the classic member")

    def said(text: str) -> bool:
        return any(text in r.getMessage() and "(classic/range)" in r.getMessage() for r in caplog.records)

    # The explainer's baseline (the group as this member joined it) is taken before the upgrade
    # begins: described after the upgraded member converted the group, it would be a consumer group
    # already, and there would be no conversion to name.
    wait_until(
        lambda: any("after this member joined: 1 member(s), type CLASSIC" in r.getMessage() for r in caplog.records),
        timeout=10,
        what="the classic member's baseline",
        step=lambda: classic.poll(0.05),
    )

    # migration_timeout=0: a range group converts, no need to wait for it (docs/migrating-to-kip-848.md)
    upgraded = SafeConsumer(_conf(kafka, group, "consumer", **{"client.id": "upgraded-member"}), migration_timeout=0)
    upgraded.subscribe([topic])
    _polled_until(
        [classic, upgraded],
        lambda: said("converted from the classic protocol to a consumer group"),
        what="the upgrade explained",
    )
    assert said("peer joined") and said("client.id upgraded-member")
    upgraded.close()
    _polled_until([classic], lambda: said("converted back to the classic protocol"), what="the rollback explained")
    assert said("peer left")
    assert not any("(classic/range): unknown" in r.getMessage() for r in caplog.records)
    classic.close()


# -- the invariants through an upgrade and a rollback -------------------------------------------------


def _effective(c: SafeConsumer, paused_topic: str, marked: tuple[str, int]) -> set[tuple[str, int]]:
    """What should be paused on ``c``: every owned partition of the paused topic, and the marked
    partition while it stays owned (a partition that left loses its mark)."""
    owned = keys(c.assignment())
    return {k for k in owned if k[0] == paused_topic} | ({marked} & owned)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_every_invariant_holds_through_an_upgrade_and_a_rollback(
    kafka: KafkaTestKit, strategy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SafeConsumer members on both sides: a classic member with a topic mark and a partition mark,
    a consumer-protocol member joining (the group converts) and leaving (it converts back), the
    classic member inside ``keepalive()`` for longer than ``max.poll.interval.ms`` while the group
    converts. At every step: nothing of a paused or unowned partition is returned (I1, I2, checked
    at each return), the marks equal intent on the assignment of the moment (I4), the member in
    keepalive is never evicted (I5), no partition is healed by the stall guard (I11); at the end
    every record was delivered, none twice by one member (I3)."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    data, held = kafka.create_topic(partitions=PARTITIONS), kafka.create_topic(partitions=2)
    group = kafka.name("g")
    lost: list[str] = []
    max_poll = {"max.poll.interval.ms": 6000}
    classic = SafeConsumer(_conf(kafka, group, strategy, **max_poll))
    classic.subscribe([data, held], on_lost=lambda _c, p: lost.append(f"classic lost {sorted(keys(p))}"))
    classic_got, upgraded_got = Received(), Received()
    members: list[tuple[Consumer, Received]] = [(classic, classic_got)]
    checked_pump(members, lambda: len(classic.assignment()) == PARTITIONS + 2, timeout=30, what="the classic member")
    marked = (data, 0)
    classic.pause_topics([held])
    classic.pause([TopicPartition(*marked)])
    kafka.produce(data, 200, partitions=PARTITIONS)
    kafka.produce(held, 20, partitions=2, start=1000)
    checked_pump(members, lambda: len(classic_got.records) >= 150, timeout=30, what="the unpaused records")

    def marks_hold() -> None:
        assert keys(classic.paused()) == _effective(classic, held, marked), "I4: marks differ from intent"
        assert classic.pause_state().topics == frozenset({held})

    marks_hold()
    # Upgrade: a consumer-protocol member joins while the classic member works inside keepalive().
    upgraded = SafeConsumer(_conf(kafka, group, "consumer"), migration_timeout=2.0)
    upgraded.subscribe([data, held], on_lost=lambda _c, p: lost.append(f"upgraded lost {sorted(keys(p))}"))
    members.append((upgraded, upgraded_got))
    with classic.keepalive():
        wait_until(
            upgraded.assignment,
            timeout=60,
            what="the consumer-protocol member assigned",
            step=lambda: checked_poll(upgraded, upgraded_got, 0.1),
        )
        worked_until = time.monotonic() + 8  # longer than max.poll.interval.ms (6 s)
        while time.monotonic() < worked_until:
            checked_poll(upgraded, upgraded_got, 0.1)
    assert kafka.describe_group(group).type == "CONSUMER"
    checked_pump(
        members,
        lambda: len(keys(classic.assignment()) | keys(upgraded.assignment())) == PARTITIONS + 2,
        timeout=30,
        what="the mixed group assigned",
    )
    marks_hold()
    # Rollback: the consumer-protocol member leaves; the group converts back.
    upgraded.close()
    members.pop()
    checked_pump(members, lambda: len(classic.assignment()) == PARTITIONS + 2, timeout=30, what="all back")
    wait_until(lambda: kafka.describe_group(group).type == "CLASSIC", timeout=30, what="the group classic again")
    marks_hold()
    classic.resume_topics([held])
    classic.resume([TopicPartition(*marked)])
    every = {(data, p, o) for p, o in _offsets(kafka, data)} | {(held, p, o) for p, o in _offsets(kafka, held)}

    def delivered() -> set[tuple[str, int, int]]:
        return {r[:3] for r in classic_got.records + upgraded_got.records}

    checked_pump(members, lambda: every <= delivered(), timeout=60, what="every record delivered (I3)")
    for name, got in (("classic", classic_got), ("upgraded", upgraded_got)):
        seen = [r[:3] for r in got.records]
        twice = sorted({r for r in seen if seen.count(r) > 1})
        assert not twice, f"I3: the {name} member delivered {twice} twice"
    assert lost == [], f"I5: a member lost its partitions: {lost}"
    assert not [r for r in caplog.records if "stalled" in r.getMessage()], "I11: a healthy partition healed"
    classic.close()


def _offsets(kafka: KafkaTestKit, topic: str) -> list[tuple[int, int]]:
    return [(p, o) for p, end in kafka.end_offsets(topic).items() for o in range(end)]
