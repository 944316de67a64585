"""The soak controller: member processes in one group under random starts, SIGKILLs and SIGTERMs.

    python -m tests.soak.run [--seconds 180] [--protocol range ...] [--seed soak] [--rate 300]

Per protocol (classic range, classic cooperative-sticky, KIP-848 ``consumer``, and ``mixed``: a
group between protocols, whose members alternate between classic cooperative-sticky and
``consumer`` as they are started, so that the broker converts it back and forth), on fresh topics
and a fresh group: a producer thread writes numbered records to two topics (4 and 3 partitions)
at ``--rate`` records/s, while the controller keeps between 1 and ``--members`` member processes
(:mod:`tests.soak.member`) alive, starting, SIGKILLing and SIGTERMing them at random (seeded).
Each member pauses, resumes and keeps alive at random and reports every record it was handed and
every violation it saw (I1, I2, I4) on its stdout.

With broker faults (the default of ``make soak`` and the in-suite run; the soak then runs on a
two-broker cluster, :mod:`tests.cluster`), a fault thread meanwhile alternates two faults, one
every ``--fault-every`` seconds: the second broker SIGKILLed and started again two seconds later
(its partitions, and the coordinator when it leads the offsets partition, vanish at once), and
the group coordinator moved to the other broker.

Then production stops, every surviving member is told to lift all its pauses and stop its random
actions (SIGUSR1), fresh members join if fewer than two are left, and the group must drain
within ``--drain-timeout``. Finally every member gets SIGTERM (it closes) and must exit 0.

A protocol passes when: every produced record was handed to some member at least once (lost 0),
the group's committed offsets equal the end offsets of every partition (while draining and
after the final close), no member reported a violation, no member crashed or hung, every fault
was carried out, and the stall guard healed nothing.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set (no faults then), else the two-broker cluster
(or, with ``--no-faults``, one :func:`start_broker`) is started.
Exit status: 0 when every protocol passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from confluent_kafka import KafkaError, Message, Producer

from safeconsumer.testing import PROTOCOLS, KafkaTestKit, Protocol, WaitTimeout, start_broker, wait_until

from ..cluster import CLIENT_LOG, FAULT_SETTINGS, Cluster
from ..support import replicated_topic

ROOT = Path(__file__).resolve().parents[2]
#: Partitions of the two soak topics.
PARTITIONS = (4, 3)
#: A SIGTERMed member must have closed and exited within this many seconds.
CLOSE_DEADLINE = 30.0

Key = tuple[int, int, int]  # (topic index, partition, offset)

#: What a soak runs: one protocol for every member, or ``mixed`` (members alternate between classic
#: cooperative-sticky and KIP-848, the first one classic: a group moving between protocols).
Mode = Literal["range", "cooperative-sticky", "consumer", "mixed"]
MODES: tuple[Mode, ...] = (*PROTOCOLS, "mixed")
#: A mixed soak's member protocols, by start index.
MIXED: tuple[Protocol, ...] = ("cooperative-sticky", "consumer")


@dataclass
class Figures:
    """What one protocol's soak did and found."""

    protocol: str
    seconds: float = 0.0
    produced: int = 0
    delivered: int = 0
    duplicates: int = 0
    #: Duplicates delivered again after the member that first had them was SIGKILLed (at-least-once's
    #: price), and the rest: read again while whoever first had them was alive or had closed (a
    #: handoff at a rebalance or a clean close that did not carry the offset over).
    after_kill: int = 0
    #: Of ``after_kill``: records the killed member was still working on (handed out, and it had
    #: not come back for more). I8 has them delivered again by design; raw had stored them at
    #: hand-out, so its app's unfinished work is skipped instead.
    unfinished_at_kill: int = 0
    #: ``after_kill`` per killed member, largest first: one kill right after a backlog was read
    #: (a broker fault held the group up) can account for most of a run's duplicates. Each with
    #: the member and how long it had been reading when it was killed: (count, member, seconds
    #: from its first record to the kill; None when it read nothing).
    per_kill: list[tuple[int, int, float | None]] = field(default_factory=list)
    #: Of the rest: delivered again while the member that first had it still held it (it had not
    #: come back for more): its partition moved while the application worked on it (long work in
    #: a keepalive served the revocation, or the member closed holding it). I8 stores such a
    #: record only once the application comes back, so its next owner reads it again.
    held_by_first: int = 0
    kills: int = 0
    terms: int = 0
    starts: int = 0
    violations: list[str] = field(default_factory=list)
    lost: int = 0
    #: Partitions the stall guard started again (members' WARNING lines): a healthy run has none.
    stalls: int = 0
    drain_seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    #: Broker faults carried out, one line each ("12.3s broker 2 SIGKILLed, back after 7.9s").
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and not self.violations and self.lost == 0 and self.stalls == 0

    def line(self) -> str:
        errors = ", ".join(f"{k} x{v}" for k, v in sorted(self.errors.items())) or "none"
        return (
            f"{self.protocol:18} produced {self.produced:>7}  delivered {self.delivered:>7}  "
            f"duplicates {self.duplicates:>6} ({self.after_kill} after kills, of them {self.unfinished_at_kill} "
            f"unfinished at the kill; {self.duplicates - self.after_kill} not, of them {self.held_by_first} "
            f"still held by their first reader) "
            f"kills {self.kills:>3}  terms {self.terms:>3}  starts {self.starts:>3}  "
            f"violations {len(self.violations):>3}  lost {self.lost:>5}  stalls {self.stalls}  "
            f"faults {len(self.faults)}  "
            f"(chaos {self.seconds:.0f}s, drain {self.drain_seconds:.1f}s, error events: {errors})  "
            f"{'ok' if self.ok else 'FAIL'}"
        )

    def report(self) -> str:
        out = [self.line()]
        if self.violations:
            # "member 3 (pid 123): I2 topic[1]@42 via consume: ..." -> "member 3 I2 via consume"
            kinds = Counter(
                f"{v.split(' (')[0]} {v.split(': ', 1)[1].split()[0]} via {v.split(' via ')[1].split(':')[0]}"
                if " via " in v
                else f"{v.split(' (')[0]} {v.split(': ', 1)[1].split()[0]}"
                for v in self.violations
            )
            out.append("  violations by member and kind: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
        out += [f"  violation: {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            out.append(f"  ... and {len(self.violations) - 20} more violations")
        if self.per_kill:
            shown = ", ".join(
                f"{n:,} (member {index}{'' if took is None else f', killed {took:.1f}s after its first record'})"
                for n, index, took in self.per_kill[:5]
            )
            out.append(f"  read again after a kill, by killed member, largest first: {shown}")
        out += [f"  fault: {f}" for f in self.faults]
        out += [f"  failure: {f}" for f in self.failures]
        return "\n".join(out)


class _Member:
    """One member process and what the controller knows of it."""

    def __init__(self, index: int, proc: subprocess.Popen[str], log_path: Path, log: IO[str]) -> None:
        self.index = index
        self.proc = proc
        self.log_path = log_path
        self.log = log
        self.ready = threading.Event()  # it printed "S": its signal handlers are installed
        self.drained = threading.Event()  # it printed "D"
        self.closed = threading.Event()  # it printed "C"
        self.expect: Literal["run", "kill", "term"] = "run"
        self.term_sent = 0.0
        self.reaped = False
        #: Records handed out since the member last came back for more ("B"): unfinished.
        self.holding: list[tuple[int, int, int]] = []
        self.reader: threading.Thread | None = None
        self.records = 0  # R lines it printed
        self.started = time.monotonic()
        #: When its first record arrived, and when it was SIGKILLed (monotonic; None: not yet).
        self.first_record_at: float | None = None
        self.killed_at: float | None = None

    @property
    def running(self) -> bool:
        return not self.reaped and self.proc.poll() is None

    def stderr_tail(self, lines: int = 15) -> str:
        if not self.log.closed:  # closed once the member was reaped
            self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(f"      {line}" for line in text)


def _out_dir() -> Path:
    """``out/soak`` in the repository (git-ignored): where failing runs' member logs stay."""
    out = ROOT / "out" / "soak"
    out.mkdir(parents=True, exist_ok=True)
    return out


class _Producer(threading.Thread):
    """Writes numbered records round-robin over every partition of the soak topics at ``rate``/s."""

    def __init__(self, bootstrap: str, topics: Sequence[str], rate: int) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.targets = [(t, p) for t, n in zip(topics, PARTITIONS, strict=True) for p in range(n)]
        self.rate = rate
        self.stop = threading.Event()
        self.acked = 0
        self.errors: list[str] = []
        self.unsent = 0
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "logger": CLIENT_LOG,  # librdkafka's lines through logging, never to stderr
        }
        self._producer = Producer(conf)

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors.append(err.name())
        else:
            self.acked += 1

    def run(self) -> None:
        seq = 0
        tick = 0.05
        started = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while seq < due:
                topic, partition = self.targets[seq % len(self.targets)]
                try:
                    self._producer.produce(topic, str(seq).encode(), partition=partition, on_delivery=self._on_delivery)
                except BufferError:
                    break  # the local queue is full: the next tick catches up
                seq += 1
            self._producer.poll(0)
            self.stop.wait(tick)  # pacing: produce what is due every tick
        self.unsent = self._producer.flush(30)


class Soak:
    """One protocol's soak against one broker (see the module docstring)."""

    def __init__(
        self,
        kit: KafkaTestKit,
        protocol: Mode,
        *,
        seconds: float,
        seed: str,
        rate: int = 300,
        max_members: int = 4,
        drain_timeout: float = 60.0,
        commit_interval_ms: int = 1000,
        log_dir: Path | None = None,
        verbose: bool = False,
        raw: bool = False,
        faults: Cluster | None = None,
        fault_every: float = 20.0,
        keep_logs: bool = False,
    ) -> None:
        self.kit = kit
        #: Keep the member logs, with ``events.txt``: starts, kills, terms, faults, and each delivery
        #: again (when, the record, who had it first, who now).
        self.keep_logs = keep_logs
        self._events: list[str] = []
        #: The two-broker cluster ``kit`` is on, to inflict broker faults on (None: no faults).
        self.cluster = faults
        self.fault_every = fault_every
        #: The baseline: raw confluent_kafka.Consumer members, same churn, no pauses (member --raw).
        self.raw = raw
        self.protocol = protocol
        self.seconds = seconds
        self.seed = f"{seed}-{protocol}"
        self.rng = random.Random(self.seed)
        self.rate = rate
        self.max_members = max_members
        self.drain_timeout = drain_timeout
        self.commit_interval_ms = commit_interval_ms
        self.verbose = verbose
        # Kept only when the run fails: in the repository's ignored output directory (out/).
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"{self.seed}-", dir=_out_dir()))
        self.topics = [replicated_topic(kit, kit.name(f"soak-{protocol}-t{i}"), n) for i, n in enumerate(PARTITIONS)]
        self.group = kit.name(f"soak-{protocol}-g")
        self.members: list[_Member] = []
        self.figures = Figures(f"raw {protocol}" if raw else protocol)
        self._lock = threading.Lock()
        self._delivered: Counter[Key] = Counter()
        #: Which member first had each record (to explain duplicates).
        self._first: dict[Key, int] = {}
        #: Per record, deliveries after the member that first had it was SIGKILLed.
        self._after_kill: Counter[Key] = Counter()
        #: Records killed members were still working on when they died.
        self._unfinished: set[Key] = set()
        self._t0 = time.monotonic()

    # -- members ---------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        line = f"[{self.protocol} {time.monotonic() - self._t0:6.1f}s] {text}"
        if self.keep_logs:
            self._events.append(line)
        if self.verbose:
            print(f"  {line}", flush=True)

    def _start(self, *, drain: bool = False) -> _Member:
        index = self.figures.starts
        self.figures.starts += 1
        log_path = self.log_dir / f"member-{index}.stderr"
        log = log_path.open("w")
        cmd = [
            sys.executable,
            "-m",
            "tests.soak.member",
            self.kit.bootstrap_servers,
            self.group,
            self._protocol_of(index),
            f"{self.seed}-{index}",
            *self.topics,
            f"--commit-interval-ms={self.commit_interval_ms}",
        ]
        if self.protocol == "mixed":
            # A consumer-protocol member waits, without joining, while the broker would refuse to
            # convert the classic cooperative-sticky group (docs/migrating-to-kip-848.md).
            cmd.append("--migration-timeout=none")
        else:
            # One protocol: the group is never classic with members for a consumer-protocol member,
            # so the join gate would only add its admin lookup.
            cmd.append("--migration-timeout=0")
        if drain:
            cmd.append("--drain")
        if self.raw:
            cmd.append("--raw")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
        member = _Member(index, proc, log_path, log)
        member.reader = threading.Thread(target=self._read, args=(member,), name=f"soak-read-{index}", daemon=True)
        self.members.append(member)  # before its first line is read: records name their first reader by index
        member.reader.start()
        self._say(
            f"start member {index} (pid {proc.pid}, {self._protocol_of(index)}){' in drain mode' if drain else ''}"
        )
        return member

    def _protocol_of(self, index: int) -> Protocol:
        """The protocol of the member started ``index``-th."""
        return MIXED[index % len(MIXED)] if self.protocol == "mixed" else self.protocol

    def _read(self, member: _Member) -> None:
        """Take in one member's stdout until it ends (the process exited or was killed)."""
        assert member.proc.stdout is not None
        for line in member.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "R":
                parts = rest.split()
                if len(parts) == 3 and all(p.isdigit() for p in parts):  # a torn last line is ignored
                    key = (int(parts[0]), int(parts[1]), int(parts[2]))
                    with self._lock:
                        self._delivered[key] += 1
                        first = self._first.setdefault(key, member.index)
                        killed = self.members[first].killed_at is not None
                        if killed and first != member.index:
                            self._after_kill[key] += 1
                        elif self._delivered[key] > 1 and key in self.members[first].holding:
                            self.figures.held_by_first += 1
                        if self.keep_logs and self._delivered[key] > 1:
                            self._events.append(
                                f"{time.monotonic() - self._t0:7.2f}s again {key} first member {first} "
                                f"({'killed' if killed else 'not killed'}) now member {member.index}"
                            )
                    member.records += 1
                    if member.first_record_at is None:
                        member.first_record_at = time.monotonic()
                    member.holding.append(key)
            elif kind == "B":
                member.holding.clear()
            elif kind == "V":
                with self._lock:
                    self.figures.violations.append(f"member {member.index} (pid {member.proc.pid}): {rest}")
                self._say(f"VIOLATION member {member.index}: {rest}")
            elif kind == "W":
                with self._lock:
                    self.figures.errors[rest] += 1
            elif kind == "S":
                member.ready.set()
            elif kind == "D":
                member.drained.set()
            elif kind == "C":
                member.closed.set()

    def _reading_for(self, index: int) -> float | None:
        """Seconds from member ``index``'s first record to its SIGKILL (None: it read nothing)."""
        member = self.members[index]
        if member.first_record_at is None or member.killed_at is None:
            return None
        return max(0.0, member.killed_at - member.first_record_at)

    def _kill(self, member: _Member) -> None:
        member.expect = "kill"
        member.proc.send_signal(signal.SIGKILL)
        member.killed_at = time.monotonic()
        self.figures.kills += 1
        self._say(f"SIGKILL member {member.index}")

    def _term(self, member: _Member) -> None:
        member.expect = "term"
        member.term_sent = time.monotonic()
        member.proc.send_signal(signal.SIGTERM)
        self.figures.terms += 1
        self._say(f"SIGTERM member {member.index}")

    def _reap(self) -> None:
        """Collect members that ended; record a crash, a wrong exit status or a hung close()."""
        for m in self.members:
            if m.reaped:
                continue
            rc = m.proc.poll()
            if rc is None:
                if m.expect == "term" and time.monotonic() - m.term_sent > CLOSE_DEADLINE:
                    self.figures.failures.append(
                        f"member {m.index} did not close within {CLOSE_DEADLINE:.0f}s of SIGTERM; killed\n"
                        + m.stderr_tail()
                    )
                    m.expect = "kill"
                    m.proc.kill()
                continue
            self._finish(m, rc)

    def _finish(self, m: _Member, rc: int) -> None:
        m.reaped = True
        if m.reader is not None:
            # The member has exited: its reader ends at EOF. One still reading after a minute would
            # drop the lines it has not read, and their records would count as lost: say so instead.
            m.reader.join(60)
            if m.reader.is_alive():
                self.figures.failures.append(f"member {m.index}: its output was not read to the end within 60 s")
        assert m.proc.stdout is not None
        m.proc.stdout.close()
        m.log.close()
        if m.expect == "kill":
            with self._lock:
                self._unfinished.update(m.holding)
        self.figures.stalls += sum(" stalled: " in line for line in m.log_path.read_text(errors="replace").splitlines())
        expected = {"kill": rc == -signal.SIGKILL, "term": rc == 0 and m.closed.is_set(), "run": False}[m.expect]
        if not expected:
            what = f"exited with status {rc} (expected: {m.expect})"
            self.figures.failures.append(f"member {m.index} {what}; stderr {m.log_path}:\n{m.stderr_tail()}")
            self._say(f"member {m.index} {what}")
        elif m.expect == "term":
            self._say(
                f"member {m.index} closed and exited {time.monotonic() - m.term_sent:.1f}s after SIGTERM "
                f"({m.records} records)"
            )
        else:
            self._say(f"member {m.index} killed ({m.records} records)")

    def _running(self) -> list[_Member]:
        return [m for m in self.members if m.running]

    # -- phases ----------------------------------------------------------------------------
    def _chaos(self, producer: _Producer) -> None:
        for _ in range(min(3, self.max_members)):
            self._start()
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            self._reap()
            # Members already told to go are leaving: they are neither counted nor chosen again.
            running = [m for m in self._running() if m.expect == "run"]
            ready = [m for m in running if m.ready.is_set()]
            choices: list[str] = []
            weights: list[float] = []
            if len(running) < self.max_members:
                choices.append("start")
                weights.append(4 if len(running) <= 1 else 2)
            if len(running) > 1:
                choices.append("kill")
                weights.append(1.2)
            if len(ready) > 1:
                choices.append("term")
                weights.append(1.0)
            if choices:
                action = self.rng.choices(choices, weights)[0]
                if action == "start":
                    self._start()
                elif action == "kill":
                    # Mostly a member that has had time to join and consume: killing one that is
                    # still starting up shows little. Sometimes one that is starting, all the same.
                    settled = [m for m in ready if time.monotonic() - m.started > 4.0]
                    self._kill(self.rng.choice(settled if settled and self.rng.random() < 0.8 else running))
                else:
                    self._term(self.rng.choice(ready))
            # The chaos schedule itself: the next start/kill/term comes 0.8-3 s later.
            producer.stop.wait(self.rng.uniform(0.8, 3.0))

    def _faults(self, stop: threading.Event) -> None:
        """Alternate a broker SIGKILL-and-restart and a coordinator move, one every ``fault_every``
        seconds from a third of that in, while the chaos runs (on its own thread)."""
        assert self.cluster is not None
        kinds = ["restart", "move"] if self.rng.random() < 0.5 else ["move", "restart"]
        n = 0
        while not stop.wait(self.fault_every / 3 if n == 0 else self.fault_every):
            kind = kinds[n % 2]
            n += 1
            at = time.monotonic() - self._t0
            began = time.monotonic()
            try:
                if kind == "restart":
                    self._say("FAULT: SIGKILL broker 2")
                    self.cluster.restart_second()
                    text = f"{at:.1f}s broker 2 SIGKILLed, back in the cluster after {time.monotonic() - began:.1f}s"
                else:
                    self._say("FAULT: move the coordinator")
                    target = self.cluster.move_coordinator()
                    text = f"{at:.1f}s coordinator moved to broker {target} in {time.monotonic() - began:.1f}s"
            except Exception as exc:  # noqa: BLE001 - a fault that could not be carried out fails the run
                with self._lock:
                    self.figures.failures.append(f"fault {kind} at {at:.1f}s failed: {exc!r}")
                return
            with self._lock:
                self.figures.faults.append(text)
            self._say(text)

    def _missing(self, ends: dict[int, dict[int, int]]) -> list[Key]:
        with self._lock:
            delivered = set(self._delivered)
        return [
            (t, p, o)
            for t, per_partition in ends.items()
            for p, end in per_partition.items()
            for o in range(end)
            if (t, p, o) not in delivered
        ]

    def _commit_gaps(self, ends: dict[int, dict[int, int]]) -> list[str]:
        gaps = []
        for t, topic in enumerate(self.topics):
            committed = self.kit.committed(self.group, topic, PARTITIONS[t])
            gaps += [
                f"{topic}[{p}] committed {committed.get(p)} end {end}"
                for p, end in ends[t].items()
                if committed.get(p) != end
            ]
        return gaps

    def _drain(self, ends: dict[int, dict[int, int]]) -> None:
        self._reap()
        # Members told to go during the chaos are still closing: they take no part in the drain.
        running = [m for m in self._running() if m.expect == "run"]
        for m in running:
            if not m.ready.wait(30):
                self.figures.failures.append(f"member {m.index} never became ready")
        running = [m for m in running if m.ready.is_set()]
        for _ in range(max(0, 2 - len(running))):
            self._start(drain=True)
        for m in running:
            m.proc.send_signal(signal.SIGUSR1)
        self._say(f"drain: {len(self._running())} members, every pause lifted")
        started = time.monotonic()

        def drained() -> bool:
            return not self._missing(ends) and not self._commit_gaps(ends)

        try:
            wait_until(drained, timeout=self.drain_timeout, what="the group to drain", interval=0.5, step=self._reap)
        except WaitTimeout:
            missing = self._missing(ends)
            by_partition = Counter((self.topics[t], p) for t, p, _ in missing)
            self.figures.failures.append(
                f"not drained within {self.drain_timeout:.0f}s with every pause lifted: "
                f"{len(missing)} records never delivered {dict(by_partition)}; "
                f"commit gaps {self._commit_gaps(ends)}"
            )
        self.figures.drain_seconds = time.monotonic() - started
        # A member may be mid-step (simulated work, a keepalive block) when the group has
        # already drained: it acknowledges when it next looks, within a deadline.
        waiting = [m for m in self.members if m.running and m.expect == "run"]
        for m in waiting:
            if not m.drained.wait(max(0.0, started + self.drain_timeout + 30 - time.monotonic())):
                self.figures.failures.append(f"member {m.index} never acknowledged drain mode")

    def _stop_all(self) -> None:
        for m in self._running():
            if m.ready.is_set():
                self._term(m)
            else:
                self._kill(m)
        with contextlib.suppress(WaitTimeout):  # _reap records which one hung
            wait_until(lambda: not self._running(), timeout=CLOSE_DEADLINE + 5, what="members to exit", step=self._reap)
        for m in self.members:
            if m.proc.poll() is None:
                m.proc.kill()
            m.proc.wait()
            if not m.reaped:
                self._finish(m, m.proc.returncode)

    def run(self) -> Figures:
        producer = _Producer(self.kit.bootstrap_servers, self.topics, self.rate)
        producer.start()
        started = time.monotonic()
        stop_faults = threading.Event()
        faults = threading.Thread(target=self._faults, args=(stop_faults,), name="soak-faults", daemon=True)
        try:
            if self.cluster is not None:
                faults.start()
            self._chaos(producer)
            stop_faults.set()
            if faults.is_alive():
                faults.join(180)  # a fault under way is carried out to its end: the broker is back
            if self.cluster is not None and not self.figures.faults:
                self.figures.failures.append("no broker fault was carried out (chaos too short?)")
            for topic, n in zip(self.topics, PARTITIONS, strict=True):
                self.kit.wait_for_partitions(topic, n, timeout=60)  # every partition led again after the faults
            producer.stop.set()
            producer.join(60)
            self.figures.seconds = time.monotonic() - started
            if producer.errors or producer.unsent:
                self.figures.failures.append(
                    f"producer: {producer.unsent} unsent, errors {Counter(producer.errors).most_common(3)}"
                )
            ends = {t: self.kit.end_offsets(topic) for t, topic in enumerate(self.topics)}
            self.figures.produced = sum(sum(e.values()) for e in ends.values())
            if self.figures.produced != producer.acked:
                self.figures.failures.append(
                    f"end offsets add up to {self.figures.produced}, the producer had {producer.acked} acks"
                )
            self._drain(ends)
        finally:
            stop_faults.set()
            producer.stop.set()
            self._stop_all()
        gaps = self._commit_gaps(ends)
        if gaps:
            self.figures.failures.append(f"after every member closed, committed != end offsets: {gaps}")
        with self._lock:
            self.figures.delivered = sum(self._delivered.values())
            self.figures.duplicates = self.figures.delivered - len(self._delivered)
            self.figures.after_kill = sum(self._after_kill.values())
            by_member: Counter[int] = Counter()
            for key, n in self._after_kill.items():
                by_member[self._first[key]] += n
            self.figures.per_kill = sorted(
                ((n, index, self._reading_for(index)) for index, n in by_member.items()), reverse=True
            )
            self.figures.unfinished_at_kill = sum(n for key, n in self._after_kill.items() if key in self._unfinished)
        self.figures.lost = len(self._missing(ends))
        if self.keep_logs:
            wall_t0 = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - (time.monotonic() - self._t0)))
            (self.log_dir / "events.txt").write_text(f"t=0 at {wall_t0}\n" + "\n".join(self._events) + "\n")
            print(f"  member logs and events kept in {self.log_dir}", flush=True)
        elif self.figures.ok:
            shutil.rmtree(self.log_dir, ignore_errors=True)
        else:
            self.figures.failures.append(f"member logs kept in {self.log_dir}")
        return self.figures


def run_soak(kit: KafkaTestKit, protocol: Mode, *, seconds: float, seed: str = "soak", **options: Any) -> Figures:
    """Run one protocol's soak on ``kit``'s broker; the options are :class:`Soak`'s."""
    return Soak(kit, protocol, seconds=seconds, seed=seed, **options).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="chaos time per protocol (default 180)")
    parser.add_argument("--protocol", action="append", choices=MODES, help="repeatable; default all three and mixed")
    parser.add_argument("--seed", default="soak")
    parser.add_argument(
        "--runs", type=int, default=1, help="seeded runs per protocol (seeds SEED-1 ... SEED-N when more than one)"
    )
    parser.add_argument("--rate", type=int, default=300, help="records produced per second (default 300)")
    parser.add_argument("--members", type=int, default=4, help="most member processes alive at once (default 4)")
    parser.add_argument("--drain-timeout", type=float, default=90.0)
    parser.add_argument("--commit-interval-ms", type=int, default=1000, help="the members' auto.commit.interval.ms")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every start, kill, term and violation")
    parser.add_argument(
        "--no-faults", action="store_true", help="one broker and no broker faults (default: two brokers, faults)"
    )
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds between broker faults (default 20)")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep member logs and events.txt (starts, kills, faults, duplicates)"
    )
    parser.add_argument(
        "--raw-baseline",
        action="store_true",
        help="after each protocol, the same churn with raw confluent_kafka.Consumer members (no pauses)",
    )
    args = parser.parse_args(argv)
    protocols: list[Mode] = args.protocol or list(MODES)
    results: list[Figures] = []
    external = bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    with_faults = not (args.no_faults or external)
    source = (
        "KAFKA_BOOTSTRAP_SERVERS (no broker faults)"
        if external
        else "two brokers it starts, with broker faults"
        if with_faults
        else "a broker it starts, no faults"
    )
    print(f"soak: {args.seconds:.0f}s of chaos per protocol, seed {args.seed!r}, on {source}", flush=True)
    with contextlib.ExitStack() as stack:
        cluster: Cluster | None = None
        if with_faults:
            cluster = Cluster(FAULT_SETTINGS)
            stack.callback(cluster.stop)
            cluster.start()
            bootstrap = cluster.bootstrap_servers
        else:
            bootstrap = stack.enter_context(start_broker()).bootstrap_servers
        kit = KafkaTestKit(bootstrap, prefix="soak")
        if cluster is not None:
            cluster.warm_up(kit)
        try:
            options: dict[str, Any] = {
                "seconds": args.seconds,
                "seed": args.seed,
                "rate": args.rate,
                "max_members": args.members,
                "drain_timeout": args.drain_timeout,
                "commit_interval_ms": args.commit_interval_ms,
                "verbose": args.verbose,
                "faults": cluster,
                "fault_every": args.fault_every,
                "keep_logs": args.keep_logs,
            }
            seeds = [args.seed] if args.runs <= 1 else [f"{args.seed}-{i}" for i in range(1, args.runs + 1)]
            for protocol in protocols:
                for seed in seeds:
                    # The raw baseline, when asked for, runs the same churn right after.
                    for raw in (False, True) if args.raw_baseline else (False,):
                        figures = run_soak(kit, protocol, raw=raw, **{**options, "seed": seed})
                        print(f"seed {seed}: " + figures.report() if len(seeds) > 1 else figures.report(), flush=True)
                        results.append(figures)
        finally:
            kit.close()
    failed = [f.protocol for f in results if not f.ok]
    print(f"soak: {'FAILED under ' + ', '.join(failed) if failed else 'every protocol held'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
