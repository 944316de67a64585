"""The delivery gate's decisions, record by record (pure logic: records built in memory)."""

from __future__ import annotations

from typing import Literal

from confluent_kafka import KafkaError, Message, TopicPartition

from safeconsumer.consumer._delivery import DeliveryGate
from safeconsumer.consumer._partitions import PartitionTable


class _Store:
    """Stands in for librdkafka: remembers stored offsets, and its position per partition
    (the offset after the last record it returned, i.e. every record the test builds)."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int, int]]] = []
        self.at: dict[tuple[str, int], int] = {}

    def store(self, offsets: list[TopicPartition]) -> None:
        self.calls.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))

    def position(self, keys: list[tuple[str, int]]) -> list[TopicPartition]:
        return [TopicPartition(t, p, self.at.get((t, p), -1001)) for t, p in sorted(keys)]

    def msg(self, topic: str, partition: int, offset: int) -> Message:
        """A record as librdkafka returns it: its position moves past it."""
        key = (topic, partition)
        self.at[key] = max(self.at.get(key, 0), offset + 1)
        return Message(topic=topic, partition=partition, offset=offset, value=b"%d" % offset)


class _Gate:
    """The gate and the partition table it works on, as the consumer wires them (no broker)."""

    def __init__(self, store: _Store, owned: set[tuple[str, int]], auto_store: bool) -> None:
        self.table = PartitionTable()
        self.table.assigned(owned, replace=False)
        self.gate = DeliveryGate(self.table, store, auto_store=auto_store, flush_interval=3600)  # type: ignore[arg-type]
        self.admit = self.gate.admit
        self.admit_batch = self.gate.admit_batch
        self.fill_lane = self.gate.fill_lane
        self.release = self.gate.release
        self.flush = self.gate.flush
        self.stats = self.gate.stats
        self.lane = self.table.lane
        self.ahead = self.table.ahead
        self.unlane = self.table.unlane
        self.first_undelivered = self.table.first_undelivered

    def set_paused(self, paused: frozenset[tuple[str, int]]) -> None:
        self.table.set_paused(paused, len(paused))

    def purge(self, keys: list[tuple[str, int]], reason: Literal["revoked"]) -> int:
        before = self.table.purged[reason]
        self.table.left(keys, reason)
        return self.table.purged[reason] - before

    @property
    def has_releasable(self) -> bool:
        return self.table.maybe_releasable


def _gate(store: _Store, owned: set[tuple[str, int]], auto_store: bool = True) -> _Gate:
    return _Gate(store, owned, auto_store)


def test_unowned_records_are_dropped_and_never_stored() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0)})
    assert gate.admit(store.msg("a", 1, 7)) is None
    assert gate.admit_batch([store.msg("a", 1, 8), store.msg("a", 0, 3)])[0].offset() == 3
    gate.flush(force=True)
    assert store.calls == [[("a", 0, 4)]]
    assert gate.stats().purged_unowned == 2


def test_paused_records_are_withheld_then_released_first_in_order() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0), ("a", 1)})
    gate.set_paused(frozenset({("a", 0)}))
    out = gate.admit_batch([store.msg("a", 0, 10), store.msg("a", 1, 5), store.msg("a", 0, 11)])
    assert [(m.partition(), m.offset()) for m in out] == [(1, 5)]
    gate.flush(force=True)
    # Partition 0 may store at most the offset of its first withheld record: never past it.
    assert store.calls == [[("a", 0, 10), ("a", 1, 6)]], "a withheld offset was stored"
    assert not gate.has_releasable and gate.release(10) == []
    gate.set_paused(frozenset())
    assert gate.has_releasable
    assert [m.offset() for m in gate.release(1)] == [10]
    assert [m.offset() for m in gate.release(10)] == [11]
    gate.flush(force=True)
    assert store.calls[-1] == [("a", 0, 12), ("a", 1, 6)]  # an unchanged offset is stored again, harmlessly
    stats = gate.stats()
    assert (stats.withheld, stats.released, stats.held, stats.delivered) == (2, 2, 0, 3)


def test_a_resumed_partitions_new_records_wait_behind_its_withheld_ones() -> None:
    """Resumed (say by a rebalance callback inside librdkafka's call) before its withheld records
    were released: a newer record of it, by any path, goes behind them, never ahead."""
    store = _Store()
    gate = _gate(store, {("a", 0), ("a", 1)})
    gate.set_paused(frozenset({("a", 0)}))
    assert gate.admit_batch([store.msg("a", 0, 3), store.msg("a", 0, 4)]) == []
    gate.set_paused(frozenset())
    assert gate.admit(store.msg("a", 0, 5)) is None, "record 5 went out ahead of 3 and 4"
    assert gate.fill_lane([store.msg("a", 0, 6)], unchanged=True, errors=False) is None
    out = gate.admit_batch([store.msg("a", 0, 6), store.msg("a", 1, 9)], unchanged=True, errors=False)
    assert [(m.partition(), m.offset()) for m in out] == [(1, 9)], "a partition without withheld records goes on"
    assert [m.offset() for m in gate.release(10)] == [3, 4, 5, 6]
    assert not gate.has_releasable
    assert [m.offset() for m in gate.admit_batch([store.msg("a", 0, 7)], unchanged=True, errors=False)] == [7]


def test_withheld_records_of_a_leaving_partition_are_purged_not_stored() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0)})
    gate.set_paused(frozenset({("a", 0)}))
    assert gate.admit(store.msg("a", 0, 1)) is None
    assert gate.purge([("a", 0)], "revoked") == 1
    gate.flush(force=True)
    assert store.calls == []
    assert gate.stats().purged_revoked == 1 and gate.stats().held == 0


def test_manual_offset_store_is_left_to_the_application() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0)}, auto_store=False)
    assert gate.admit(store.msg("a", 0, 1)) is not None
    gate.flush(force=True)
    assert store.calls == []


def test_stores_are_batched_per_partition_keeping_the_latest() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0), ("a", 1)})
    for offset in range(5):
        gate.admit(store.msg("a", 0, offset))
        gate.admit(store.msg("a", 1, offset + 100))
    gate.flush()  # within the interval: nothing yet
    assert store.calls == []
    gate.flush(force=True)
    assert store.calls[0] == [("a", 0, 5), ("a", 1, 105)]


def test_errors_pass_through_untouched() -> None:
    from confluent_kafka import KafkaError

    gate = _gate(_Store(), set())
    err = Message(error=KafkaError(KafkaError._PARTITION_EOF))
    assert gate.admit(err) is err
    assert gate.admit_batch([err]) == [err]


def test_fast_lane_takes_only_a_wholly_deliverable_batch() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0), ("a", 1)})
    # A record of a partition not owned: the batch must go through the checked path.
    assert gate.fill_lane([store.msg("a", 0, 1), store.msg("b", 0, 1)], unchanged=False, errors=False) is None
    # Changed assignment but every record owned: fine.
    first = gate.fill_lane([store.msg("a", 0, 2), store.msg("a", 1, 2)], unchanged=False, errors=False)
    assert first is not None and first.offset() == 2 and len(gate.lane) == 1
    gate.unlane()
    # A paused partition in the batch: refused, the lane stays empty.
    gate.set_paused(frozenset({("a", 1)}))
    assert gate.fill_lane([store.msg("a", 0, 3), store.msg("a", 1, 3)], unchanged=True, errors=False) is None
    assert not gate.lane
    # Withheld records waiting to be released go first: refused while they wait.
    gate.admit(store.msg("a", 1, 4))
    gate.set_paused(frozenset())
    assert gate.fill_lane([store.msg("a", 0, 5)], unchanged=True, errors=False) is None
    # An error event is never laned.
    gate.release(10)
    err = Message(topic="a", partition=0, offset=6, error=KafkaError(KafkaError._PARTITION_EOF))
    assert gate.fill_lane([store.msg("a", 0, 6), err], unchanged=True) is None


def test_unlaned_records_go_back_in_order_and_are_not_counted_or_stored() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0)})
    batch = [store.msg("a", 0, o) for o in range(10, 15)]
    first = gate.fill_lane(batch, unchanged=True, errors=False)
    assert first is not None and first.offset() == 10
    assert gate.lane.popleft().offset() == 11  # what poll() does without the lock
    gate.flush(force=True)
    # I8: 11 was handed out and the application has not come back from it yet.
    assert store.calls[-1] == [("a", 0, 11)], "stored past a record not processed yet"
    assert gate.stats().delivered == 2
    gate.set_paused(frozenset({("a", 0)}))  # any pause change takes the lane back first
    assert not gate.lane
    assert [m.offset() for m in gate.ahead] == [12, 13, 14]
    assert gate.stats().delivered == 2
    assert gate.first_undelivered(("a", 0)) == 12
    gate.table.came_back()
    gate.flush(force=True)
    assert store.calls[-1] == [("a", 0, 12)], "stored past a record still in the lane"


def test_a_purge_empties_the_lane_first() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0), ("a", 1)})
    gate.fill_lane([store.msg("a", 0, 1), store.msg("a", 1, 1), store.msg("a", 0, 2)], unchanged=True, errors=False)
    gate.purge([("a", 0)], "revoked")
    assert not gate.lane
    assert [(m.partition(), m.offset()) for m in gate.ahead] == [(1, 1)]
    assert gate.stats().purged_revoked == 1 and gate.stats().delivered == 1


def test_records_popped_from_the_lane_after_a_store_are_stored_by_the_next_flush() -> None:
    store = _Store()
    gate = _gate(store, {("a", 0)})
    gate.fill_lane([store.msg("a", 0, o) for o in range(3)], unchanged=True, errors=False)
    gate.flush(force=True)
    assert store.calls[-1] == [("a", 0, 0)], "I8: record 0 was handed out, not processed"
    gate.lane.popleft()  # what poll() does without the lock, and without the gate
    gate.lane.popleft()
    gate.flush(force=True)  # e.g. a revocation served by the keepalive: record 2 is still being worked on
    assert store.calls[-1] == [("a", 0, 2)], "records processed from the lane were not stored"
    gate.table.came_back()  # the application's next call, a commit() or close()
    gate.flush(force=True)
    assert store.calls[-1] == [("a", 0, 3)], "records handed out from the lane were not stored"


class _Reads(_Store):
    """_Store with the read and move counts of :class:`RawClient`: ``read()`` is one consume() of
    librdkafka, returning records and moving the position past each (``skip``: offsets skipped
    after each record, as transaction markers or compaction leave)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.moves = 0
        self.position_calls = 0

    def positions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self.position_calls += 1
        return self.position([(tp.topic, tp.partition) for tp in partitions])

    def read(self, records: list[tuple[str, int, int]], skip: int = 0) -> list[Message]:
        self.reads += 1
        out = [self.msg(*r) for r in records]
        for topic, partition, offset in records:
            self.at[(topic, partition)] = max(self.at[(topic, partition)], offset + 1 + skip)
        return out


def _sdk_gate(store: _Reads, owned: set[tuple[str, int]]) -> _Gate:
    gate = _gate(store, owned)
    gate.table.count_consumed()
    return gate


def _run(topic: str, partition: int, start: int, n: int) -> list[tuple[str, int, int]]:
    return [(topic, partition, o) for o in range(start, start + n)]


def test_an_sdks_counts_come_from_positions_once_a_read_is_measured_from_the_last() -> None:
    store = _Reads()
    gate = _sdk_gate(store, {("a", 0), ("a", 1)})
    gate.admit_batch(store.read(_run("a", 0, 0, 3) + _run("a", 1, 0, 2)), unchanged=True, errors=False)
    assert gate.gate._positions is not None, "the positions after the read were not kept"
    gate.admit_batch(store.read(_run("a", 1, 2, 4) + _run("a", 0, 3, 1)), unchanged=True, errors=False)
    assert store.position_calls == 2, "one position() call a batch"
    assert gate.table.consumed == {("a", 0): 4, ("a", 1): 6}
    assert gate.stats().delivered == 10


def test_positions_that_moved_past_skipped_offsets_fall_back_to_counting_records() -> None:
    store = _Reads()
    gate = _sdk_gate(store, {("a", 0), ("a", 1)})
    gate.admit_batch(store.read([*_run("a", 0, 0, 2), ("a", 1, 0)]), unchanged=True, errors=False)
    # Partition 0 skips a marker after its record; partition 1 moved by its one record. The moves
    # add up to 3 for 2 records: counted one by one, exactly.
    batch = store.read([("a", 0, 2)], skip=1) + store.read([("a", 1, 1)])
    store.reads -= 1  # one read, as far as the gate can tell
    assert gate.gate._positions is not None and gate.gate._positions.offsets == [2, 1]
    gate.admit_batch(batch, unchanged=True, errors=False)
    assert gate.table.consumed == {("a", 0): 3, ("a", 1): 2}
    # The next read is measured from the positions past the marker: counted from positions again.
    gate.admit_batch(store.read([("a", 0, 4), ("a", 1, 2)]), unchanged=True, errors=False)
    assert gate.gate._positions.offsets == [5, 3]
    assert gate.table.consumed == {("a", 0): 4, ("a", 1): 3}


def test_positions_are_trusted_only_straight_after_the_read_they_measure() -> None:
    cases: dict[str, object] = {}
    for case in ("moved", "read between", "assignment changed", "rewound", "first batch", "measured"):
        store = _Reads()
        gate = _sdk_gate(store, {("a", 0)})
        if case != "first batch":
            gate.admit_batch(store.read(_run("a", 0, 10, 2)), unchanged=True, errors=False)
        if case == "moved":
            store.moves += 1  # a seek, an assign(), a pause()...
        elif case == "read between":
            store.reads += 1
        elif case == "assignment changed":
            gate.table.assigned({("a", 1)}, replace=False)
        elif case == "rewound":
            store.at[("a", 0)] = 5
        start = 5 if case == "rewound" else 12
        batch = store.read(_run("a", 0, start, 3))
        cases[case] = gate.gate._tally(len(batch))
    assert cases == {
        "moved": None,
        "read between": None,
        "assignment changed": None,
        "rewound": None,
        "first batch": None,
        "measured": [(("a", 0), 3)],
    }


def test_more_partitions_than_a_position_call_is_worth_are_counted_record_by_record() -> None:
    from safeconsumer.consumer._delivery import TALLY_PARTITIONS

    store = _Reads()
    owned = {("a", p) for p in range(TALLY_PARTITIONS + 1)}
    gate = _sdk_gate(store, owned)
    for start in (0, 1):
        gate.admit_batch(
            store.read([("a", p, start) for p in range(TALLY_PARTITIONS + 1)]), unchanged=True, errors=False
        )
    assert store.position_calls == 0
    assert gate.table.consumed == {key: 2 for key in owned}


def test_the_client_counts_its_reads_and_every_call_that_may_move_a_position() -> None:
    from typing import NoReturn

    from confluent_kafka import Consumer

    from safeconsumer.consumer._client import RawClient

    def on_fatal(*_: object) -> NoReturn:
        raise AssertionError("no fatal error here")

    conf = {"group.id": "g", "bootstrap.servers": "127.0.0.1:9"}
    consumer = Consumer({**conf, "enable.auto.offset.store": False, "enable.auto.commit": False})
    try:
        client = RawClient(consumer, "g", on_fatal)
        tp = TopicPartition("t", 0)
        client.assign([tp])
        client.pause([("t", 0)])
        assert (client.reads, client.moves) == (0, 2)
        client.consume(5, 0)
        client.poll(0)
        client.positions([tp])
        client.store([TopicPartition("t", 0, 1)])
        client.call(Consumer.assignment)
        assert (client.reads, client.moves) == (2, 2), "reading positions or storing moved nothing"
        client.resume([("t", 0)])
        assert client.moves == 3
    finally:
        consumer.close()
