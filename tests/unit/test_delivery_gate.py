"""The delivery gate's decisions, record by record (pure logic: records built in memory)."""

from __future__ import annotations

from typing import Literal

from confluent_kafka import KafkaError, Message, TopicPartition

from safeconsumer._delivery import DeliveryGate
from safeconsumer._partitions import PartitionTable


class _Store:
    """Stands in for librdkafka: remembers stored offsets, and its position per partition
    (the offset after the last record it returned, i.e. every record the test builds)."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int, int]]] = []
        self.positions: dict[tuple[str, int], int] = {}

    def store(self, offsets: list[TopicPartition]) -> None:
        self.calls.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))

    def position(self, keys: list[tuple[str, int]]) -> list[TopicPartition]:
        return [TopicPartition(t, p, self.positions.get((t, p), -1001)) for t, p in sorted(keys)]

    def msg(self, topic: str, partition: int, offset: int) -> Message:
        """A record as librdkafka returns it: its position moves past it."""
        key = (topic, partition)
        self.positions[key] = max(self.positions.get(key, 0), offset + 1)
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
