"""Drop-in against a real broker: one scenario, run on upstream and on SafeConsumer, as event logs.

Each scenario runs twice under every protocol, once with ``confluent_kafka.Consumer`` and once
with ``SafeConsumer`` (with ``keepalive="off"`` where the scenario is upstream's eviction, SPEC's
way back), each run with its own topics and group. What the application observes is written to an
ordered log, call by call: the rebalance callbacks librdkafka ran inside the call, then what the
call returned (a record by partition and offset, an error event by code) or raised. Topic names
are replaced by their role, so the two logs compare by value. SPEC: "runs rebalance callbacks and
returns error events in the same order and in the same calls".

Calls that observed nothing (``poll()`` returning None) are left out of the log; a scenario that
compares *which* call observed an event keeps the call boundaries of the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from .harness import CLASSES

Event = tuple[Any, ...]


@dataclass
class Log:
    """What one consumer showed its application, call by call."""

    topics: dict[str, str] = field(default_factory=dict)
    calls: list[list[Event]] = field(default_factory=list)
    _current: list[Event] = field(default_factory=list)

    def role(self, topic: str | None) -> str:
        return self.topics.get(topic or "", "?")

    def partitions(self, parts: list[TopicPartition]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((self.role(tp.topic), tp.partition) for tp in parts))

    # -- the callbacks every scenario registers ------------------------------------------------
    def callbacks(self) -> dict[str, Callable[[Consumer, list[TopicPartition]], None]]:
        def note(kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
            return lambda _c, parts: self._current.append((kind, self.partitions(parts)))

        return {"on_assign": note("assign"), "on_revoke": note("revoke"), "on_lost": note("lost")}

    # -- calls --------------------------------------------------------------------------------
    def call(self, fn: Callable[[], Any]) -> Any:
        """Run one application call and log what it showed; returns its result (None if it raised)."""
        result: Any = None
        try:
            result = fn()
        except (KafkaException, RuntimeError, ValueError) as exc:
            error: Any = exc.args[0] if exc.args else None
            name = error.name() if hasattr(error, "name") else str(error)
            self._current.append(("raised", type(exc).__name__, name))
        else:
            for msg in result if isinstance(result, list) else [result]:
                if msg is not None:
                    self._current.append(self.message(msg))
        self.calls.append(self._current)
        self._current = []
        return result

    def message(self, msg: Message) -> Event:
        err = msg.error()
        if err is not None:
            return ("error", err.name(), self.role(msg.topic()), msg.partition())
        return ("record", self.role(msg.topic()), msg.partition(), msg.offset())

    def events(self) -> list[list[Event]]:
        """The calls that observed something, in order."""
        return [c for c in self.calls if c]

    def flat(self) -> list[Event]:
        return [e for c in self.calls for e in c]


def poll_until(
    log: Log, consumer: Consumer, until: Callable[[], bool], *, timeout: float, what: str, wait: float = 0.1
) -> None:
    """poll() (each call logged) until ``until()`` holds, within a deadline."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        log.call(lambda: consumer.poll(wait))


@contextmanager
def consumer_of(which: str, conf: dict[str, Any], **safe_options: Any) -> Iterator[Consumer]:
    cls = CLASSES[which]
    consumer = SafeConsumer(conf, **safe_options) if cls is SafeConsumer else cls(conf)
    try:
        yield consumer
    finally:
        consumer.close()


def both(run: Callable[[str], Log]) -> tuple[Log, Log]:
    """Run a scenario on upstream, then on SafeConsumer: (upstream's log, SafeConsumer's log)."""
    return run("upstream"), run("safe")


def _short_max_poll(protocol: Protocol) -> dict[str, Any]:
    """Config for an eviction within seconds: max.poll.interval.ms 2 s (and a session to match)."""
    extra: dict[str, Any] = {"max_poll_interval_ms": 2000}
    if protocol != "consumer":
        extra |= {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}
    return extra


def records(log: Log) -> list[Event]:
    return [e for e in log.flat() if e[0] == "record"]


# -- scenarios --------------------------------------------------------------------------------


def test_max_poll_exceeded_returns_the_error_then_runs_on_lost_in_the_next_call(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """An application away longer than max.poll.interval.ms (keepalive="off", upstream's eviction).

    Upstream returns ``_MAX_POLL_EXCEEDED`` from the first poll() after the gap, and runs
    ``on_lost`` (then the re-assignment) in the poll() after that one.
    """

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 10, partitions=2)
        log = Log(topics={topic: "t"})
        # Nothing committed: after the rejoin every record comes again, whenever the eviction fell.
        extra = _short_max_poll(protocol) | {"enable_auto_commit": False}
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol, **extra), keepalive="off") as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(records(log)) == 10, timeout=30, what="the 10 records")
            before = len(log.calls)
            time.sleep(4.0)  # the application is busy: the stimulus under test, not a wait
            log.call(lambda: c.poll(5.0))
            log.call(lambda: c.poll(5.0))
            poll_until(log, c, lambda: len(records(log)) == 20, timeout=30, what="the records again")
        log.calls = log.calls[before:]
        return log

    upstream, safe = both(run)

    def first_two(log: Log) -> list[list[Event]]:
        # The error alone, then the call that runs on_lost (what it goes on to do is timing).
        return [log.calls[0], log.calls[1][:1]]

    assert first_two(upstream) == first_two(safe), (upstream.calls[:2], safe.calls[:2])
    # What upstream does (the oracle, pinned so that a change upstream is noticed here).
    assert [e[:2] for e in upstream.calls[0]] == [("error", "_MAX_POLL_EXCEEDED")], upstream.calls[0]
    assert upstream.calls[1][0] == ("lost", (("t", 0), ("t", 1))), upstream.calls[1]
    assert sorted(records(upstream)) == sorted(records(safe))


def test_a_loss_served_while_reading_ahead_waits_behind_the_events_read_before_it(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """The same eviction with records waiting in SafeConsumer's read-ahead.

    The first poll() reads the partition's records ahead. After the gap the first call, with
    records waiting, makes a read-ahead call that serves both ``_MAX_POLL_EXCEEDED`` and the
    loss; the application must still get the error from that call and ``on_lost`` in the next,
    as upstream shows them. (librdkafka discards what it still held of the lost partition;
    SafeConsumer purges what it read ahead of it, I2: neither delivers those records now.)
    """

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, 5, partitions=1)
        log = Log(topics={topic: "t"})
        extra = _short_max_poll(protocol) | {"enable_partition_eof": True}
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol, **extra), keepalive="off") as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(records(log)) == 1, timeout=30, what="the first record")
            # librdkafka has the rest and the EOF event queued before the application goes away.
            wait_until(
                lambda: c.get_watermark_offsets(TopicPartition(topic, 0), cached=True)[1] == 5,
                timeout=30,
                what="the partition fetched",
            )
            time.sleep(4.0)  # the application is busy: the stimulus under test, not a wait
            poll_until(log, c, lambda: any(e[0] == "lost" for e in log.flat()), timeout=30, what="on_lost", wait=1.0)
        return log

    upstream, safe = both(run)

    def until_lost(log: Log) -> list[list[Event]]:
        """Calls with something but records, up to on_lost (what follows it is timing)."""
        calls = [[e[:2] for e in c if e[0] != "record"] for c in log.calls]
        calls = [c for c in calls if c]
        last = next(i for i, c in enumerate(calls) if c[0][0] == "lost")
        return [*calls[:last], calls[last][:1]]

    assert until_lost(upstream) == until_lost(safe), (upstream.calls, safe.calls)
    assert until_lost(upstream)[-2:] == [[("error", "_MAX_POLL_EXCEEDED")], [("lost", (("t", 0),))]]


def test_partition_eof_events_arrive_in_order_with_the_records(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """``enable.partition.eof``: each partition's EOF event follows its last record, call by call."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 6, partitions=2)
        log = Log(topics={topic: "t"})
        conf = kafka.consumer_conf(kafka.name("g"), protocol, enable_partition_eof=True)
        with consumer_of(which, conf) as c:
            c.subscribe([topic], **log.callbacks())

            def eofs() -> int:
                return sum(1 for e in log.flat() if e[:2] == ("error", "_PARTITION_EOF"))

            poll_until(log, c, lambda: eofs() == 2, timeout=30, what="both partitions' EOF")
            kafka.produce(topic, 4, partitions=[0], start=6)
            poll_until(log, c, lambda: eofs() == 3, timeout=30, what="partition 0's second EOF")
        return log

    upstream, safe = both(run)

    def per_partition(log: Log) -> dict[int, list[Event]]:
        out: dict[int, list[Event]] = {}
        for e in log.flat():
            if e[0] in ("record", "error"):
                out.setdefault(e[2] if e[0] == "record" else e[3], []).append(e)
        return out

    # librdkafka interleaves the two partitions as its fetches arrive; within a partition the
    # order of records and EOF events is the contract.
    assert per_partition(upstream) == per_partition(safe)
    assert [e for e in upstream.flat() if e[0] == "assign"] == [e for e in safe.flat() if e[0] == "assign"]
    # Each event is returned by its own poll(), as upstream does.
    assert all(len([e for e in c if e[0] in ("record", "error")]) <= 1 for c in safe.calls)


def test_a_rebalance_goes_ahead_of_the_records_already_fetched(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """The application reads one record, then is busy while a peer joins; librdkafka has fetched the rest.

    Upstream's first poll() after that runs ``on_revoke`` before any of the fetched records (the
    rebalance goes ahead of them in librdkafka's queue, and what it held of a revoked partition
    is dropped). SafeConsumer read those records ahead: its first call must do the same.
    """

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 10, partitions=2)
        group = kafka.name("g")
        with _one_record_read(kafka, which, protocol, topic, group) as (log, c):
            wait_until(
                lambda: all(c.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1] == 5 for p in (0, 1)),
                timeout=30,
                what="both partitions fetched",
            )
            before = len(log.calls)
            _busy_while_a_peer_joins(
                log,
                c,
                peer=(kafka, group, protocol, topic),
                until=lambda: any(e[0] == "revoke" for e in log.flat()),
                what="on_revoke",
            )
        log.calls = log.calls[before:]
        return log

    upstream, safe = both(run)

    def first(log: Log) -> tuple[str, int]:
        kind, parts = log.events()[0][0]
        return kind, len(parts)

    # The oracle: the revocation comes first (eager: both partitions; incremental: the one that moves).
    assert first(upstream) == ("revoke", 2 if protocol == "range" else 1), upstream.calls
    assert first(safe) == first(upstream), (upstream.calls, safe.calls)


@contextmanager
def _one_record_read(
    kafka: KafkaTestKit, which: str, protocol: Protocol, topic: str, group: str
) -> Iterator[tuple[Log, Consumer]]:
    """A consumer of ``topic`` in ``group`` (EOF events on, nothing committed, keepalive off, its
    topic logged as "t") that has read one record; closed on exit."""
    log = Log(topics={topic: "t"})
    conf = kafka.consumer_conf(group, protocol, enable_partition_eof=True, enable_auto_commit=False)
    with consumer_of(which, conf, keepalive="off") as c:
        c.subscribe([topic], **log.callbacks())
        poll_until(log, c, lambda: len(records(log)) == 1, timeout=30, what="the first record")
        yield log, c


def _busy_while_a_peer_joins(
    log: Log,
    consumer: Consumer,
    *,
    peer: tuple[KafkaTestKit, str, Protocol, str],
    until: Callable[[], bool],
    what: str,
    window: float = 0.0,
) -> None:
    """The application is busy for 3 s while a peer (kit, group, protocol, its topic) joins, then
    polls until ``until``, and on for ``window`` seconds while the peer is still in the group (to
    show that something does NOT happen then)."""
    with _peer_joining(*peer):
        time.sleep(3.0)  # the application is busy while the peer joins: the stimulus, not a wait
        poll_until(log, consumer, until, timeout=30, what=what, wait=1.0)
        end = time.monotonic() + window
        while time.monotonic() < end:
            log.call(lambda: consumer.poll(0.2))


@contextmanager
def _peer_joining(kafka: KafkaTestKit, group: str, protocol: Protocol, topic: str) -> Iterator[None]:
    """A plain peer subscribes to ``topic`` in ``group`` and polls on its own thread meanwhile."""
    peer = Consumer(kafka.consumer_conf(group, protocol))
    peer.subscribe([topic])
    stop = threading.Event()
    joiner = threading.Thread(target=lambda: [peer.poll(0.1) for _ in iter(stop.is_set, True)])
    joiner.start()
    try:
        yield
    finally:
        stop.set()
        joiner.join()
        peer.close()


def test_a_partition_kept_through_a_rebalance_reaches_its_eof_after_its_records(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """``enable.partition.eof``: a rebalance that leaves the partition here keeps records before EOF.

    The consumer reads one record (SafeConsumer reads the rest and the EOF event ahead), then a
    peer subscribing to another topic joins the group. Under the eager protocol everything is
    revoked and given back; upstream reads again from the committed offset, SafeConsumer goes on
    after what it handed out (I9). Either way every record comes before the partition's EOF event:
    the EOF event says there is nothing more to read.
    """

    def run(which: str) -> Log:
        topic, other = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1)
        kafka.produce(topic, 5, partitions=1)
        group = kafka.name("g")
        with _one_record_read(kafka, which, protocol, topic, group) as (log, c):
            _busy_while_a_peer_joins(
                log,
                c,
                peer=(kafka, group, protocol, other),
                until=lambda: any(e[:2] == ("error", "_PARTITION_EOF") for e in log.flat()),
                what="the EOF event",
                window=3.0,
            )
        return log

    upstream, safe = both(run)
    for which, log in (("upstream", upstream), ("safe", safe)):
        flat = [e for e in log.flat() if e[0] in ("record", "error")]
        assert flat[-1] == ("error", "_PARTITION_EOF", "t", 0), f"{which}: {log.flat()}"
        assert sorted(set(flat[:-1])) == [("record", "t", 0, i) for i in range(5)], f"{which}: {log.flat()}"
        assert flat.count(("error", "_PARTITION_EOF", "t", 0)) == 1, f"{which}: {log.flat()}"
    if protocol == "range":
        assert [e for e in safe.flat() if e[0] in ("revoke", "assign")][-2:] == [
            ("revoke", (("t", 0),)),
            ("assign", (("t", 0),)),
        ], safe.calls


def test_close_runs_the_final_revocation(kafka: KafkaTestKit, protocol: Protocol) -> None:
    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=3)
        log = Log(topics={topic: "t"})
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol)) as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(c.assignment()) == 3, timeout=45, what="the assignment")
            log.call(c.close)
        return log

    upstream, safe = both(run)
    assert upstream.events() == safe.events()
    assert upstream.events()[-1] == [("revoke", (("t", 0), ("t", 1), ("t", 2)))]


def test_a_peer_joining_and_leaving(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """The consumer under test meets a (plain) peer: the same callbacks, in the same order."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=4)
        group = kafka.name("g")
        log = Log(topics={topic: "t"})
        with consumer_of(which, kafka.consumer_conf(group, protocol)) as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(c.assignment()) == 4, timeout=45, what="all four partitions")
            peer = Consumer(kafka.consumer_conf(group, protocol))
            peer.subscribe([topic])
            try:
                poll_until(
                    log,
                    c,
                    lambda: peer.poll(0.05) is None and len(c.assignment()) == 2 and len(peer.assignment()) == 2,
                    timeout=60,
                    what="the partitions to be shared",
                )
            finally:
                peer.close()
            poll_until(log, c, lambda: len(c.assignment()) == 4, timeout=60, what="all four back")
        return log

    upstream, safe = both(run)

    def moves(log: Log) -> list[tuple[str, int]]:
        # Callbacks, by kind and size; empty incremental callbacks count too.
        return [(e[0], len(e[1])) for e in log.flat() if e[0] in ("assign", "revoke", "lost")]

    assert moves(upstream) == moves(safe)


def test_an_exception_from_on_assign_reaches_the_poll_that_ran_it(kafka: KafkaTestKit, protocol: Protocol) -> None:
    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, 3, partitions=1)
        log = Log(topics={topic: "t"})
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol)) as c:
            notes = log.callbacks()

            def failing(consumer: Consumer, parts: list[TopicPartition]) -> None:
                notes["on_assign"](consumer, parts)
                raise ValueError("on_assign failed")

            c.subscribe([topic], on_assign=failing)
            poll_until(log, c, lambda: len(records(log)) == 3, timeout=45, what="the records after the failure")
        return log

    upstream, safe = both(run)
    assert upstream.events() == safe.events()
    assert ("raised", "ValueError", "on_assign failed") in upstream.flat()


def test_commit_committed_and_position_answer_alike(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """Offsets the application sees: commit()'s result, committed(), position(), store + commit."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 8, partitions=[0])
        log = Log(topics={topic: "t"})
        conf = kafka.consumer_conf(kafka.name("g"), protocol, enable_auto_commit=False)
        parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

        def offsets(result: list[TopicPartition] | None) -> Event:
            return ("offsets", tuple((log.role(tp.topic), tp.partition, tp.offset, tp.error) for tp in result or []))

        with consumer_of(which, conf) as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(records(log)) == 3, timeout=45, what="three records")
            log.calls.append([offsets(c.commit(asynchronous=False))])
            log.calls.append([offsets(c.committed(parts, timeout=10))])
            log.calls.append([offsets(c.position(parts))])
            msg = log.call(lambda: c.poll(5.0))
            assert msg is not None and msg.error() is None
            log.calls.append([offsets(c.commit(message=msg, asynchronous=False))])
            log.calls.append([offsets(c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False))])
            log.calls.append([offsets(c.committed(parts, timeout=10))])
        return log

    upstream, safe = both(run)
    assert [c for c in upstream.events() if c[0][0] == "offsets"] == [c for c in safe.events() if c[0][0] == "offsets"]
    assert records(upstream) == records(safe)


def test_store_offsets_then_commit_answer_alike(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """With the application managing the store (``enable.auto.offset.store=false``)."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, 5, partitions=1)
        log = Log(topics={topic: "t"})
        conf = kafka.consumer_conf(kafka.name("g"), protocol, enable_auto_commit=False, enable_auto_offset_store=False)
        with consumer_of(which, conf) as c:
            c.subscribe([topic], **log.callbacks())
            poll_until(log, c, lambda: len(records(log)) == 4, timeout=45, what="four records")
            log.calls.append([("commit", repr(_outcome(lambda: c.commit(asynchronous=False))))])
            c.store_offsets(offsets=[TopicPartition(topic, 0, 2)])
            result = c.commit(asynchronous=False)
            log.calls.append([("commit", tuple((tp.partition, tp.offset) for tp in result or []))])
            committed = c.committed([TopicPartition(topic, 0)], timeout=10)
            log.calls.append([("committed", tuple((tp.partition, tp.offset) for tp in committed))])
        return log

    upstream, safe = both(run)
    assert upstream.events() == safe.events()


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("returned", fn())
    except KafkaException as exc:
        return ("raised", exc.args[0].name())


def test_an_unknown_topic_is_reported_as_upstream_does(kafka: KafkaTestKit, protocol: Protocol) -> None:
    def run(which: str) -> Log:
        missing = kafka.name("missing")
        log = Log(topics={missing: "missing"})
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol)) as c:
            c.subscribe([missing], **log.callbacks())
            # Classic groups report the missing topic within seconds; a KIP-848 group says nothing.
            window = time.monotonic() + 8

            def reported() -> bool:
                return any(e[0] in ("error", "raised") for e in log.flat()) or time.monotonic() > window

            poll_until(log, c, reported, timeout=30, what="an error or the end of the window")
        return log

    upstream, safe = both(run)
    first = [[e for e in c if e[0] in ("error", "raised")] for c in upstream.events()]
    mine = [[e for e in c if e[0] in ("error", "raised")] for c in safe.events()]
    assert [c for c in first if c][:1] == [c for c in mine if c][:1]


def test_pause_and_resume_of_an_assigned_partition_deliver_the_same_records(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """assign()-based: pause() holds a partition back, resume() goes on from where it stopped."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 20, partitions=2)
        log = Log(topics={topic: "t"})
        p0, p1 = TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)
        with consumer_of(which, kafka.consumer_conf(kafka.name("g"), protocol)) as c:
            c.assign([p0, p1])
            poll_until(log, c, lambda: any(e[2] == 0 for e in records(log)), timeout=30, what="a record of 0")
            c.pause([TopicPartition(topic, 0)])
            seen = len(records(log))
            poll_until(log, c, lambda: sum(1 for e in records(log) if e[2] == 1) == 10, timeout=30, what="all of 1")
            paused_records = [e for e in records(log)[seen:] if e[2] == 0]
            log.calls.append([("while paused", len(paused_records))])
            c.resume([TopicPartition(topic, 0)])
            poll_until(log, c, lambda: len(set(records(log))) == 20, timeout=30, what="all 20")
        return log

    upstream, safe = both(run)

    def of(log: Log, partition: int) -> list[Event]:
        return [e for e in records(log) if e[2] == partition]

    assert [e for e in upstream.flat() if e[0] == "while paused"] == [("while paused", 0)]
    assert [e for e in safe.flat() if e[0] == "while paused"] == [("while paused", 0)]
    assert of(upstream, 0) == of(safe, 0)
    assert of(upstream, 1) == of(safe, 1)


def test_an_exception_from_stats_cb_reaches_poll_not_close(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """A stats_cb that raises: the exception leaves the poll() that served it, as upstream's does,
    and close() right after a poll() raises nothing (the keepalive thread does not delay close)."""

    def run(which: str) -> tuple[Log, list[list[Event]]]:
        topic = kafka.create_topic(partitions=1)
        log = Log(topics={topic: "t"})
        closes: list[list[Event]] = []
        for _ in range(3):

            def stats(_json: str) -> None:
                raise ValueError("stats_cb failed")

            conf = kafka.consumer_conf(kafka.name("g"), protocol, statistics_interval_ms=1000)
            conf["stats_cb"] = stats
            c = CLASSES[which](conf)
            c.subscribe([topic])
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                log.call(lambda: c.poll(0.1))  # noqa: B023 - called at once
            log.call(c.close)
            closes.append(log.calls[-1])
        return log, closes

    (upstream, upstream_closes), (safe, safe_closes) = run("upstream"), run("safe")
    failed = ("raised", "ValueError", "stats_cb failed")
    assert failed in upstream.flat() and failed in safe.flat()
    assert upstream_closes == safe_closes == [[], [], []]


def test_an_offsets_tool_commits_what_it_is_told(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """A consumer that never subscribed nor assigned (an offsets tool) commits explicit offsets for
    its group, as upstream does (I7 refuses only a group member's commits of partitions it does not
    own): the commit's result and what the group then holds are the same."""

    def run(which: str) -> Log:
        topic = kafka.create_topic(partitions=2)
        kafka.produce(topic, 12, partitions=2)
        group = kafka.name("g")
        log = Log(topics={topic: "t"})
        parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

        def offsets(result: list[TopicPartition] | None) -> Event:
            return ("offsets", tuple((log.role(tp.topic), tp.partition, tp.offset, tp.error) for tp in result or []))

        conf = kafka.consumer_conf(group, protocol, enable_auto_commit=False)
        with consumer_of(which, conf) as tool:
            told = [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 6)]
            log.calls.append([offsets(tool.commit(offsets=told, asynchronous=False))])
            log.calls.append([offsets(tool.committed(parts, timeout=10))])
        # What the group holds, read by a plain client: the next owner starts there.
        reader = Consumer(kafka.consumer_conf(group, protocol))
        try:
            log.calls.append([offsets(reader.committed(parts, timeout=10))])
        finally:
            reader.close()
        return log

    upstream, safe = both(run)
    assert upstream.events() == safe.events()
    assert upstream.events()[-1] == [("offsets", (("t", 0, 4, None), ("t", 1, 6, None)))], upstream.calls
