"""One soak member: a SafeConsumer group member run as its own process, driven by a seeded RNG.

    python -m tests.soak.member BOOTSTRAP GROUP PROTOCOL SEED TOPIC [TOPIC ...] [--drain]

It subscribes to the topics with auto-commit and the automatic offset store at their defaults,
then loops: ``poll()`` or ``consume(n)`` at random, and at random moments pauses and resumes
partitions, pauses and resumes topics (by name or ``^regex``), pauses and resumes the whole
consumer, works inside ``with c.keepalive():`` or simply goes quiet (long enough, sometimes,
for the automatic keepalive to park it). Every mark it sets expires after a random time, so
no partition stays paused by intent for long.

It checks, at the moment each record is returned, what the application can see:

- I1: the record's partition is not in ``c.paused()``, nor covered by a consumer or topic mark
  the application set and has not lifted (those marks are never dropped by a rebalance);
- I2: ``c.owns(msg)`` and the partition is in ``c.assignment()``;
- I4 (after each call): ``c.paused()`` covers every assigned partition the consumer or topic
  marks cover, and nothing the application never paused (partition marks may be dropped by a
  rebalance, never invented). In drain mode, after every mark was lifted, nothing is paused.

Its stdout is line protocol, flushed before the next call into the consumer, so a SIGKILL
loses nothing the parent needs (a torn last line is ignored):

    S                       signal handlers installed: the parent may signal it now
    R <t> <p> <o>           a record handed to the application (t: index into TOPIC list)
    B                       the application came back for more: it finished the records above
    V <invariant> <detail>  a violation seen at the moment of return
    W <error>               an error event returned by poll()/consume() (not a violation)
    D                       drain mode entered: every pause lifted, no more random actions
    C                       closed after SIGTERM; the process exits 0 next

Signals: SIGTERM -> ``c.close()`` and exit 0. SIGUSR1 -> drain mode. No payload is printed.

With ``--raw`` it is the baseline: a raw ``confluent_kafka.Consumer`` with the same settings and
call pattern (``poll()`` or ``consume(n)`` at random, quiet spells of simulated work), but no
pauses or keepalive (raw has none to survive a rebalance) and no checks: only its records.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from types import FrameType

from confluent_kafka import Consumer, Message, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

Key = tuple[str, int]

logger = logging.getLogger("soak.member")

#: librdkafka requires max.poll.interval.ms >= session.timeout.ms (6 s in the test kit's config).
MAX_POLL_INTERVAL_MS = 6000
#: Short, so the committed offsets follow the stored ones closely (auto-commit stays on).
DEFAULT_COMMIT_INTERVAL_MS = 1000

_terminate = threading.Event()
_drain = threading.Event()
#: Set by either signal: cuts short any simulated work or keepalive wait.
_wake = threading.Event()


def _on_term(_signum: int, _frame: FrameType | None) -> None:
    _terminate.set()
    _wake.set()


def _on_usr1(_signum: int, _frame: FrameType | None) -> None:
    _drain.set()
    _wake.set()


def _keys(tps: list[TopicPartition]) -> set[Key]:
    return {(tp.topic, tp.partition) for tp in tps}


class Member:
    """The application: its pause intent, its random actions, and its checks."""

    def __init__(self, consumer: SafeConsumer, topics: list[str], rng: random.Random) -> None:
        self.c = consumer
        self.topics = topics
        self.rng = rng
        #: Pause intent the application set and has not lifted, each with when it lifts it.
        self.consumer_until: float | None = None
        self.topic_marks: dict[str, tuple[str, float]] = {}  # entry -> (topic, lift time)
        self.partition_marks: dict[Key, float] = {}
        self.draining = False
        self.next_action = time.monotonic() + rng.uniform(0.2, 1.0)
        self.reported: set[str] = set()  # I4 findings already printed, so a stuck state prints once
        self.out: list[str] = []
        #: What happened lately (calls, actions, rebalance callbacks), written to stderr on a violation.
        self.history: deque[str] = deque(maxlen=80)
        self.started = time.monotonic()
        self._last_state = ""
        #: The application holds records handed out since it last came back.
        self._holding = False

    def note(self, event: str) -> None:
        self.history.append(f"{time.monotonic() - self.started:8.3f} [{threading.current_thread().name}] {event}")

    def on_assign(self, _c: object, partitions: list[TopicPartition]) -> None:
        self.note(f"on_assign {sorted(_keys(partitions))}")

    def on_revoke(self, _c: object, partitions: list[TopicPartition]) -> None:
        self.note(f"on_revoke {sorted(_keys(partitions))}")

    def on_lost(self, _c: object, partitions: list[TopicPartition]) -> None:
        self.note(f"on_lost {sorted(_keys(partitions))}")

    # -- output ----------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.out.append(line + "\n")

    def violation(self, text: str) -> None:
        first = not any(line.startswith("V ") for line in self.out)
        self.emit(f"V {text}")
        if first:  # once per call: the events that led here, for whoever reads the member's stderr
            self.note(f"VIOLATION {text}")
            logger.error("violation; recent events:\n%s", "\n".join(self.history))

    def flush(self) -> None:
        if self.out:
            sys.stdout.write("".join(self.out))
            sys.stdout.flush()
            self.out.clear()

    # -- intent ----------------------------------------------------------------------------
    def topic_marked(self, topic: str) -> bool:
        return any(t == topic for t, _ in self.topic_marks.values())

    def lift_expired(self) -> None:
        now = time.monotonic()
        if self.consumer_until is not None and now >= self.consumer_until:
            self.c.resume()
            self.consumer_until = None
        for entry, (_t, until) in list(self.topic_marks.items()):
            if now >= until:
                self.c.resume_topics([entry])
                del self.topic_marks[entry]
        expired = [k for k, until in self.partition_marks.items() if now >= until]
        if expired:
            self.c.resume([TopicPartition(t, p) for t, p in expired])
            for k in expired:
                del self.partition_marks[k]

    def lift_all(self) -> None:
        """Drain mode: the application lifts every mark it ever set."""
        self.c.resume()
        self.consumer_until = None
        if self.topic_marks:
            self.c.resume_topics(list(self.topic_marks))
            self.topic_marks.clear()
        if self.partition_marks:
            self.c.resume([TopicPartition(t, p) for t, p in self.partition_marks])
            self.partition_marks.clear()
        self.draining = True
        self.note("drain: every mark lifted")
        self.emit("D")

    # -- random actions --------------------------------------------------------------------
    def act(self) -> None:
        now = time.monotonic()
        if now < self.next_action:
            return
        self.next_action = now + self.rng.expovariate(1 / 0.8)
        actions: list[tuple[float, Callable[[], None]]] = [
            (3, self.pause_partitions),
            (2, self.resume_partitions),
            (1.5, self.pause_topic),
            (1, self.resume_topic),
            (1, self.pause_consumer),
            (1.5, self.keepalive),
            (1, self.quiet),
        ]
        weights = [w for w, _ in actions]
        action = self.rng.choices([a for _, a in actions], weights)[0]
        self.note(
            f"{action.__name__} (consumer mark {self.consumer_until is not None}, topic marks "
            f"{sorted(self.topic_marks)}, partition marks {sorted(self.partition_marks)})"
        )
        action()

    def _lift_time(self, low: float, high: float) -> float:
        return time.monotonic() + self.rng.uniform(low, high)

    def pause_partitions(self) -> None:
        owned = sorted(_keys(self.c.assignment()))
        if not owned:
            return
        picked = self.rng.sample(owned, self.rng.randint(1, max(1, len(owned) // 2)))
        self.c.pause([TopicPartition(t, p) for t, p in picked])
        for k in picked:
            self.partition_marks[k] = self._lift_time(0.2, 4.0)

    def resume_partitions(self) -> None:
        if not self.partition_marks:
            return
        marked = sorted(self.partition_marks)
        picked = self.rng.sample(marked, self.rng.randint(1, len(marked)))
        self.c.resume([TopicPartition(t, p) for t, p in picked])  # some may have left: that is fine
        for k in picked:
            del self.partition_marks[k]

    def pause_topic(self) -> None:
        topic = self.rng.choice(self.topics)
        entry = topic if self.rng.random() < 0.6 else f"^{re.escape(topic)}$"
        if entry in self.topic_marks:
            return
        self.c.pause_topics([entry])
        self.topic_marks[entry] = (topic, self._lift_time(0.3, 4.0))

    def resume_topic(self) -> None:
        if self.topic_marks:
            entry = self.rng.choice(sorted(self.topic_marks))
            self.c.resume_topics([entry])
            del self.topic_marks[entry]

    def pause_consumer(self) -> None:
        if self.consumer_until is None:
            self.c.pause()
            self.consumer_until = self._lift_time(0.2, 3.0)

    def keepalive(self) -> None:
        # Long work, sometimes well past max.poll.interval.ms, split in chunks; between chunks the
        # application may change its pause intent (pause/resume inside the block still apply).
        seconds = self.rng.uniform(0.3, 2.0) if self.rng.random() < 0.6 else self.rng.uniform(2.0, 9.0)
        chunks = self.rng.randint(1, 3)
        self.note(f"keepalive for {seconds:.1f}s in {chunks} chunk(s)")
        with self.c.keepalive():
            for i in range(chunks):
                if _wake.wait(seconds / chunks):  # the simulated work; a signal cuts it short
                    break
                if i + 1 < chunks and self.rng.random() < 0.5:
                    inside = self.rng.choice([self.pause_partitions, self.resume_partitions, self.pause_topic])
                    self.note(f"inside keepalive: {inside.__name__}")
                    inside()
        self.note("keepalive exited")

    def quiet(self) -> None:
        # Work without keepalive(): past keepalive_after (max.poll/2 = 3 s) the automatic one parks us.
        seconds = self.rng.uniform(0.05, 4.5)
        self.note(f"quiet for {seconds:.1f}s")
        _wake.wait(seconds)  # the simulated work
        self.note("quiet over")

    # -- consuming and checks --------------------------------------------------------------
    def step(self) -> None:
        c = self.c
        if self._holding:
            # Coming back after records: they are finished (I8 stores them in this call).
            self.emit("B")
            self.flush()
            self._holding = False
        # Both call styles, interleaved: records poll() read ahead are handed out by a later consume().
        if self.rng.random() < 0.4:
            n = self.rng.randint(1, 100)
            how = f"consume({n})"
            msgs = c.consume(n, 0.2)
        else:
            how = "poll"
            m = c.poll(0.2)
            msgs = [] if m is None else [m]
        # Everything below reads state at the moment of return, before any other call.
        paused = _keys(c.paused())
        assigned = _keys(c.assignment())
        state = f"assignment {sorted(assigned)}; paused {sorted(paused)}"
        if msgs or state != self._last_state:  # every call that returned something or saw a change
            got = Counter((m.topic(), m.partition()) for m in msgs if m.error() is None)
            self.note(f"{how} -> {len(msgs)} {dict(got)}; {state}")
            self._last_state = state
        for m in msgs:
            self.check_record(m, how, paused, assigned)
        self._holding = self._holding or any(m.error() is None for m in msgs)
        self.check_pause_state(paused, assigned)

    def check_record(self, m: Message, how: str, paused: set[Key], assigned: set[Key]) -> None:
        err = m.error()
        if err is not None:
            self.emit(f"W {err.name()}")
            return
        topic, partition, offset = m.topic(), m.partition(), m.offset()
        assert topic is not None and partition is not None and offset is not None
        key = (topic, partition)
        self.emit(f"R {self.topics.index(topic)} {partition} {offset}")
        where = f"{topic}[{partition}]@{offset} via {how}"
        if key in paused:
            self.violation(f"I1 {where}: partition in paused()")
        elif self.consumer_until is not None:
            self.violation(f"I1 {where}: consumer mark set, paused()={sorted(paused)}")
        elif self.topic_marked(topic):
            self.violation(f"I1 {where}: topic mark set, paused()={sorted(paused)}")
        if not self.c.owns(m):
            self.violation(f"I2 {where}: not owns(), assignment()={sorted(assigned)}")
        elif key not in assigned:
            self.violation(f"I2 {where}: owns() but not in assignment()={sorted(assigned)}")

    def check_pause_state(self, paused: set[Key], assigned: set[Key]) -> None:
        if self.consumer_until is not None:
            required = set(assigned)
            allowed = set(assigned)
        else:
            required = {k for k in assigned if self.topic_marked(k[0])}
            allowed = required | set(self.partition_marks)
        missing, extra = required - paused, paused - allowed
        what = "after every mark was lifted (drain)" if self.draining else "not paused by the application"
        for kind, keys in (("covered by a mark but not paused", missing), (what, extra)):
            if keys:
                finding = f"I4 paused() {kind}: {sorted(keys)}"
                if finding not in self.reported:
                    self.reported.add(finding)
                    self.violation(finding)


def main() -> None:
    # First thing: a signal the parent sends once we say "S" must not kill us with its default action.
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGUSR1, _on_usr1)
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("protocol")
    parser.add_argument("seed")
    parser.add_argument("topics", nargs="+")
    parser.add_argument("--drain", action="store_true", help="start in drain mode: no random actions")
    parser.add_argument("--commit-interval-ms", type=int, default=DEFAULT_COMMIT_INTERVAL_MS)
    parser.add_argument("--raw", action="store_true", help="the baseline: a raw Consumer, no pauses, no checks")
    parser.add_argument(
        "--migration-timeout",
        default="30",
        help="SafeConsumer's migration_timeout in seconds, or 'none' (wait for a convertible group for ever)",
    )
    args = parser.parse_args()
    # SOAK_MEMBER_LOG_LEVEL=INFO (with the controller's --keep-logs) shows each member's rebalances.
    level = os.environ.get("SOAK_MEMBER_LOG_LEVEL", "WARNING")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    protocol: Protocol = args.protocol
    conf = KafkaTestKit(args.bootstrap).consumer_conf(
        args.group,
        protocol,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        auto_commit_interval_ms=args.commit_interval_ms,
        # A stall bound of 5 s (see safeconsumer.consumer._stall): a guard that healed a healthy member
        # would show within a run.
        socket_timeout_ms=5000,
    )
    if logging.getLogger().isEnabledFor(logging.INFO):
        conf["on_commit"] = _log_commit  # which commits failed, and which offsets went through
    if args.raw:
        if args.drain:
            _drain.set()  # a member started for the drain acknowledges it ("D") like the others
        raw_main(Consumer(conf), list(args.topics), random.Random(args.seed))
        return
    c = SafeConsumer(
        conf, migration_timeout=None if args.migration_timeout == "none" else float(args.migration_timeout)
    )
    member = Member(c, list(args.topics), random.Random(args.seed))
    print("S", flush=True)
    try:
        c.subscribe(list(args.topics), on_assign=member.on_assign, on_revoke=member.on_revoke, on_lost=member.on_lost)
        if args.drain:
            _drain.set()
        while not _terminate.is_set():
            if _drain.is_set() and not member.draining:
                member.lift_all()
            if not member.draining:
                member.lift_expired()
                member.act()
                if _terminate.is_set():
                    break
            member.step()
            member.flush()
        c.close()
        member.emit("C")
    finally:
        # Also on an unexpected exception (the process then exits 1 with its traceback on stderr):
        # records already handed out must reach the parent.
        member.flush()


def _log_commit(err: object, partitions: list[TopicPartition]) -> None:
    """librdkafka's offset-commit callback (members logging at INFO): the outcome and the offsets."""
    offsets = " ".join(f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in partitions if tp.offset >= 0)
    logging.getLogger("soak.member").info("commit %s: %s", "ok" if err is None else err, offsets or "-")


def raw_main(c: Consumer, topics: list[str], rng: random.Random) -> None:
    """The baseline member: the same calls and quiet spells as a SafeConsumer member, nothing else."""
    print("S", flush=True)
    out: list[str] = []
    holding = False
    next_quiet = time.monotonic() + rng.expovariate(1 / 0.8) * 7  # quiet is 1 of 11 action weights
    try:
        c.subscribe(topics)
        drained = False
        while not _terminate.is_set():
            if _drain.is_set() and not drained:
                drained = True
                out.append("D")
            if not drained and time.monotonic() >= next_quiet:
                _wake.wait(rng.uniform(0.05, 4.5))
                next_quiet = time.monotonic() + rng.expovariate(1 / 0.8) * 7
            if holding:
                print("B", flush=True)  # coming back: the records above are finished
                holding = False
            if rng.random() < 0.4:
                msgs = c.consume(rng.randint(1, 100), 0.2)
            else:
                polled = c.poll(0.2)
                msgs = [] if polled is None else [polled]
            for m in msgs:
                err = m.error()
                if err is not None:
                    out.append(f"W {err.name()}")
                else:
                    holding = True
                    out.append(f"R {topics.index(str(m.topic()))} {m.partition()} {m.offset()}")
            if out:
                print("\n".join(out), flush=True)
                out.clear()
        c.close()
        print("C", flush=True)
    finally:
        if out:
            print("\n".join(out), flush=True)


if __name__ == "__main__":
    main()
