"""A share batch's bookkeeping (pure logic: no broker)."""

from __future__ import annotations

import sys
import threading
import weakref

from confluent_kafka import KafkaError, Message

from safeconsumer.share._batch import WATCH, Batch, SafeMessages, Watched
from safeconsumer.testing import wait_until


def _records(n: int) -> list[Message]:
    return [Message(topic="t", partition=0, offset=i, value=b"v") for i in range(n)]


def test_a_clean_batch_is_unsettled_whole_without_a_copy() -> None:
    records = _records(5)
    batch = Batch(records, 30.0)
    assert batch.unsettled() is records


def test_error_events_are_left_out_and_deserialization_failures_kept() -> None:
    records = _records(3)
    event = Message(topic="t", partition=0, offset=3, error=KafkaError(KafkaError._MSG_TIMED_OUT))
    undecodable = Message(topic="t", partition=0, offset=4, error=KafkaError(KafkaError._VALUE_DESERIALIZATION))
    batch = Batch([*records, event, undecodable], 30.0)
    assert batch.unsettled() == [*records, undecodable]


def test_records_the_consumer_settled_are_left_out() -> None:
    records = _records(4)
    batch = Batch(records, 30.0)
    batch.mark_settled([records[1]])
    assert batch.unsettled() == [records[0], records[2], records[3]]
    assert batch.is_settled(records[1])
    assert not batch.is_settled(records[0])


def test_a_batch_settled_whole_has_nothing_unsettled_handed_out_or_to_cut() -> None:
    records = _records(6)
    batch = Batch(records, 30.0)
    it = iter(SafeMessages(records, batch))
    next(it)
    batch.settle_all()
    assert all(batch.is_settled(m) for m in records)
    assert batch.unsettled() == []
    assert batch.handed_out() == []
    assert batch.cut() == []
    assert batch.pending == []
    assert len(batch.live) == 6  # the application may still iterate what it was handed


def test_a_cut_takes_what_no_iterator_reached_except_handled_records() -> None:
    records = _records(5)
    batch = Batch(list(records), 30.0)  # the batch adopts its list: the cut shortens it
    it = iter(SafeMessages(records, batch))
    next(it), next(it)
    batch.mark_handled(records[3])
    assert batch.cut() == [records[2], records[4]]
    assert list(it) == []
    assert batch.take_pending() == [records[2], records[4]]
    assert batch.is_settled(records[2]) and not batch.is_settled(records[3])


def test_a_batch_adopts_its_list_and_a_slice_iterates_on_its_own() -> None:
    records = _records(5)
    batch = Batch(records, 30.0)
    messages = SafeMessages(records, batch)
    assert len(messages) == 5 and messages.records() == records and messages[2] is records[2]
    part = messages[1:3]  # upstream's slice: a Messages of the same class around a new list
    assert isinstance(part, SafeMessages) and len(part) == 2
    assert list(part) == records[1:3]


def test_a_retry_fits_when_it_and_the_records_not_reached_end_before_the_release_point() -> None:
    records = _records(10)
    batch = Batch(records, 20.0)  # released at 15 s
    it = iter(SafeMessages(records, batch))
    next(it), next(it)  # the second is in hand: 8 not reached
    batch.busy, batch.handles = 1.0, 1  # handle() took a second a record
    assert batch.fits(wait=1.0, attempt=1.0)  # 1 + 1 + 8 * 1 = 10 s
    assert batch.fits(wait=4.0, attempt=1.0)  # 13 s
    assert not batch.fits(wait=6.5, attempt=1.0)  # 15.5 s: past it
    batch.cut()
    assert batch.fits(wait=6.5, attempt=1.0)  # nothing left to reach: only the retry itself


def test_without_a_pace_yet_the_failed_attempt_is_the_pace() -> None:
    records = _records(4)
    batch = Batch(records, 8.0)  # released at 6 s
    next(iter(SafeMessages(records, batch)))
    assert batch.fits(wait=0.5, attempt=1.0)  # 0.5 + 1 + 3 * 1 = 4.5 s
    assert not batch.fits(wait=0.5, attempt=1.5)  # 0.5 + 1.5 + 3 * 1.5 = 6.5 s


def test_a_batch_never_cut_walks_its_own_list_without_a_copy() -> None:
    records = _records(4)
    batch = Batch(records, 30.0)
    assert batch.live is records and batch.records is records
    assert list(SafeMessages(records, batch)) == records


def test_after_a_cut_the_sequence_stays_whole_and_the_iterators_stop() -> None:
    records = _records(6)
    batch = Batch(list(records), 30.0)
    messages = SafeMessages(batch.records, batch)
    it = iter(messages)
    next(it), next(it)
    assert batch.cut() == records[2:]
    assert list(it) == [] and list(messages) == records[:2]  # a new iterator stops there too
    assert len(messages) == 6 and messages[5] is records[5] and messages.records() == records
    assert batch.records == records and batch.live == records[:2]
    assert batch.unsettled() == records  # nothing settled yet: the pending go back on the next flush
    batch.take_pending()
    assert batch.unsettled() == records[:2]
    assert batch.cut() == []  # parted once: a second cut takes nothing and copies nothing


def test_marks_made_from_two_threads_at_once_are_all_kept() -> None:
    # A batch's sets are the class's empty ones until the first write: each thread's first write
    # must land in the one set the batch keeps. Threads switching every microsecond, a read of the
    # attribute and a store of a new set lost about 1.5% of pairs: 1,000 pairs see it.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _mark_from_two_threads(1000)
    finally:
        sys.setswitchinterval(interval)


def _mark_from_two_threads(pairs: int) -> None:
    for _ in range(pairs):
        records = _records(2)
        batch = Batch(records, 30.0)
        start = threading.Barrier(2)

        def mark(m: Message, batch: Batch = batch, start: threading.Barrier = start) -> None:
            start.wait()
            batch.mark_settled([m])

        threads = [threading.Thread(target=mark, args=(m,)) for m in records]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert batch.is_settled(records[0]) and batch.is_settled(records[1])


def test_the_watch_cuts_a_due_batch_and_keeps_nothing_of_it_after() -> None:
    records = _records(3)
    batch = Batch(list(records), 0.01)  # its release point: 7.5 ms from now (a cut shortens its list)
    cut: list[Batch] = []
    watched = Watched(cut.append)
    watched.batch = batch
    WATCH.look_at(watched, batch.release_at)
    wait_until(lambda: cut, timeout=5, what="the watch's cut")
    assert cut == [batch] and batch.pending == records and batch.live == []
    gone = weakref.ref(batch)
    del batch, cut[:]
    watched.batch = None
    wait_until(lambda: gone() is None, timeout=5, what="the watch to let go of the batch")
