"""The partition table's named transitions, in memory (records built by hand, no broker)."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message

from safeconsumer.consumer._partitions import PartitionTable, Receipt

A0, A1 = ("a", 0), ("a", 1)


def _msg(key: tuple[str, int], offset: int) -> Message:
    return Message(topic=key[0], partition=key[1], offset=offset, value=b"%d" % offset)


def _eof(key: tuple[str, int], offset: int) -> Message:
    return Message(topic=key[0], partition=key[1], offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


def _table(*owned: tuple[str, int]) -> PartitionTable:
    table = PartitionTable()
    table.assigned(owned, replace=False)
    return table


def test_assigned_and_left_own_and_purge() -> None:
    table = _table(A0, A1)
    epoch = table.epoch
    table.set_paused(frozenset({A0}), 1)
    table.hold(A0, _msg(A0, 5))
    table.ahead.extend([_msg(A0, 6), _msg(A1, 9)])
    assert table.left([A0, ("b", 0)], "revoked") == {A0}, "only owned partitions leave"
    assert set(table.owned) == {A1} and table.epoch > epoch
    assert table.purged["revoked"] == 2, "withheld and read-ahead records of the leaving partition"
    assert [m.offset() for m in table.ahead] == [9]
    table.left([A1], "lost")
    assert table.purged["lost"] == 1


def test_replacing_assignment_drops_what_is_not_in_it() -> None:
    table = _table(A0, A1)
    table.hold(A1, _msg(A1, 3))
    assert table.assigned([A0], replace=True) == {A1}
    assert set(table.owned) == {A0} and table.purged["revoked"] == 1


def test_eager_limbo_restores_a_partition_that_comes_back() -> None:
    table = _table(A0, A1)
    table.set_paused(frozenset({A0}), 1)
    table.hold(A0, _msg(A0, 5))
    table.hold(A0, _msg(A0, 6))
    table.ahead.extend([_msg(A1, 1), _msg(A0, 7)])
    assert table.to_limbo([A0, A1]) == {A0, A1}
    assert not table.owned and not table.ahead
    assert table.held_count == 2, "withheld records wait in limbo"
    gone = table.assigned([A0], replace=True)
    assert gone == {A1}, "the partition that did not come back leaves for good"
    assert table.purged["revoked"] == 1
    assert [m.offset() for m in table.owned[A0].held] == [5, 6]
    assert [m.offset() for m in table.ahead] == [7]
    assert table.resume_at == {A0: 8}, "reads on after the last record held for it"
    assert table.maybe_releasable


def test_a_partition_s_eof_event_leaves_with_it_and_is_not_counted_as_a_record() -> None:
    table = _table(A0, A1)
    table.ahead.extend([_msg(A0, 4), _eof(A0, 5), _msg(A1, 9), _eof(A1, 10)])
    table.left([A0], "revoked")
    assert [(m.partition(), m.offset()) for m in table.ahead] == [(1, 9), (1, 10)], "upstream discards it too"
    assert table.purged["revoked"] == 1
    table.seeked(A1, 3)
    assert not table.ahead and table.purged["seek"] == 1


def test_eager_limbo_restores_the_records_and_drops_the_eof_event() -> None:
    """librdkafka drops a revoked partition's queued EOF and reports the end again after the
    re-assignment (at ``resume_at``): restoring ours as well would report it twice."""
    table = _table(A0)
    table.ahead.extend([_msg(A0, 3), _msg(A0, 4), _eof(A0, 5)])
    table.to_limbo([A0])
    assert not table.ahead, "nothing of a partition in limbo can be handed out"
    table.assigned([A0], replace=True)
    assert [(m.error() is None, m.offset()) for m in table.ahead] == [(True, 3), (True, 4)]
    assert table.resume_at == {A0: 5}, "after the last record, not after the EOF event's offset"


def test_eager_limbo_of_an_eof_event_alone_restores_nothing_to_deliver() -> None:
    table = _table(A0)
    table.ahead.extend([_eof(A0, 5)])
    table.to_limbo([A0])
    table.assigned([A0], replace=True)
    assert not table.ahead and table.resume_at == {}, "assigned where the group says, as upstream is"


def test_eager_limbo_purge_counts_records_only() -> None:
    table = _table(A0, A1)
    table.ahead.extend([_msg(A1, 7), _eof(A1, 8)])
    table.to_limbo([A0, A1])
    table.assigned([A0], replace=True)
    assert table.purged["revoked"] == 1 and not table.ahead


def test_seek_purges_and_sets_a_target() -> None:
    table = _table(A0)
    table.hold(A0, _msg(A0, 5))
    table.ahead.append(_msg(A0, 6))
    table.seeked(A0, 2)
    assert table.purged["seek"] == 2 and not table.ahead and not table.owned[A0].held
    assert table.owned[A0].seek_target == 2 and table.dirty
    table.seeked(A0, -1001)  # a logical offset is no target
    assert table.owned[A0].seek_target is None


def test_outstanding_records_hold_back_the_floor_until_the_app_comes_back() -> None:
    table = _table(A0, A1)
    batch = [_msg(A0, 10), _msg(A1, 3), _msg(A0, 11)]
    table.count_delivered(batch)
    table.outstanding = batch  # a consume() batch handed out
    assert table.unprocessed_floor() == {A0: 10, A1: 3}
    assert table.first_undelivered(A0) is None, "handed out is delivered, not undelivered"
    assert table.pending
    table.came_back()
    assert table.unprocessed_floor() == {} and not table.pending


def test_the_last_record_popped_from_the_lane_is_outstanding() -> None:
    table = _table(A0)
    batch = [_msg(A0, o) for o in range(4)]
    table.count_delivered(batch)
    assert table.fill_lane(batch).offset() == 0
    assert table.unprocessed_floor() == {A0: 0}
    table.lane.popleft()  # poll() without the lock
    assert table.unprocessed_floor() == {A0: 1}
    table.unlane()  # e.g. a pause from another thread
    assert [m.offset() for m in table.ahead] == [2, 3]
    assert isinstance(table.outstanding, Message) and table.outstanding.offset() == 1
    assert table.unprocessed_floor() == {A0: 1}
    assert table.delivered == 2
    table.came_back()
    assert table.unprocessed_floor() == {A0: 2}, "read ahead, not delivered"


def test_cleared_drops_everything() -> None:
    table = _table(A0)
    table.hold(A0, _msg(A0, 1))
    table.to_limbo([A0])
    table.assigned([A1], replace=False)
    table.ahead.append(_msg(A1, 4))
    table.cleared()
    assert not table.owned and not table.limbo and not table.ahead
    assert table.purged["revoked"] == 2


def test_a_batch_given_back_waits_in_front_and_was_never_processed() -> None:
    """A consume() result whose asyncio caller was cancelled (safeconsumer.aio): not delivered,
    not outstanding, first in line again; coming back does not count it as processed."""
    table = _table(A0, A1)
    table.ahead.extend([_msg(A0, 12), _msg(A1, 5)])
    batch = [_msg(A0, 10), _msg(A0, 11), _msg(A1, 4)]
    table.count_delivered(batch)
    table.handed_out(batch)
    table.given_back(batch)
    assert table.outstanding is None and table.delivered == 0
    assert [(m.partition(), m.offset()) for m in table.ahead] == [(0, 10), (0, 11), (1, 4), (0, 12), (1, 5)]
    table.came_back()
    assert table.unprocessed_floor() == {A0: 10, A1: 4}, "given back is not processed"


def test_a_record_given_back_goes_before_its_partition_s_withheld_records() -> None:
    """Its partition was paused meanwhile: it waits in front of the records withheld since."""
    table = _table(A0)
    record = _msg(A0, 3)
    table.count_delivered([record])
    table.handed_out(record)
    table.set_paused(frozenset({A0}), 1)
    table.hold(A0, _msg(A0, 4))
    table.given_back([record])
    assert [m.offset() for m in table.owned[A0].held] == [3, 4] and not table.ahead
    table.set_paused(frozenset(), 0)
    assert [m.offset() for m in table.release(10)] == [3, 4]


def test_a_lane_record_given_back_returns_with_the_rest_of_the_lane() -> None:
    table = _table(A0)
    batch = [_msg(A0, o) for o in range(3)]
    table.count_delivered(batch)
    first = table.fill_lane(batch)
    second = table.lane.popleft()  # poll() without the lock; its caller was cancelled
    table.given_back([second])
    assert [m.offset() for m in table.ahead] == [1, 2]
    assert table.outstanding is None and table.delivered == 1, f"only record {first.offset()} was delivered"


def test_the_last_record_popped_stays_outstanding_when_it_emptied_the_lane() -> None:
    """A pause from another thread while the app works on the lane's last record: that record
    is still unprocessed, so no store may pass it (I8)."""
    table = _table(A0)
    batch = [_msg(A0, o) for o in range(3)]
    table.count_delivered(batch)
    table.fill_lane(batch)
    table.lane.popleft()
    table.lane.popleft()  # the app took the last one and works on it
    table.unlane()
    assert isinstance(table.outstanding, Message) and table.outstanding.offset() == 2
    assert table.unprocessed_floor() == {A0: 2}
    table.came_back()
    assert table.unprocessed_floor() == {}


def test_taking_a_lane_back_leaves_the_app_a_prefix_in_order() -> None:
    """The app pops from the left while the lane is taken back from the right: whatever
    interleaving, it got the first records and the rest wait in order."""
    from safeconsumer.consumer import _handout as _partitions

    table = _table(A0)
    batch = [_msg(A0, o) for o in range(5)]
    table.count_delivered(batch)
    table.fill_lane(batch)  # record 0 returned directly
    got: list[int] = []
    real_pop = table.lane.pop

    class Interleaved:
        """The lane, with the app popping between the take-back's own pops."""

        def __init__(self) -> None:
            self.calls = 0

        def __bool__(self) -> bool:
            return bool(table.lane)

        def pop(self) -> Message:
            self.calls += 1
            if self.calls == 2 and table.lane:
                got.append(table.lane.popleft().offset() or 0)
            return real_pop()

    taken: list[Message] = _partitions._drain(Interleaved())  # type: ignore[arg-type]
    assert got == [1]
    assert [m.offset() for m in taken] == [2, 3, 4]


def test_consumed_counts_are_exact_on_the_one_topic_path_and_the_general_one() -> None:
    """Telemetry's per-partition counts: the cheap path (one topic) and the exact one agree."""
    from collections import Counter

    one = _table(A0, A1)
    many = _table(A0, A1, ("b", 0))
    for table in (one, many):
        table.consumed = Counter()
    batch = [_msg(A0, 1), _msg(A1, 1), _msg(A0, 2), _msg(A0, 3), _msg(A1, 2), _msg(A0, 4)]
    one.count_delivered(batch)
    many.count_delivered([*batch, _msg(("b", 0), 7)])
    assert one.consumed == Counter({A0: 4, A1: 2})
    assert many.consumed == Counter({A0: 4, A1: 2, ("b", 0): 1})
    one.count_delivered(batch[:2])  # small batches go the exact way
    assert one.consumed == Counter({A0: 5, A1: 3})
    # After an assignment change the topic and numbers are looked at again.
    one.assigned([("c", 300)], replace=True)
    one.count_delivered([_msg(("c", 300), i) for i in range(6)])
    assert one.consumed[("c", 300)] == 6


def test_consumed_counts_stay_exact_when_a_batch_strays_from_the_one_topic_path() -> None:
    """A record the cheap path cannot place (a partition number not owned, one of 256 or more)
    sends its batch the exact way: nothing is miscounted or lost. (Records of another topic never
    get here: only owned partitions' records are handed out, I2.)"""
    from collections import Counter

    table = _table(A0, A1)
    table.consumed = Counter()
    base = [_msg(A0, 1), _msg(A1, 1), _msg(A0, 2), _msg(A1, 2), _msg(A0, 3)]
    table.count_delivered([*base, _msg(("a", 5), 1)])
    table.count_delivered([*base, _msg(("a", 999), 1)])
    assert table.consumed == Counter({A0: 6, A1: 4, ("a", 5): 1, ("a", 999): 1})


def _handed_to_an_asyncio_caller(table: PartitionTable, batch: list[Message]) -> Receipt:
    table.count_delivered(batch)
    table.handed_out(batch)
    receipt = table.in_transit(batch)
    assert receipt is not None
    return receipt


def test_records_in_transit_are_neither_processed_nor_delivered_until_they_arrive() -> None:
    """A consume() for an asyncio caller that has not resumed: a commit (came_back) meanwhile
    must not count it as processed, nor position() as delivered (I8)."""
    table = _table(A0)
    receipt = _handed_to_an_asyncio_caller(table, [_msg(A0, 10), _msg(A0, 11)])
    assert table.outstanding is None and table.pending
    table.came_back()
    assert table.unprocessed_floor() == {A0: 10}, "in transit is not processed"
    assert table.first_undelivered(A0) == 10, "in transit is not delivered"
    receipt.arrived()
    assert table.first_undelivered(A0) is None, "arrived: handed out"
    assert table.unprocessed_floor() == {A0: 10}, "arrived: outstanding until the app comes back"
    table.came_back()
    assert table.unprocessed_floor() == {} and not table.transit and not table.pending


def test_a_returned_receipt_is_given_back_in_front_when_the_app_comes_back() -> None:
    table = _table(A0)
    table.ahead.append(_msg(A0, 12))
    first = _handed_to_an_asyncio_caller(table, [_msg(A0, 8), _msg(A0, 9)])
    second = _handed_to_an_asyncio_caller(table, [_msg(A0, 10), _msg(A0, 11)])
    first.returned()
    second.returned()
    table.came_back()
    assert [m.offset() for m in table.ahead] == [8, 9, 10, 11, 12], "the earliest in front, in order"
    assert not table.transit and table.delivered == 0
    assert table.unprocessed_floor() == {A0: 8}


def test_give_back_returned_leaves_receipts_still_in_transit() -> None:
    table = _table(A0, A1)
    waiting = _handed_to_an_asyncio_caller(table, [_msg(A1, 3)])
    returned = _handed_to_an_asyncio_caller(table, [_msg(A0, 5)])
    returned.returned()
    table.give_back_returned()
    assert table.transit == [waiting] and [m.offset() for m in table.ahead] == [5]
    assert table.unprocessed_floor() == {A0: 5, A1: 3}


def test_records_in_transit_of_a_partition_that_left_or_was_seeked_never_come_back() -> None:
    """Their offsets were not stored past them (the floor counted them when the partition left),
    so the next owner reads them; after a seek they are stale."""
    table = _table(A0, A1)
    receipt = _handed_to_an_asyncio_caller(table, [_msg(A0, 5), _msg(A1, 7), _msg(A1, 8)])
    assert table.unprocessed_floor() == {A0: 5, A1: 7}
    table.left([A0], "revoked")
    table.seeked(A1, 8)
    receipt.returned()
    table.came_back()
    assert not table.ahead and not table.transit


def test_a_record_given_back_of_a_partition_no_longer_owned_is_dropped_not_read_ahead() -> None:
    """What enters the read-ahead must be owned now (the reader may trust it without a check)."""
    table = _table(A0)
    record = _msg(A1, 4)
    table.count_delivered([record])
    table.given_back([record])
    assert not table.ahead and table.purged["unowned"] == 1 and table.delivered == 0


def test_a_lane_record_in_transit_returned_comes_back_behind_nothing_newer() -> None:
    table = _table(A0)
    batch = [_msg(A0, o) for o in range(3)]
    table.count_delivered(batch)
    first = table.fill_lane(batch)  # returned by an executor poll() to an asyncio caller
    receipt = table.in_transit(first)
    assert receipt is not None
    receipt.returned()
    table.give_back_returned()
    assert [m.offset() for m in table.ahead] == [0, 1, 2] and not table.lane
    assert table.delivered == 0


def test_close_forgets_receipts() -> None:
    table = _table(A0)
    _handed_to_an_asyncio_caller(table, [_msg(A0, 1)])
    table.cleared()
    assert not table.transit and not table.pending


def test_eager_limbo_with_nothing_held_reads_on_from_its_position_at_the_revocation() -> None:
    """The application may still be working on what it was handed (nothing stored for it): the
    committed offset would hand it the same records again; its position does not."""
    table = _table(A0, A1)
    table.to_limbo([A0, A1], {A0: 10, A1: 4})
    table.stored()
    table.assigned([A0, A1], replace=True)
    assert table.resume_at == {A0: 10, A1: 4}
    assert table.owned[A0].seek_target == 10, "stored for it until librdkafka reports a position"
    assert table.dirty


def test_eager_limbo_prefers_the_records_held_for_a_partition_to_its_position() -> None:
    table = _table(A0)
    table.ahead.extend([_msg(A0, 7), _msg(A0, 8)])
    table.to_limbo([A0], {A0: 9})
    table.assigned([A0], replace=True)
    assert table.resume_at == {A0: 9} and [m.offset() for m in table.ahead] == [7, 8]
    assert table.owned[A0].seek_target is None, "the held records are stored as they are processed"


def test_a_partition_revoked_again_before_a_record_was_read_reads_on_from_the_same_place() -> None:
    """librdkafka reports no position for a partition assigned at an offset until its first record."""
    table = _table(A0)
    table.to_limbo([A0], {A0: 10})
    table.assigned([A0], replace=True)
    table.restores_applied()
    table.to_limbo([A0], {})
    table.assigned([A0], replace=True)
    assert table.resume_at == {A0: 10}
