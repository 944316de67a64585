"""The share soak: SafeShareConsumer member processes in one share group under random starts,
SIGKILLs and SIGTERMs, broker SIGKILLs, slow work past the lock, poison records and pauses.

    python -m tests.soak.share [--seconds 120] [--mode implicit explicit] [--seed share] [--rate 100]
                               [--no-kills] [--no-faults] [--fault-every 40] [--logs DIR] [--keep-logs]

Per acknowledgement mode, on a fresh topic (3 partitions) and a fresh share group whose lock is
:data:`LOCK_MS` and delivery count limit :data:`DELIVERY_LIMIT`: a producer thread writes numbered
records at ``--rate`` records/s, one in :data:`POISON_EVERY` a poison record that always fails,
while the controller keeps between 1 and ``--members`` member processes alive (more members than
partitions), starting, SIGKILLing and SIGTERMing them at random (seeded). A member
(``--member``) reads with ``start="earliest"`` and ``poison=DeadLetter(...)``, runs every record
through ``handle()``, works past the lock on one record in :data:`SLOW_EVERY`, pauses for a second
now and then, and prints one line per record it processed and per lock overrun the consumer
reported (its WARNING, parsed). It prints ``READY`` once its signal handlers are installed: before
that line the controller sends it no signal but SIGKILL (a SIGUSR1 or SIGTERM would end it). Its
stderr (the library's WARNING and ERROR lines, any traceback, faulthandler's stacks) is a file in
the run's log directory; a member that stops on an exception prints ``FATAL <reason>``, closes its
consumer and exits 1.

With broker faults (the default unless ``--no-faults`` or ``KAFKA_BOOTSTRAP_SERVERS``), the soak
runs on the two-broker cluster of :mod:`tests.cluster` and a fault thread SIGKILLs the second
broker every ``--fault-every`` seconds and starts it again (:meth:`Cluster.restart_second`). The
topic has one replica, so the partitions the second broker leads vanish with it and come back
with it; the share-group state topic keeps a replica on both brokers.

Then production, the chaos and the faults stop, every surviving member is told to stop pausing and
working slowly (SIGUSR1, once it is ready), two members started calm (``--calm``) join, and the
group must drain within ``--drain-timeout``. Finally every member gets SIGTERM and must exit 0.

A mode passes when every produced record was processed at least once or is in the dead-letter topic
(none archived without a copy), every poison record is in the dead-letter topic, every record
processed more than once is explained (before it was processed again, a member that processed it
was killed or terminated, or the second broker was SIGKILLed before it, at most
:data:`FAULT_WINDOW` seconds after the earlier processing or while that broker was down; or a member
reported a lock overrun covering it), every member's exit status is the expected
one (-9 after our SIGKILL, 0 after our SIGTERM, never an exit on its own: such a death is a failure
with the member's reason and the end of its stderr) and no fault failed. When the group is left
with no live member while records wait (the drainers died), the run says so, with what waited per
partition: those records are not lost, nobody was left to take them. The drain also ends when the
broker's share-partition start offset is past every record that waits (two looks 5 s apart): nobody
will be handed those again, they are lost. Exit status 0 when every mode passed.

``--seconds 1800`` (``make soak-long``, ``make soak SOAK_LONG=1``) is the long mode: the bookkeeping
is a few bytes per record, and a progress line with the running figures is printed every
``--progress-every`` seconds (60).

The run's log directory (``--logs DIR``, else a directory under ``out/soak`` kept only when the run
failed; the report names it) holds per member ``member-N.stderr`` and ``member-N.out`` (its stdout,
each line with when the controller read it), and ``events.txt`` (every start, signal, death, fault
and progress line). For the first lost records the report says when the broker logged their last
delivery and what happened around then; for the first unexplained doubles, who processed them
when, on which delivery, and how those members ended.

What a SIGKILL can lose: librdkafka acquires records before ``poll()`` returns them (its fetcher
fills a local queue). A member killed while records on their *last* delivery sit in that queue never
saw them, so no copy was written, and the broker archives them when their lock runs out. The soak
counts such records as lost (``make soak`` runs with kills); the short run in ``make test`` SIGTERMs
members only (``close()`` gives back what it holds).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import itertools
import logging
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

if TYPE_CHECKING:
    from safeconsumer.testing import KafkaTestKit

    from ..cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
LOCK_MS = 3000
DELIVERY_LIMIT = 3
POISON_EVERY = 50
SLOW_EVERY = 200
#: A member must print READY within this many seconds of its start (imports on two busy cores).
READY_DEADLINE = 60.0
#: A SIGTERMed member must have closed and exited within this many seconds.
CLOSE_DEADLINE = 30.0
#: Lines of a member's stderr quoted in its failure.
TAIL_LINES = 12
#: A record processed again after a broker SIGKILL is the fault's doing when it was processed before
#: at most this long before the kill (or while the broker was down): its acknowledgement goes with the
#: member's next poll, which slow work delays past the lock; two locks and some.
FAULT_WINDOW = 2 * LOCK_MS / 1000 + 5.0

Key = tuple[int, int]  # (partition, offset)
Processing = tuple[int, float, int]  # (member index, seconds into the run, delivery count)

#: The controller's own clients (producer, dead-letter reader) log librdkafka's lines here: a broker
#: SIGKILL makes each of them complain, which the run reports through its figures instead.
CLIENT_LOG = logging.getLogger("soak.share.clients")
CLIENT_LOG.addHandler(logging.NullHandler())
CLIENT_LOG.propagate = False


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


# -- the member -----------------------------------------------------------------------------------
def member(args: Sequence[str], *, calm_at_start: bool) -> int:
    """One member process (``args``: bootstrap servers, group, topic, dead-letter topic, mode, seed);
    its exit status: 0 when it closed on SIGTERM, 1 when an exception stopped it."""
    bootstrap, group, topic, dlt, mode, seed = args
    # Signal handlers first: the controller sends SIGTERM and SIGUSR1 only after READY.
    stop = threading.Event()
    calm = threading.Event()
    if calm_at_start:
        calm.set()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: calm.set())
    out = sys.stdout
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            out.write(line + "\n")
            out.flush()

    # stderr is the member's log file: a death leaves its reason there. SOAK_MEMBER_LOG_LEVEL=INFO
    # (with --keep-logs) adds what the library logs at INFO, e.g. the records it gave back.
    faulthandler.enable()  # a crash inside librdkafka: every thread's stack
    logging.basicConfig(
        level=os.environ.get("SOAK_MEMBER_LOG_LEVEL", "WARNING"),
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
    )

    class Overruns(logging.Handler):
        """The consumer's lock-overrun WARNINGs, as OVERRUN lines (partition, first, last offset)."""

        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "acquisition lock" in text:
                for partition, first, last in re.findall(r"\[(\d+)\] @ (\d+)(?:\.\.(\d+))?", text):
                    say(f"OVERRUN {partition} {first} {last or first}")

    logging.getLogger("safeconsumer").addHandler(Overruns(logging.WARNING))
    log = logging.getLogger("soak.share.member")
    say(f"READY {os.getpid()}")

    from safeconsumer import DeadLetter, SafeShareConsumer

    rng = random.Random(f"{seed}-{os.getpid()}")
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": mode,
        "logger": logging.getLogger("soak.librdkafka"),
    }

    def process(msg: Message) -> None:
        value = msg.value() or b""
        if value.startswith(b"poison"):
            raise ValueError("a poison record")
        if not calm.is_set() and int(value.split(b"-")[1]) % SLOW_EVERY == 0:
            time.sleep(LOCK_MS / 1000 * 1.3)  # past the lock: the rest of the batch goes back first
        say(f"P {msg.partition()} {msg.offset()} {msg.delivery_count()}")

    failed = False
    consumer: SafeShareConsumer | None = None
    try:
        consumer = SafeShareConsumer(conf, start="earliest", poison=DeadLetter(dlt, retries=0))
        consumer.subscribe([topic])
        paused_until = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if not calm.is_set() and not paused_until and rng.random() < 0.01:
                consumer.pause()
                paused_until = now + rng.uniform(0.5, 1.5)
            elif paused_until and (now >= paused_until or calm.is_set()):
                consumer.resume()
                paused_until = 0.0
            for msg in consumer.poll(0.2):
                if msg.error() is not None or stop.is_set():
                    continue
                consumer.handle(msg, process)
    except Exception as exc:  # the member's death: its reason to the log and the controller
        failed = True
        log.exception("the member stopped on an exception")
        say(f"FATAL {_reason(exc)}")
    if consumer is not None:
        try:
            consumer.close()
        except Exception as exc:  # as above
            failed = True
            log.exception("close() failed")
            say(f"FATAL close(): {_reason(exc)}")
    if not failed:
        say("CLOSED")
    return 1 if failed else 0


# -- the controller -------------------------------------------------------------------------------
Expect = Literal["run", "kill", "term", "final"]


class _Member:
    """One member process and what the controller knows of it."""

    def __init__(self, index: int, proc: subprocess.Popen[str], log_path: Path, log: IO[str], at: float) -> None:
        self.index = index
        self.proc = proc
        self.log_path = log_path
        self.log = log
        self.started = time.monotonic()
        self.started_at = at  # seconds into the run
        self.ready = threading.Event()  # it printed READY: its signal handlers are installed
        self.closed = threading.Event()  # it printed CLOSED
        self.fatal = ""  # what it printed after FATAL
        #: What the controller told it: nothing ("run"), SIGKILL, SIGTERM in the chaos, SIGTERM at the end.
        self.expect: Expect = "run"
        self.signalled_at: float | None = None  # seconds into the run
        self.exited_at: float | None = None  # seconds into the run: its output ended
        self.given_up = False  # killed by the controller for hanging: its failure is recorded already
        self.reaped = False
        self.records = 0
        self.reader: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return not self.reaped and self.proc.poll() is None

    @property
    def live(self) -> bool:
        """Running and not told to go: a member of the group for the controller."""
        return self.expect == "run" and self.running

    def stderr_tail(self) -> str:
        if not self.log.closed:
            self.log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        return "\n".join(f"      {line}" for line in lines) or "      (empty)"


class _Ledger:
    """Who processed what and when, a few bytes per record (long runs): per partition, the first
    processing's member (index + 1; 0: not yet), time and delivery count, indexed by offset; the
    later processings of the records processed more than once; the dead-lettered origins; the
    reported overruns."""

    def __init__(self) -> None:
        self.first = [array("i") for _ in range(PARTITIONS)]
        self.first_at = [array("d") for _ in range(PARTITIONS)]
        self.first_count = [array("b") for _ in range(PARTITIONS)]
        #: (member index, seconds into the run, delivery count) of each processing after the first.
        self.again: dict[Key, list[Processing]] = {}
        self.times = 0
        self.overrun: set[Key] = set()
        self.dead: set[Key] = set()
        self.dead_copies = 0
        #: Dead-letter copies by why they were written (their exception class: ValueError for a poison
        #: record, LastDelivery for a copy made when a record was handed out on its last delivery).
        self.dead_reasons: Counter[str] = Counter()
        #: Per partition: every offset below it was processed or dead-lettered.
        self.done_below = [0] * PARTITIONS

    def processed(self, partition: int, offset: int, who: int, at: float, count: int) -> None:
        self.times += 1
        first = self.first[partition]
        if offset >= len(first):
            grow = offset + 1 - len(first)
            first.extend(itertools.repeat(0, grow))
            self.first_at[partition].extend(itertools.repeat(0.0, grow))
            self.first_count[partition].extend(itertools.repeat(0, grow))
        if first[offset] == 0:
            first[offset] = who + 1
            self.first_at[partition][offset] = at
            self.first_count[partition][offset] = min(count, 127)
        else:
            self.again.setdefault((partition, offset), []).append((who, at, count))

    def done(self, partition: int, offset: int) -> bool:
        first = self.first[partition]
        return (offset < len(first) and first[offset] != 0) or (partition, offset) in self.dead

    def processings(self, key: Key) -> list[Processing]:
        partition, offset = key
        first = (
            self.first[partition][offset] - 1,
            self.first_at[partition][offset],
            self.first_count[partition][offset],
        )
        return [first, *self.again.get(key, [])]

    def waiting(self, ends: dict[int, int]) -> dict[int, list[int]]:
        """Per partition, the offsets below its end neither processed nor dead-lettered."""
        out: dict[int, list[int]] = {}
        for partition, end in ends.items():
            below = self.done_below[partition]
            while below < end and self.done(partition, below):
                below += 1
            self.done_below[partition] = below
            missing = [o for o in range(below, end) if not self.done(partition, o)]
            if missing:
                out[partition] = missing
        return out


@dataclass
class Figures:
    mode: str
    seconds: float = 0.0
    drain_seconds: float = 0.0
    produced: int = 0
    poison: int = 0
    processed: int = 0
    #: Distinct records in the dead-letter topic, and the copies there (a record may be written twice).
    dead_lettered: int = 0
    dead_letter_copies: int = 0
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    starts: int = 0
    kills: int = 0
    terms: int = 0
    #: Members that ended without being told to (each also a member failure).
    died: int = 0
    overruns: int = 0
    doubles: int = 0
    #: Records processed more than once, by what explains them: "a stop" (a member that processed
    #: it was killed or terminated before it was processed again), "an overrun", "a broker fault",
    #: and "unexplained"; "after a death" counts the unexplained ones that followed a member dying
    #: on its own (a failure in itself).
    doubles_by: Counter[str] = field(default_factory=Counter)
    lost: list[Key] = field(default_factory=list)
    #: For the first lost records: the broker's last delivery and what happened around it.
    lost_detail: list[str] = field(default_factory=list)
    #: Of the lost records, those whose last delivery the broker logged within a lock's time before a
    #: member was SIGKILLed (S4's gap on Kafka 4.3: acquired by librdkafka, never returned by a poll,
    #: so no copy was made): said apart, still counted as lost.
    lost_near_kill: int = 0
    #: For the first unexplained doubles: who processed them when, and what happened around.
    unexplained_detail: list[str] = field(default_factory=list)
    #: Records neither processed nor dead-lettered when the group was left with no member: not lost.
    waiting: int = 0
    unexplained: list[Key] = field(default_factory=list)
    poison_missing: list[Key] = field(default_factory=list)
    #: A member that exited with another status than expected, hung, or never became ready.
    member_failures: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: Broker faults carried out, one line each.
    faults: list[str] = field(default_factory=list)
    #: Where the members' stderr files are (or were, for a passing run's removed directory).
    log_dir: str = ""
    logs_kept: bool = False

    @property
    def passed(self) -> bool:
        return not (self.lost or self.unexplained or self.poison_missing or self.failures or self.member_failures)

    def line(self) -> str:
        by = ", ".join(f"{n} {why}" for why, n in sorted(self.doubles_by.items())) or "none"
        reasons = ", ".join(f"{n} {why}" for why, n in self.dead_letter_reasons.most_common()) or "none"
        return (
            f"share soak ({self.mode}): produced {self.produced} ({self.poison} poison), processed "
            f"{self.processed} times, dead-lettered {self.dead_lettered} ({self.dead_letter_copies} copies: "
            f"{reasons}), {self.doubles} processed more than once (explained by: {by}; {len(self.unexplained)} "
            f"unexplained), {self.overruns} overruns reported; {self.starts} starts, {self.kills} kills, "
            f"{self.terms} terms, {self.died} died on their own, {len(self.faults)} broker faults; lost "
            f"{len(self.lost)}, waiting with no member {self.waiting}, poison not dead-lettered "
            f"{len(self.poison_missing)}, member failures {len(self.member_failures)}, failures "
            f"{len(self.failures)} (chaos {self.seconds:.0f}s, drain {self.drain_seconds:.1f}s)  "
            f"{'ok' if self.passed else 'FAIL'}"
        )

    def report(self) -> str:
        out = [self.line()]
        if self.lost:
            out.append(
                f"  lost (neither processed nor dead-lettered): {len(self.lost)}, of which {self.lost_near_kill} "
                f"handed out on their last delivery within a lock's time before a member SIGKILL: {self.lost[:20]}"
            )
        if self.poison_missing:
            out.append(f"  poison not dead-lettered: {self.poison_missing[:20]}")
        if self.unexplained:
            out.append(f"  processed more than once, unexplained: {self.unexplained[:20]}")
        out += [f"  lost {line}" for line in self.lost_detail]
        out += [f"  unexplained {line}" for line in self.unexplained_detail]
        out += [f"  fault: {f}" for f in self.faults]
        out += [f"  member failure: {f}" for f in self.member_failures]
        out += [f"  failure: {f}" for f in self.failures]
        if self.log_dir:
            out.append(f"  member logs: {self.log_dir}{'' if self.logs_kept else ' (removed: the run passed)'}")
        return "\n".join(out)


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"{code} (killed by {signal.Signals(-code).name})"
    return str(code)


class _Producer(threading.Thread):
    """Writes ``record-N`` (one in :data:`POISON_EVERY` ``poison-N``) round-robin over the partitions
    at ``rate`` records/s; idempotent, so a broker fault writes no record twice."""

    def __init__(self, kit: KafkaTestKit, topic: str, rate: float, lock: threading.Lock) -> None:
        super().__init__(name="share-soak-producer", daemon=True)
        self.topic = topic
        self.rate = rate
        self.lock = lock
        self.stop = threading.Event()
        self.poison: set[Key] = set()
        self.acked = 0
        #: Per partition: one past the highest offset acknowledged so far.
        self.ends = dict.fromkeys(range(PARTITIONS), 0)
        self.errors: Counter[str] = Counter()
        self.unsent = 0
        self._producer = Producer(
            {**kit.client_config, "enable.idempotence": True, "linger.ms": 5, "logger": CLIENT_LOG}
        )

    def run(self) -> None:
        seq = 0
        started = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while seq < due:
                poison = seq % POISON_EVERY == POISON_EVERY - 1
                value = f"{'poison' if poison else 'record'}-{seq}".encode()

                def delivered(err: KafkaError | None, msg: Message, poison: bool = poison) -> None:
                    if err is not None:
                        self.errors[err.name()] += 1
                        return
                    key = (msg.partition() or 0, msg.offset() or 0)
                    with self.lock:
                        self.acked += 1
                        self.ends[key[0]] = max(self.ends[key[0]], key[1] + 1)
                        if poison:
                            self.poison.add(key)

                try:
                    self._producer.produce(self.topic, value, partition=seq % PARTITIONS, on_delivery=delivered)
                except BufferError:
                    break  # the local queue is full (a broker is down): the next tick catches up
                seq += 1
            self._producer.poll(0)
            self.stop.wait(0.05)
        self.unsent = self._producer.flush(60)


class _DeadLetters(threading.Thread):
    """Reads the dead-letter topic from its start for the whole run: the origins into the ledger."""

    def __init__(self, kit: KafkaTestKit, dlt: str, ledger: _Ledger, lock: threading.Lock) -> None:
        from safeconsumer.testing import unique_name

        super().__init__(name="share-soak-dead-letters", daemon=True)
        self.ledger = ledger
        self.lock = lock
        self.stop = threading.Event()
        self.position = 0
        self.bad: list[str] = []
        self._consumer = Consumer(
            {
                **kit.client_config,
                "group.id": unique_name("soak-dlt"),
                "enable.auto.commit": False,
                "logger": CLIENT_LOG,
            }
        )
        self._consumer.assign([TopicPartition(dlt, 0, 0)])

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for m in self._consumer.consume(500, 0.5):
                    if m.error() is not None:
                        continue
                    self.position = (m.offset() or 0) + 1
                    headers: dict[str, bytes] = dict(m.headers() or [])  # type: ignore[arg-type]
                    by_broker = "__dlq.errors.offset" in headers
                    prefix = "__dlq.errors." if by_broker else "safeconsumer.dlt.original."
                    try:
                        key = (int(headers[prefix + "partition"]), int(headers[prefix + "offset"]))
                    except (KeyError, ValueError) as exc:
                        self.bad.append(f"dead letter at offset {m.offset()} without its origin: {exc!r}")
                        continue
                    if by_broker:  # "Offset rejected by client." / "Offset delivery count exceeded ..."
                        text = headers.get("__dlq.errors.message", b"?").decode(errors="replace")
                        reason = "broker: rejected" if "rejected" in text else "broker: delivery limit"
                    else:
                        reason = headers.get("safeconsumer.dlt.exception.class", b"?").decode(errors="replace")
                    with self.lock:
                        self.ledger.dead.add(key)
                        self.ledger.dead_copies += 1
                        self.ledger.dead_reasons[reason.rsplit(".", 1)[-1]] += 1
        finally:
            self._consumer.close()


class ShareSoak:
    """One acknowledgement mode's soak (see the module docstring)."""

    def __init__(
        self,
        kit: KafkaTestKit,
        mode: str,
        *,
        seconds: float,
        seed: str,
        rate: float = 100.0,
        members: int = 5,
        kills: bool = True,
        faults: Cluster | None = None,
        fault_every: float = 40.0,
        drain_timeout: float = 120.0,
        log_dir: Path | None = None,
        keep_logs: bool = False,
        progress_every: float | None = 60.0,
        verbose: bool = False,
        broker_logs: Sequence[Path] = (),
        broker_dlq: bool = False,
    ) -> None:
        self.kit = kit
        self.mode = mode
        self.seconds = seconds
        self.seed = seed
        self.rng = random.Random(f"{seed}-{mode}")
        self.rate = rate
        self.max_members = members
        self.kills = kills
        self.cluster = faults
        self.fault_every = fault_every
        self.drain_timeout = drain_timeout
        self.progress_every = progress_every
        self.verbose = verbose
        #: A directory the caller named is kept; a temporary one (out/soak, git-ignored) only when the run failed.
        self.keep_logs = keep_logs or log_dir is not None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir = log_dir
        else:
            out = ROOT / "out" / "soak"
            out.mkdir(parents=True, exist_ok=True)
            self.log_dir = Path(tempfile.mkdtemp(prefix=f"share-{mode}-", dir=out))
        self.figures = Figures(mode, log_dir=str(self.log_dir))
        from ..support import replicated_topic

        self.topic = replicated_topic(kit, kit.name("share-soak-t"), PARTITIONS)
        self.group = kit.name("share-soak")
        #: Kafka 4.4: the dead-letter topic is also the group's DLQ in the broker, which copies what it archives.
        self.broker_dlq = broker_dlq
        self.dlt = self._dead_letter_topic(kit)
        from ..support import set_group_config

        set_group_config(
            kit, self.group, share_record_lock_duration_ms=str(LOCK_MS), share_delivery_count_limit=str(DELIVERY_LIMIT)
        )
        if broker_dlq:
            set_group_config(
                kit,
                self.group,
                errors_deadletterqueue_topic_name=self.dlt,
                errors_deadletterqueue_copy_record_enable="true",
            )
        self.members: list[_Member] = []
        self.lock = threading.Lock()
        self.ledger = _Ledger()
        self.producer = _Producer(kit, self.topic, rate, self.lock)
        #: Broker faults: (SIGKILLed, back in the cluster), seconds into the run.
        self.fault_windows: list[tuple[float, float]] = []
        #: Broker log files to look up last deliveries in (for the lost records' detail).
        self.broker_logs = list(broker_logs)
        #: Every start, signal, death, fault and phase, seconds into the run (events.txt in the logs).
        self.events: list[tuple[float, str]] = []
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self._next_progress = self.t0 + (progress_every or 0.0)

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _dead_letter_topic(self, kit: KafkaTestKit) -> str:
        """One partition, on every broker of the cluster (a copy waits for no broker fault), named and
        configured as a broker DLQ when the run has one."""
        from ..support import replicated_topic

        name = f"dlq.{kit.name('dlt')}" if self.broker_dlq else kit.name("dlt")
        config = {"errors.deadletterqueue.group.enable": "true"} if self.broker_dlq else {}
        replicated_topic(kit, name, 1, config=config)
        return name

    def _say(self, text: str, *, always: bool = False) -> None:
        self.events.append((self._now(), text))
        if always or self.verbose:
            print(f"  [share {self.mode} {self._now():6.1f}s] {text}", flush=True)

    # -- members -------------------------------------------------------------------------------
    def _start(self, *, calm: bool = False) -> _Member:
        index = self.figures.starts
        self.figures.starts += 1
        log_path = self.log_dir / f"member-{index}.stderr"
        log = log_path.open("w")
        args = [self.kit.bootstrap_servers, self.group, self.topic, self.dlt, self.mode, self.seed]
        cmd = [sys.executable, "-m", "tests.soak.share", "--member", *args, *(["--calm"] if calm else [])]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
        m = _Member(index, proc, log_path, log, self._now())
        m.reader = threading.Thread(target=self._read, args=(m,), name=f"share-soak-read-{index}", daemon=True)
        self.members.append(m)  # before its first line is read: the ledger names members by index
        m.reader.start()
        self._say(f"start member {index} (pid {proc.pid}){' calm' if calm else ''}")
        return m

    def _read(self, m: _Member) -> None:
        """Take in one member's stdout until it ends (the process exited or was killed)."""
        assert m.proc.stdout is not None
        with (self.log_dir / f"member-{m.index}.out").open("w") as copy:  # its lines, with when they came
            for line in m.proc.stdout:
                copy.write(f"{self._now():.2f} {line}")
                self._line(m, line)
        m.exited_at = self._now()

    def _line(self, m: _Member, line: str) -> None:
        """One line of a member's stdout."""
        kind, _, rest = line.rstrip("\n").partition(" ")
        parts = rest.split()
        if kind == "P":
            if len(parts) == 3 and all(p.isdigit() for p in parts):  # a torn last line is ignored
                with self.lock:
                    self.ledger.processed(int(parts[0]), int(parts[1]), m.index, self._now(), int(parts[2]))
                m.records += 1
        elif kind == "OVERRUN":
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                partition, first, last = map(int, parts)
                with self.lock:
                    self.ledger.overrun.update((partition, o) for o in range(first, last + 1))
        elif kind == "READY":
            m.ready.set()
        elif kind == "FATAL":
            m.fatal = rest
            self._say(f"member {m.index} (pid {m.proc.pid}) FATAL: {rest}", always=True)
        elif kind == "CLOSED":
            m.closed.set()

    def _kill(self, m: _Member, *, chaos: bool = True) -> None:
        m.expect = "kill"
        m.signalled_at = self._now()
        m.proc.send_signal(signal.SIGKILL)  # any time: it needs no handler
        if chaos:
            self.figures.kills += 1
        self._say(f"SIGKILL member {m.index}")

    def _term(self, m: _Member, *, final: bool = False) -> None:
        assert m.ready.is_set(), "a member gets SIGTERM only once its handler is installed"
        m.expect = "final" if final else "term"
        m.signalled_at = self._now()
        m.proc.send_signal(signal.SIGTERM)
        if not final:
            self.figures.terms += 1
        self._say(f"SIGTERM member {m.index}{' (final)' if final else ''}")

    def _calm(self, m: _Member) -> None:
        assert m.ready.is_set(), "a member gets SIGUSR1 only once its handler is installed"
        m.proc.send_signal(signal.SIGUSR1)

    def _reap(self) -> None:
        """Collect the members that ended (checking each exit status); give up on hung ones."""
        for m in self.members:
            if m.reaped:
                continue
            rc = m.proc.poll()
            if rc is None:
                waited = time.monotonic() - m.started
                if m.expect in ("term", "final") and m.signalled_at is not None:
                    if self._now() - m.signalled_at > CLOSE_DEADLINE:
                        self._fail_member(m, f"did not exit within {CLOSE_DEADLINE:.0f}s of SIGTERM; SIGKILLed")
                        m.given_up = True
                        m.proc.kill()
                elif m.expect == "run" and not m.ready.is_set() and waited > READY_DEADLINE:
                    self._fail_member(m, f"printed no READY within {READY_DEADLINE:.0f}s of its start; SIGKILLed")
                    m.given_up = True
                    self._kill(m, chaos=False)
                continue
            self._finish(m, rc)

    def _fail_member(self, m: _Member, what: str) -> None:
        reason = f": {m.fatal}" if m.fatal else ""
        text = f"member {m.index} (pid {m.proc.pid}) {what}{reason}; stderr {m.log_path}:\n{m.stderr_tail()}"
        self.figures.member_failures.append(text)
        self._say(f"member {m.index} (pid {m.proc.pid}) {what}{reason}", always=True)

    def _finish(self, m: _Member, rc: int) -> None:
        m.reaped = True
        if m.reader is not None:
            # The member has exited: its reader ends at EOF. Unread lines would count its records as
            # never processed: say so instead.
            m.reader.join(60)
            if m.reader.is_alive():
                self.figures.failures.append(f"member {m.index}: its output was not read to the end within 60 s")
        if m.proc.stdout is not None:
            m.proc.stdout.close()
        if m.given_up:
            m.log.close()
            return
        expected = {
            "run": False,
            "kill": rc == -signal.SIGKILL,
            "term": rc == 0 and m.closed.is_set(),
            "final": rc == 0 and m.closed.is_set(),
        }[m.expect]
        if not expected:
            if m.expect == "run":
                self.figures.died += 1
                at = m.exited_at if m.exited_at is not None else self._now()
                what = f"exited on its own at {at:.1f}s with status {_exit_text(rc)}"
            else:
                sent = "SIGKILL" if m.expect == "kill" else "SIGTERM"
                what = f"exited with status {_exit_text(rc)} after our {sent} at {m.signalled_at:.1f}s"
                if m.expect != "kill" and rc == 0:
                    what += " without printing CLOSED"
            self._fail_member(m, f"{what} ({m.records} records processed, started at {m.started_at:.1f}s)")
        m.log.close()

    def _live(self) -> list[_Member]:
        return [m for m in self.members if m.live]

    # -- faults --------------------------------------------------------------------------------
    def _leaders(self) -> str:
        """Which broker leads each partition of the topic, and the group coordinator (for the fault lines)."""
        assert self.cluster is not None
        try:
            meta = self.kit.admin.list_topics(self.topic, timeout=5).topics[self.topic]
            leaders = {p: int(meta.partitions[p].leader) for p in sorted(meta.partitions)}
            return f"partition leaders {leaders}, coordinator {self.cluster.coordinator()}"
        except Exception as exc:  # noqa: BLE001 - informative only
            return f"leaders unknown ({exc!r})"

    def _faults(self, stop: threading.Event) -> None:
        """SIGKILL the second broker and start it again every ``fault_every`` seconds (the first at
        half that), on its own thread while the chaos runs."""
        assert self.cluster is not None
        n = 0
        while not stop.wait(self.fault_every / 2 if n == 0 else self.fault_every):
            n += 1
            before = self._leaders()
            killed = self._now()
            self._say(f"FAULT: SIGKILL broker 2 ({before})")
            try:
                self.cluster.restart_second()
            except Exception as exc:  # noqa: BLE001 - a fault that could not be carried out fails the run
                with self.lock:
                    self.fault_windows.append((killed, float("inf")))
                    self.figures.failures.append(f"broker fault at {killed:.1f}s failed: {exc!r}")
                return
            back = self._now()
            with self.lock:
                self.fault_windows.append((killed, back))
                text = f"{killed:.1f}s broker 2 SIGKILLed ({before}), back in the cluster after {back - killed:.1f}s"
                self.figures.faults.append(text)
            self._say(text)

    # -- figures -------------------------------------------------------------------------------
    def _explain(self, key: Key) -> str:
        """Why ``key`` was processed more than once: every processing after the first needs a reason."""
        processings = self.ledger.processings(key)
        reasons: set[str] = set()
        for i in range(1, len(processings)):
            again_at = processings[i][1]
            earlier = processings[:i]
            found = ""
            for who, _, _ in earlier:
                m = self.members[who]
                if m.signalled_at is not None and m.signalled_at <= again_at:
                    found = "a stop"
                    break
            if not found and key in self.ledger.overrun:
                found = "an overrun"
            if not found and any(
                killed <= again_at and any(killed - FAULT_WINDOW <= at <= back for _, at, _ in earlier)
                for killed, back in self.fault_windows
            ):
                found = "a broker fault"
            if not found:
                died = any(
                    self.members[who].expect == "run"
                    and self.members[who].exited_at is not None
                    and (self.members[who].exited_at or 0.0) <= again_at + 1.0
                    for who, _, _ in earlier
                )
                return "after a death" if died else "unexplained"
            reasons.add(found)
        for why in ("a stop", "an overrun", "a broker fault"):
            if why in reasons:
                return why
        return "unexplained"

    def _progress(self, phase: str) -> None:
        if not self.progress_every or time.monotonic() < self._next_progress:
            return
        self._next_progress = time.monotonic() + self.progress_every
        with self.lock:
            ends = dict(self.producer.ends)
            waiting = sum(len(v) for v in self.ledger.waiting(ends).values())
            processed, doubles, dead = self.ledger.times, len(self.ledger.again), len(self.ledger.dead)
            poison = len(self.producer.poison)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        f = self.figures
        self._say(
            f"{phase}: produced {self.producer.acked} ({poison} poison), processed {processed} times, "
            f"dead-lettered {dead}, waiting {waiting}, processed more than once {doubles}, overruns "
            f"{len(self.ledger.overrun)}; live members {len(self._live())}, {f.starts} starts, {f.kills} kills, "
            f"{f.terms} terms, {f.died} died on their own, member failures {len(f.member_failures)}, "
            f"broker faults {len(f.faults)}; controller max RSS {rss} MiB",
            always=True,
        )

    # -- phases --------------------------------------------------------------------------------
    def _chaos(self) -> None:
        self._start()
        self._start()
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self._reap()
            self._progress("chaos")
            time.sleep(self.rng.uniform(1.0, 3.0))
            self._reap()
            alive = self._live()
            ready = [m for m in alive if m.ready.is_set()]
            action = self.rng.random()
            if len(alive) < self.max_members and (action < 0.45 or len(alive) < 2):
                self._start()
            elif len(alive) > 1 and action < 0.75 and self.kills:
                self._kill(self.rng.choice(alive))
            elif len(alive) > 1 and ready:
                self._term(self.rng.choice(ready))

    def _drain(self, ends: dict[int, int]) -> None:
        """Calm every member, add two calm ones, wait until every record is processed or
        dead-lettered; stop early when no member is left, or when the broker will never hand out
        again what waits (its start offset is past it on two looks)."""
        self._reap()
        for m in self._live():
            while m.live and not m.ready.is_set() and time.monotonic() - m.started < READY_DEADLINE:
                time.sleep(0.1)
            self._reap()
            if m.live and m.ready.is_set():
                self._calm(m)
        self._start(calm=True)
        self._start(calm=True)
        self._say(f"drain: {len(self._live())} members, all calm", always=bool(self.progress_every))
        started = time.monotonic()
        next_look, gone_looks = started + 10.0, 0
        while True:
            self._reap()
            with self.lock:
                waiting = self.ledger.waiting(ends)
            if not waiting:
                break
            count = sum(len(v) for v in waiting.values())
            if not self._live():
                self.figures.waiting = count
                self.figures.failures.append(
                    f"group left with no member while {count} records waited (neither processed nor "
                    f"dead-lettered, per partition: {self._waiting_text(waiting)}; {self._broker_text()})"
                )
                break
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + 5.0
                starts = self._broker_view()
                gone = isinstance(starts, dict) and all(
                    starts.get(p, (-1, None))[0] > offsets[-1] for p, offsets in waiting.items()
                )
                gone_looks = gone_looks + 1 if gone else 0
                if gone_looks >= 2:
                    self.figures.failures.append(
                        f"{count} records neither processed nor dead-lettered, and the broker will not hand them "
                        f"out again: its share-partition start offset is past them (acknowledged or archived) "
                        f"on two looks 5 s apart (per partition: {self._waiting_text(waiting)}; "
                        f"{self._broker_text()})"
                    )
                    break
            if time.monotonic() - started > self.drain_timeout:
                self.figures.failures.append(
                    f"not drained within {self.drain_timeout:.0f}s with {len(self._live())} live members: {count} "
                    f"records neither processed nor dead-lettered (per partition: {self._waiting_text(waiting)}; "
                    f"{self._broker_text()})"
                )
                break
            self._progress("drain")
            time.sleep(1.0)
        self.figures.drain_seconds = time.monotonic() - started

    @staticmethod
    def _waiting_text(waiting: dict[int, list[int]]) -> str:
        return ", ".join(
            f"[{p}] {len(o)} from offset {o[0]}" + (f" to {o[-1]}" if len(o) > 1 else "")
            for p, o in sorted(waiting.items())
        )

    def _broker_view(self) -> dict[int, tuple[int, int | None]] | str:
        """Per partition of the topic, the share group's start offset and lag as its coordinator
        tells them (DescribeShareGroupOffsets), or why they are unknown."""
        from safeconsumer.health._share_look import describe_share_group

        try:
            described = describe_share_group(self.kit.client_config, self.kit.bootstrap_servers, self.group, 15.0)
        except Exception as exc:  # noqa: BLE001 - informative only
            return f"unknown ({_reason(exc)})"
        if described is None:
            return "unknown (no such share group)"
        return {p.partition: (p.start_offset, p.lag) for p in described.partitions if p.topic == self.topic}

    def _broker_text(self) -> str:
        view = self._broker_view()
        if isinstance(view, str):
            return f"the broker's start offset and lag per partition: {view}"
        shown = ", ".join(f"[{p}] start {start} lag {lag}" for p, (start, lag) in sorted(view.items()))
        return f"the broker's start offset and lag per partition: {shown or 'none'}"

    def _last_deliveries(self, keys: set[Key]) -> dict[Key, list[float]]:
        """When the broker handed each of ``keys`` out on its last delivery (its WARNING "The offset
        N is on last delivery attempt"), seconds into the run, from the broker logs this process has."""
        found: dict[Key, list[float]] = {}
        pattern = re.compile(
            r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] WARN The offset (\d+) is on last delivery attempt "
            r"in share partition: \S+:" + re.escape(self.topic) + r"-(\d+),"
        )
        for path in self.broker_logs:
            with contextlib.suppress(OSError), path.open(errors="replace") as lines:
                for line in lines:
                    if "last delivery attempt" not in line or self.topic not in line:
                        continue
                    match = pattern.match(line)
                    if match is None:
                        continue
                    key = (int(match[4]), int(match[3]))
                    if key in keys:
                        wall = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S")) + int(match[2]) / 1000
                        found.setdefault(key, []).append(wall - self.t0_wall)
        return found

    def _double_text(self, keys: list[Key]) -> list[str]:
        """For the first unexplained doubles: each processing (member, when, delivery count), how each
        of those members ended, and what the controller did around the processings after the first."""
        out = []
        for key in keys[:10]:
            processings = self.ledger.processings(key)
            shown = ", ".join(f"member {who} at {at:.1f}s (delivery {count})" for who, at, count in processings)
            ends = []
            for who in dict.fromkeys(who for who, _, _ in processings):
                m = self.members[who]
                end = (
                    f"{m.expect} at {m.signalled_at:.1f}s"
                    if m.signalled_at is not None
                    else f"exited on its own at {m.exited_at:.1f}s"
                    if m.exited_at is not None
                    else "running"
                )
                ends.append(f"member {who} (pid {m.proc.pid}, started {m.started_at:.1f}s): {end}")
            near = [
                f"{t:.1f}s {text}"
                for t, text in self.events
                if any(at - 2 * LOCK_MS / 1000 - 2.0 <= t <= at for _, at, _ in processings[1:])
            ]
            out.append(f"{key}: {shown}; {'; '.join(ends)}; before it came again: {'; '.join(near) or 'nothing'}")
        return out

    def _near_kill(self, lost: list[Key]) -> int:
        """How many of ``lost`` the broker handed out on their last delivery at most a lock's time (and
        a second) before a member was SIGKILLed."""
        if not lost or not self.broker_logs:
            return 0
        deliveries = self._last_deliveries(set(lost))
        kills = [t for t, text in self.events if text.startswith("SIGKILL member")]
        return sum(
            1
            for key in lost
            if (times := deliveries.get(key))
            and any(max(times) - 0.5 <= t <= max(times) + LOCK_MS / 1000 + 1.0 for t in kills)
        )

    def _lost_text(self, lost: list[Key]) -> list[str]:
        """For the first lost records: when the broker logged their last delivery, and what the
        controller did around then (members signalled or dead, broker faults)."""
        shown = lost[:10]
        deliveries = self._last_deliveries(set(shown)) if self.broker_logs else {}
        out = []
        for key in shown:
            times = sorted(deliveries.get(key, []))
            if not times:
                out.append(f"{key}: no last delivery in the broker logs{'' if self.broker_logs else ' (none here)'}")
                continue
            at = times[-1]
            near = [f"{t:.1f}s {text}" for t, text in self.events if at - 2.0 <= t <= at + 2 * LOCK_MS / 1000 + 2.0]
            out.append(
                f"{key}: handed out on its last delivery at {at:.1f}s; around then: {'; '.join(near) or 'nothing'}"
            )
        return out

    def _stop_all(self) -> None:
        for m in self.members:
            if not m.running or m.expect in ("kill", "term", "final"):
                continue
            if m.ready.is_set():
                self._term(m, final=True)
            else:
                self._kill(m, chaos=False)  # not ready: SIGTERM would end it uncleanly; expected -9
        deadline = time.monotonic() + CLOSE_DEADLINE + 5
        while any(m.running for m in self.members) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.2)
        self._reap()
        for m in self.members:
            if m.reaped:
                continue
            if m.proc.poll() is None:
                self._fail_member(m, "still running after every member was told to stop; SIGKILLed")
                m.given_up = True
                m.proc.kill()
            m.proc.wait()
            self._finish(m, m.proc.returncode)

    def run(self) -> Figures:
        dead_letters = _DeadLetters(self.kit, self.dlt, self.ledger, self.lock)
        stop_faults = threading.Event()
        faults = threading.Thread(target=self._faults, args=(stop_faults,), name="share-soak-faults", daemon=True)
        ends: dict[int, int] | None = None
        self.t0, self.t0_wall = time.monotonic(), time.time()
        self._next_progress = self.t0 + (self.progress_every or 0.0)
        dead_letters.start()
        self.producer.start()
        try:
            if self.cluster is not None:
                faults.start()
            self._chaos()
            stop_faults.set()
            if faults.is_alive():
                faults.join(180)  # a fault under way is carried out to its end: the broker is back
            if self.cluster is not None and not self.figures.faults:
                self.figures.failures.append("no broker fault was carried out (chaos too short?)")
            self.kit.wait_for_partitions(self.topic, PARTITIONS, timeout=60)
            self.producer.stop.set()
            self.producer.join(90)
            self.figures.seconds = self._now()
            if self.producer.errors or self.producer.unsent:
                self.figures.failures.append(
                    f"producer: {self.producer.unsent} unsent, errors {self.producer.errors.most_common(3)}"
                )
            ends = self.kit.end_offsets(self.topic)
            if sum(ends.values()) != self.producer.acked:
                self.figures.failures.append(
                    f"end offsets add up to {sum(ends.values())}, the producer had {self.producer.acked} acks"
                )
            self._drain(ends)
        finally:
            stop_faults.set()
            self.producer.stop.set()
            self._stop_all()
            if faults.is_alive():
                faults.join(180)
        dlt_end = self.kit.end_offsets(self.dlt).get(0, 0)
        deadline = time.monotonic() + 30
        while dead_letters.position < dlt_end and time.monotonic() < deadline:
            time.sleep(0.2)
        if dead_letters.position < dlt_end:
            self.figures.failures.append(f"dead-letter topic read to {dead_letters.position} of {dlt_end} in 30 s")
        dead_letters.stop.set()
        dead_letters.join(30)
        self.figures.failures += dead_letters.bad[:5]
        self._figures(ends)
        self.figures.lost_detail = self._lost_text(self.figures.lost)
        self.figures.lost_near_kill = self._near_kill(self.figures.lost)
        self.figures.unexplained_detail = self._double_text(self.figures.unexplained)
        wall = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.t0_wall))
        (self.log_dir / "events.txt").write_text(
            f"t=0 at {wall}\n" + "".join(f"{t:8.2f}s {text}\n" for t, text in self.events)
        )
        if self.keep_logs or not self.figures.passed:
            self.figures.logs_kept = True
        else:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        return self.figures

    def _figures(self, ends: dict[int, int] | None) -> None:
        f, ledger = self.figures, self.ledger
        with self.lock:
            f.produced, f.poison = self.producer.acked, len(self.producer.poison)
            f.processed = ledger.times
            f.dead_lettered, f.dead_letter_copies = len(ledger.dead), ledger.dead_copies
            f.dead_letter_reasons = Counter(ledger.dead_reasons)
            f.overruns = len(ledger.overrun)
            missing = sorted((p, o) for p, offsets in ledger.waiting(ends or {}).items() for o in offsets)
            if f.waiting:  # the group was left with no member: those records wait, they are not lost
                waiting = set(missing)
                f.poison_missing = sorted(k for k in self.producer.poison if k not in ledger.dead and k not in waiting)
            else:
                f.lost = missing
                f.poison_missing = sorted(k for k in self.producer.poison if k not in ledger.dead)
            f.doubles = len(ledger.again)
            for key in sorted(ledger.again):
                why = self._explain(key)
                f.doubles_by[why] += 1
                if why in ("unexplained", "after a death"):
                    f.unexplained.append(key)


def run_share_soak(kit: KafkaTestKit, mode: str, **options: Any) -> Figures:
    """One soak of ``mode`` on ``kit``'s broker. ``kills=False``: members are only SIGTERMed (see the
    module: what a SIGKILL can lose). ``faults``: the two-broker cluster ``kit`` is on, whose second
    broker is SIGKILLed and started again every ``fault_every`` seconds. ``log_dir``: where the
    members' stderr files go (kept); by default a directory under ``out/soak`` kept only when the
    run fails. ``broker_logs``: the brokers' log files, to say when a lost record was last handed out. The options are
    :class:`ShareSoak`'s."""
    return ShareSoak(kit, mode, **options).run()


def _use_broker_dlq(choice: str, bootstrap: str) -> bool:
    """Whether the run names its dead-letter topic the group's DLQ in the broker: ``auto`` where the
    cluster writes DLQ copies (``share.version`` 2 or more: Kafka 4.4), as an operator would."""
    if choice != "auto":
        return choice == "on"
    from safeconsumer.group._dlq import DLQ_SHARE_VERSION, share_version

    level = share_version({"bootstrap.servers": bootstrap}, 15.0)
    if level is None:
        raise RuntimeError(f"the cluster at {bootstrap} did not tell its share.version: pass --broker-dlq on or off")
    return level >= DLQ_SHARE_VERSION


@contextlib.contextmanager
def _broker(with_faults: bool, version: str) -> Iterator[tuple[str, Cluster | None, list[Path]]]:
    """The bootstrap servers to soak on, the cluster when broker faults are on, and the brokers' logs."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external, None, []
        return
    if with_faults:
        from ..cluster import FAULT_SETTINGS, running_cluster

        with running_cluster(FAULT_SETTINGS, version=version) as cluster:
            assert cluster.second is not None
            yield cluster.bootstrap_servers, cluster, [cluster.first.log_path, cluster.second.log_path]
        return
    from safeconsumer.testing import start_broker

    with start_broker(version=version) as broker:
        yield broker.bootstrap_servers, None, [broker.log_path] if broker.log_path else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--member", nargs=6, metavar=("BOOTSTRAP", "GROUP", "TOPIC", "DLT", "MODE", "SEED"))
    parser.add_argument("--calm", action="store_true", help="(member) start calm: no pauses, no slow work")
    parser.add_argument("--seconds", type=float, default=120.0, help="chaos time per mode (default 120)")
    parser.add_argument("--mode", nargs="+", default=["implicit", "explicit"], choices=["implicit", "explicit"])
    parser.add_argument("--seed", default="share")
    parser.add_argument("--rate", type=float, default=100.0, help="records produced per second (default 100)")
    parser.add_argument("--members", type=int, default=5, help="most member processes alive at once (default 5)")
    parser.add_argument("--no-kills", action="store_true", help="SIGTERM members only")
    parser.add_argument(
        "--no-faults", action="store_true", help="one broker, no broker faults (default: two brokers, faults)"
    )
    parser.add_argument("--fault-every", type=float, default=40.0, help="seconds between broker faults (default 40)")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds the group may take to drain after the chaos (default: 120, or a third of --seconds when "
        "longer: the backlog a long run builds grows with it)",
    )
    parser.add_argument("--logs", type=Path, help="keep the members' stderr files in DIR/<mode> (default: out/soak)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the members' logs when the run passes too")
    parser.add_argument("--progress-every", type=float, default=60.0, help="seconds between progress lines (0: none)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every start, kill, term and fault")
    parser.add_argument("--kafka-version", default=None, help="the brokers' Apache Kafka release (default the newest)")
    parser.add_argument(
        "--broker-dlq",
        choices=("auto", "on", "off"),
        default="auto",
        help="the dead-letter topic is also the group's DLQ in the broker, which copies what it archives (Kafka "
        "4.4): auto (the default) where the cluster has one (share.version 2 or more), on, or off (the consumers' "
        "own last-delivery copies only)",
    )
    args = parser.parse_args(argv)
    if args.member:
        return member(args.member, calm_at_start=args.calm)
    from safeconsumer.testing import KAFKA_VERSION, KafkaTestKit

    version = args.kafka_version or KAFKA_VERSION
    with_faults = not args.no_faults and not os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    results: list[Figures] = []
    with _broker(with_faults, version) as (bootstrap, cluster, broker_logs):
        broker_dlq = _use_broker_dlq(args.broker_dlq, bootstrap)
        copies = "the broker's DLQ and the consumers' copies" if broker_dlq else "the consumers' own copies only"
        print(
            f"share soak: {args.seconds:.0f}s of chaos per mode, seed {args.seed!r}, "
            f"{'SIGKILLs and SIGTERMs' if not args.no_kills else 'SIGTERMs only'}, "
            f"{f'broker 2 SIGKILLed every {args.fault_every:.0f}s' if with_faults else 'no broker faults'}, "
            f"Kafka {version}, "
            f"{copies}",
            flush=True,
        )
        for mode in args.mode:
            kit = KafkaTestKit(bootstrap, prefix=f"share-soak-{mode}")
            try:
                figures = run_share_soak(
                    kit,
                    mode,
                    seconds=args.seconds,
                    seed=args.seed,
                    rate=args.rate,
                    members=args.members,
                    kills=not args.no_kills,
                    faults=cluster,
                    fault_every=args.fault_every,
                    drain_timeout=args.drain_timeout or max(120.0, args.seconds / 3),
                    log_dir=args.logs / mode if args.logs else None,
                    keep_logs=args.keep_logs,
                    progress_every=args.progress_every or None,
                    verbose=args.verbose,
                    broker_logs=broker_logs,
                    broker_dlq=broker_dlq,
                )
            finally:
                kit.close()
            print(figures.report(), flush=True)
            results.append(figures)
    failed = [f.mode for f in results if not f.passed]
    print(f"share soak: {'FAILED in ' + ', '.join(failed) if failed else 'every mode held'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
