"""A seeded random walk of pause intent and group lifecycle, checking I1-I4, I8 and I3 after every step.

Member A subscribes to a 4-partition topic in group G. Peers join and leave G: in-process
ones close cleanly; child processes (``walk_member_proc``) are killed with SIGKILL, so the
group learns of it only when their session expires. A itself leaves and comes back
(``unsubscribe()`` then ``subscribe()``). Member B never subscribes: it ``assign()``s
partitions of the same topic in a group of its own, gives them up and takes them again
(``unassign()`` or ``incremental_unassign()``, then ``assign()``) and moves owned partitions
to explicit offsets (``assign()`` at an offset).

The Model below is the specification of pause intent (SPEC I4 and the I9 table), written
independently of the ledger: it sees only what the application sees (its calls and its
callbacks). After every step, A's and B's partition, topic and consumer marks and effective
paused set must be the model's; every record returned must be of an owned, unpaused
partition (I1, I2); and no committed offset of either group may point past a record that was
never delivered (I8). At the end every record produced reaches G's members at least once,
and B every record from where it last chose to read (I3).

The walk is deterministic per seed: which step does what is drawn before the broker is
touched; which partitions a step picks depends on the assignment the broker gave, from a
random source of that step's own, so it never shifts the later steps. The seed is
``safeconsumer-<protocol>``; set SAFECONSUMER_WALK_SEED to replay another one.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol, WaitTimeout, wait_until

from ..support import Received, checked_poll, keys

STEPS = 40
PARTITIONS = 4
PER_STEP = 40  # records produced before every step, round-robin: PER_STEP / PARTITIONS per partition
MAX_PEERS = 2  # A and at most two peers: every member of G keeps at least one partition
SETTLE = 45.0  # seconds for G to settle after a step (a killed member's session expiry included)
BURST = 50  # records one member may take in a row before the next member is polled
ROOT = Path(__file__).resolve().parents[2]

Key = tuple[str, int]

MARK_STEPS = ("pause", "resume", "pause_topic", "resume_topic", "pause_all", "resume_all")
#: Every lifecycle path; each plan takes them all, those of WITH_MARKS while the consumer they
#: concern (A for G's paths) holds partition marks (set by a pause after its last lifecycle
#: step, which may have moved marked partitions away), those of WITH_INTENT while it holds a
#: topic or consumer mark.
LIFECYCLE = frozenset({"join", "leave", "spawn", "kill", "A.resubscribe", "B.reassign", "B.assign_at"})
WITH_MARKS = frozenset({"kill", "A.resubscribe", "B.reassign", "B.assign_at"})
WITH_INTENT = frozenset({"A.resubscribe", "B.reassign"})
REQUIRED = LIFECYCLE | {f"{s}+marks" for s in WITH_MARKS} | {f"{s}+intent" for s in WITH_INTENT}


def plan(rng: random.Random) -> list[str]:
    """What each step does, drawn up front so that a seed always walks the same path.

    ``A.<op>`` / ``B.<op>``: a pause or resume call of A or B; ``A.resubscribe``;
    ``B.reassign`` (give partitions up, assign again); ``B.assign_at`` (explicit offsets);
    ``join`` / ``leave``: an in-process peer subscribes / closes; ``spawn`` / ``kill``: a
    peer in a child process subscribes / is killed with SIGKILL. Plans are drawn from ``rng``
    until one takes every path of REQUIRED: still one plan per seed.
    """
    for _ in range(10_000):
        steps = _draw(rng)
        if _takes(steps) >= REQUIRED:
            return steps
    raise AssertionError(f"no plan of {STEPS} steps takes every path of REQUIRED: more steps")


def _draw(rng: random.Random) -> list[str]:
    steps: list[str] = []
    in_process = children = 0
    for _ in range(STEPS):
        kind = rng.random()
        if kind < 0.5:
            # A partition pause is drawn as often as the five other calls together: partition
            # marks are what most lifecycle paths decide about.
            op = rng.choices(MARK_STEPS, weights=(5, 1, 1, 1, 1, 1))[0]
            choice = f"{rng.choice('AB')}.{op}"
        elif kind < 0.65:
            choice = rng.choice(["B.reassign", "B.assign_at"])
        else:
            options = ["A.resubscribe"]
            if in_process + children < MAX_PEERS:
                options += ["join", "spawn"]
            if in_process:
                options.append("leave")
            if children:
                options.append("kill")
            choice = rng.choice(options)
        in_process += {"join": 1, "leave": -1}.get(choice, 0)
        children += {"spawn": 1, "kill": -1}.get(choice, 0)
        steps.append(choice)
    return steps


def _takes(steps: list[str]) -> set[str]:
    """The lifecycle paths a plan takes, with ``+marks`` / ``+intent`` when taken with marks set."""
    taken: set[str] = set()
    marks = {"A": False, "B": False}  # partition marks (a resume may lift only some: assume all)
    intent: dict[str, set[str]] = {"A": set(), "B": set()}  # topic and consumer marks
    for choice in steps:
        who, _, op = choice.rpartition(".")
        owner = who or "A"  # a peer joining, leaving or dying moves A's partitions
        if op == "pause":
            marks[owner] = True
        elif op == "resume":
            marks[owner] = False
        elif op.startswith("pause_"):
            intent[owner].add(op.removeprefix("pause_"))
        elif op.startswith("resume_"):
            intent[owner].discard(op.removeprefix("resume_"))
        else:
            taken.add(choice)
            if marks[owner]:
                taken.add(f"{choice}+marks")
            if intent[owner]:
                taken.add(f"{choice}+intent")
            marks[owner] = False  # may have moved the marked partitions away
    return taken


class Model:
    """Expected pause intent of one consumer, from its own calls and rebalance callbacks.

    Marks are independent (SPEC): a partition mark is dropped only by ``resume(partitions)``
    and by the lifecycle paths of I9 that say so; topic and consumer marks only by
    ``resume_topics()`` / ``resume()``, never by any lifecycle path.
    """

    def __init__(self, incremental: bool) -> None:
        self.incremental = incremental
        self.consumer = False
        self.topic = False
        self.marks: set[Key] = set()
        self.revoked: set[Key] = set()  # eager: revoked in the rebalance under way

    def unsubscribe(self) -> None:
        """I9: ``unsubscribe()`` drops every partition mark, whatever librdkafka does underneath."""
        self.marks.clear()
        self.revoked.clear()

    def assign(self, partitions: set[Key]) -> None:
        """``assign()`` replaces the assignment: a partition assigned again (at an explicit offset
        or not) keeps its mark, one that leaves loses it (I4, I9). ``unassign()`` is ``assign(set())``."""
        self.marks &= partitions

    def unassign(self, partitions: set[Key]) -> None:
        """``incremental_unassign()``: those partitions leave and lose their marks."""
        self.marks -= partitions

    def on_assign(self, _c: Any, parts: list[TopicPartition]) -> None:
        if not self.incremental:
            # Eager: a revoked partition keeps its mark only if it comes back now.
            self.marks -= self.revoked - keys(parts)
            self.revoked.clear()

    def on_revoke(self, _c: Any, parts: list[TopicPartition]) -> None:
        if self.incremental:
            self.marks -= keys(parts)
        else:
            self.revoked |= keys(parts)

    def on_lost(self, _c: Any, parts: list[TopicPartition]) -> None:
        # I9: lost partitions lose their marks at once, under every protocol.
        self.marks -= keys(parts)
        self.revoked -= keys(parts)

    def effective(self, assigned: set[Key]) -> set[Key]:
        if self.consumer or self.topic:
            return set(assigned)
        return self.marks & assigned


class Child:
    """A peer of A in a child process: it can die without a word to the group."""

    def __init__(self, kafka: KafkaTestKit, topic: str, group: str, protocol: Protocol, stderr: Path) -> None:
        self.topic = topic
        self.received = Received()
        self.assigned: set[Key] = set()
        self.killed = False
        self._pending = b""
        self._stderr_path = stderr
        self._stderr: IO[bytes] = stderr.open("wb")
        argv = [kafka.bootstrap_servers, topic, group, protocol]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.walk_member_proc", *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        assert self.proc.stdout is not None
        self._stdout = self.proc.stdout
        os.set_blocking(self._stdout.fileno(), False)

    def drain(self) -> None:
        """Take in everything the child printed so far (never blocks)."""
        while True:
            try:
                chunk = os.read(self._stdout.fileno(), 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            kind, _, rest = line.decode().partition(" ")
            if kind == "A":
                self.assigned = {(self.topic, int(p)) for p in rest.split(",") if p}
            elif kind == "R":
                partition, offset, value = rest.split()
                self.received.records.append((self.topic, int(partition), int(offset), value.encode()))
            elif kind == "X":
                raise AssertionError(f"I2: a child member was handed a record of a partition it did not own: {rest}")
        if not self.killed and self.proc.poll() is not None:
            tail = self._stderr_path.read_text(errors="replace")[-2000:]
            raise AssertionError(f"a child member exited on its own (status {self.proc.returncode}):\n{tail}")

    def kill(self) -> None:
        """SIGKILL: no leave, no final commit; then read what it printed before it died."""
        self.killed = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.drain()
        self._stdout.close()
        self._stderr.close()


def _tps(topic: str, partitions: Iterable[int], offsets: dict[int, int] | None = None) -> list[TopicPartition]:
    """TopicPartitions of ``partitions``: at ``offsets[p]`` where given, else from the committed offset."""
    offsets = offsets or {}
    return [
        TopicPartition(topic, p, offsets[p]) if p in offsets else TopicPartition(topic, p) for p in sorted(partitions)
    ]


class Walk:
    """Group G (A, in-process peers, child peers) and B, driven one step at a time."""

    def __init__(self, kafka: KafkaTestKit, protocol: Protocol, seed: str, tmp: Path) -> None:
        self.kafka = kafka
        self.protocol = protocol
        self.seed = seed
        self.tmp = tmp
        self.where = f"seed {seed!r}, the start"
        self.topic = kafka.create_topic(partitions=PARTITIONS)
        self.group = kafka.name("g")
        self.group_b = kafka.name("gb")
        self.produced = 0
        self.closed = False
        self.model = Model(incremental=protocol != "range")
        self.a, self.ra = SafeConsumer(self._conf(self.group)), Received()
        self.peers: list[tuple[SafeConsumer, Received]] = []
        self.children: list[Child] = []
        self.spawned = 0
        self.gone: list[Received] = []  # what closed peers and killed children had received
        # B never subscribes: only its own calls change its assignment, so its model never
        # sees a callback.
        self.model_b = Model(incremental=False)
        self.b, self.rb = SafeConsumer(self._conf(self.group_b)), Received()
        # B must deliver every record of partition p from from_b[p] on: where it last chose
        # to read p (an explicit offset), or 0. An offset B committed may also be one of those
        # choices (I9: "the app's explicit offset").
        self.from_b = dict.fromkeys(range(PARTITIONS), 0)
        self.explicit_b: dict[int, set[int]] = {p: {0} for p in range(PARTITIONS)}
        self.b_log: list[str] = []  # B's assignment calls, for a failure message

    def _conf(self, group: str) -> dict[str, Any]:
        return self.kafka.consumer_conf(group, self.protocol, auto_commit_interval_ms=200)

    def _subscribe_a(self) -> None:
        m = self.model
        self.a.subscribe([self.topic], on_assign=m.on_assign, on_revoke=m.on_revoke, on_lost=m.on_lost)

    def start(self) -> None:
        self._subscribe_a()
        self.b.assign(_tps(self.topic, [0, 1], {0: 0, 1: 0}))
        self.model_b.assign({(self.topic, 0), (self.topic, 1)})
        self.b_log.append("assign({0: 0, 1: 0})")
        self.pump(self.settled, timeout=SETTLE, what="A to join")

    # -- polling -----------------------------------------------------------------------------
    def consumers(self) -> list[tuple[SafeConsumer, Received]]:
        return [(self.a, self.ra), *self.peers, (self.b, self.rb)]

    def group_received(self) -> list[Received]:
        """Everything G's members (live, closed, killed) were handed."""
        return [self.ra, *(r for _, r in self.peers), *(ch.received for ch in self.children), *self.gone]

    def poll_all(self) -> None:
        """Poll every member in turn, each for as long as records come (up to BURST): at one
        record per poll(), members polled in turn would otherwise fall far behind."""
        for c, received in self.consumers():
            for i in range(BURST):
                before = len(received.records)
                checked_poll(c, received, 0.02 if i == 0 else 0)  # I1 and I2 at every record's return
                if len(received.records) == before:
                    break
        for child in self.children:
            child.drain()

    def pump(self, until: Callable[[], object], *, timeout: float, what: str) -> None:
        try:
            wait_until(until, timeout=timeout, what=what, step=self.poll_all)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc} at {self.where}; {self.describe()}") from None

    def describe(self) -> str:
        owners = [f"A={sorted(p for _, p in keys(self.a.assignment()))}"]
        owners += [f"peer={sorted(p for _, p in keys(c.assignment()))}" for c, _ in self.peers]
        owners += [f"child={sorted(p for _, p in ch.assigned)}" for ch in self.children]
        owners.append(f"B={sorted(p for _, p in keys(self.b.assignment()))}")
        return "assignments " + " ".join(owners)

    def owned_in_g(self) -> list[set[Key]]:
        """What each live member of G owns (a child: what it last printed)."""
        owned = [keys(c.assignment()) for c, _ in [(self.a, self.ra), *self.peers]]
        return owned + [ch.assigned for ch in self.children]

    def settled(self) -> bool:
        """Every partition of the topic owned by exactly one member of G, every member owning one."""
        owned = self.owned_in_g()
        union = set().union(*owned)
        return len(union) == PARTITIONS and sum(map(len, owned)) == PARTITIONS and all(owned)

    # -- one step ----------------------------------------------------------------------------
    def step(self, step: int, choice: str) -> None:
        self.where = f"seed {self.seed!r}, step {step} ({choice})"
        self.kafka.produce(self.topic, PER_STEP, partitions=PARTITIONS, start=self.produced)
        self.produced += PER_STEP
        pick = random.Random(f"{self.seed}/{step}")
        who, _, op = choice.rpartition(".")
        if op in MARK_STEPS:
            consumer, model = (self.a, self.model) if who == "A" else (self.b, self.model_b)
            self.mark(consumer, model, op, pick)
        elif op == "resubscribe":
            self.resubscribe(pick)
        elif op == "reassign":
            self.reassign_b(pick)
        elif op == "assign_at":
            self.assign_b_at(pick)
        elif op == "join":
            peer = SafeConsumer(self._conf(self.group))
            peer.subscribe([self.topic])
            self.peers.append((peer, Received()))
        elif op == "leave":
            peer, received = self.peers.pop(pick.randrange(len(self.peers)))
            peer.close()
            self.gone.append(received)
        elif op == "spawn":
            self.spawned += 1
            stderr = self.tmp / f"child-{self.spawned}.stderr"
            self.children.append(Child(self.kafka, self.topic, self.group, self.protocol, stderr))
        elif op == "kill":
            child = self.children.pop(pick.randrange(len(self.children)))
            child.kill()
            self.gone.append(child.received)
        else:
            raise AssertionError(f"unknown step {choice!r}")
        self.pump(self.settled, timeout=SETTLE, what="the group to settle")
        self.check()

    def mark(self, c: SafeConsumer, model: Model, op: str, pick: random.Random) -> None:
        owned = sorted(keys(c.assignment()))
        if op == "pause":
            chosen = set(pick.sample(owned, pick.randint(1, len(owned))))
            c.pause([TopicPartition(t, p) for t, p in sorted(chosen)])
            model.marks |= chosen
        elif op == "resume":
            chosen = set(pick.sample(owned, pick.randint(1, len(owned))))
            c.resume([TopicPartition(t, p) for t, p in sorted(chosen)])
            model.marks -= chosen
        elif op == "pause_topic":
            c.pause_topics([self.topic])
            model.topic = True
        elif op == "resume_topic":
            c.resume_topics([self.topic])
            model.topic = False
        elif op == "pause_all":
            c.pause()
            model.consumer = True
        elif op == "resume_all":
            c.resume()
            model.consumer = False

    def resubscribe(self, pick: random.Random) -> None:
        """A leaves G and comes back: at once, or once G has settled without it."""
        self.a.unsubscribe()
        self.model.unsubscribe()
        if pick.random() < 0.5:
            alone = not self.peers and not self.children

            def moved_on() -> bool:
                if self.a.assignment():
                    return False
                return alone or len(set().union(*self.owned_in_g())) == PARTITIONS

            self.pump(moved_on, timeout=SETTLE, what="G to settle without A")
        self._subscribe_a()

    def reassign_b(self, pick: random.Random) -> None:
        """B gives partitions up (``unassign()``, or ``incremental_unassign()`` of some), then
        ``assign()``s a new set, read from the committed offset."""
        owned = sorted(p for _, p in keys(self.b.assignment()))
        if pick.random() < 0.5:
            self.b.unassign()
            self.model_b.assign(set())
            self.b_log.append("unassign()")
        else:
            leaving = set(pick.sample(owned, pick.randint(1, len(owned))))
            self.b.incremental_unassign(_tps(self.topic, leaving))
            self.model_b.unassign({(self.topic, p) for p in leaving})
            self.b_log.append(f"incremental_unassign({sorted(leaving)})")
        # A few polls with the partitions gone: whatever B still held of them must not come out.
        for _ in range(3):
            checked_poll(self.b, self.rb, 0.02)
        new = set(pick.sample(range(PARTITIONS), pick.randint(1, PARTITIONS)))
        self.b.assign(_tps(self.topic, new))
        self.model_b.assign({(self.topic, p) for p in new})
        self.b_log.append(f"assign({sorted(new)})")

    def assign_b_at(self, pick: random.Random) -> None:
        """B ``assign()``s some owned partitions again at explicit offsets, maybe drops the
        others, maybe adds new ones (read from the committed offset).

        The offsets are at or past the next record B was not handed, never behind it: after
        a step back the group may keep its higher commit (librdkafka may not commit a stored
        offset below the committed one), so what B owes from there would rest on librdkafka's
        commit policy, not on any invariant.
        """
        owned = sorted(p for _, p in keys(self.b.assignment()))
        others = sorted(set(range(PARTITIONS)) - set(owned))
        again = pick.sample(owned, pick.randint(1, len(owned)))
        extra = pick.sample(others, pick.randint(0, len(others)))
        end = self.produced // PARTITIONS
        delivered = self.delivered_b()
        offsets = {}
        for p in again:
            last = max((o for q, o in delivered if q == p), default=-1)
            offsets[p] = min(end, last + 1 + pick.randint(0, 10))
        self.b.assign(_tps(self.topic, [*again, *extra], offsets))
        for p, offset in offsets.items():
            self.from_b[p] = offset
            self.explicit_b[p].add(offset)
        self.model_b.assign({(self.topic, p) for p in [*again, *extra]})
        self.b_log.append(f"assign({dict(sorted(offsets.items()))} + {sorted(extra)}) at {self.where}")

    def delivered_b(self) -> set[tuple[int, int]]:
        return {(r[1], r[2]) for r in self.rb.records}

    # -- the invariants ------------------------------------------------------------------------
    def check(self) -> None:
        for name, c, model in (("A", self.a, self.model), ("B", self.b, self.model_b)):
            assigned = keys(c.assignment())
            state = c.pause_state()
            at = f"{name} at {self.where}"
            assert keys(c.paused()) == model.effective(assigned), (
                f"I4: paused() {sorted(keys(c.paused()))} != {sorted(model.effective(assigned))} of "
                f"assigned {sorted(assigned)}: {at}"
            )
            assert set(state.partitions) == model.marks, (
                f"I4/I9: partition marks {sorted(state.partitions)} != {sorted(model.marks)}: {at}"
            )
            assert state.consumer == model.consumer, f"I9: consumer mark {state.consumer}: {at}"
            assert (self.topic in state.topics) == model.topic, f"I9: topic marks {set(state.topics)}: {at}"
        self.check_committed()

    def check_committed(self) -> None:
        """I8: a committed offset c of a partition means record c - 1 was handed to a member
        (for B, or that B chose to read from c)."""
        committed = self.kafka.committed(self.group, self.topic, PARTITIONS)
        # Drained after the query: a child prints a record before its next poll, the only
        # moment its offset can be stored, so whatever it committed is in its pipe by now.
        for child in self.children:
            child.drain()
        delivered = {(r[1], r[2]) for received in self.group_received() for r in received.records}
        past = {p: c for p, c in committed.items() if c > 0 and (p, c - 1) not in delivered}
        assert not past, f"I8: group G committed {past}, past records no member was handed, at {self.where}"
        committed_b = self.kafka.committed(self.group_b, self.topic, PARTITIONS)
        delivered_b = self.delivered_b()
        past_b = {
            p: c
            for p, c in committed_b.items()
            if c > 0 and (p, c - 1) not in delivered_b and c not in self.explicit_b[p]
        }
        assert not past_b, f"I8: B committed {past_b}, past records it was not handed, at {self.where}"

    def missing(self) -> str:
        """What I3 still waits for: records of G nobody was handed, records B owes."""
        ids = set().union(*(set(r.ids()) for r in self.group_received()))
        lost = sorted(set(range(self.produced)) - ids)
        end = self.produced // PARTITIONS
        got = self.delivered_b()
        owed = {p: [o for o in range(self.from_b[p], end) if (p, o) not in got] for p in range(PARTITIONS)}
        owed = {p: offsets for p, offsets in owed.items() if offsets}
        if not lost and not owed:
            return ""
        return f"G's members were never handed {len(lost)} records (ids {lost[:10]}); B owes " + ", ".join(
            f"p{p}: {len(o)} from offset {o[0]}" for p, o in owed.items()
        )

    def describe_b(self) -> str:
        """B's side of the story, for an I3 failure: its counters, positions, commits and choices."""
        positions = {tp.partition: tp.offset for tp in self.b.position(_tps(self.topic, range(PARTITIONS)))}
        committed = self.kafka.committed(self.group_b, self.topic, PARTITIONS)
        chosen = {p: sorted(offsets) for p, offsets in self.explicit_b.items()}
        return (
            f"B: {delivery_stats(self.b)}, paused {sorted(keys(self.b.paused()))}, positions {positions}, "
            f"committed {committed}, explicit offsets {chosen}, calls {self.b_log}"
        )

    def finish(self) -> None:
        """Everyone resumes; B takes every partition; every record must come out (I3)."""
        self.where = f"seed {self.seed!r}, the end"
        for c, model in ((self.a, self.model), (self.b, self.model_b)):
            c.resume()
            c.resume_topics([self.topic])
            c.resume(c.assignment())
            model.consumer = model.topic = False
            model.marks.clear()
        self.b.assign(_tps(self.topic, range(PARTITIONS)))
        self.model_b.assign({(self.topic, p) for p in range(PARTITIONS)})
        self.check()
        try:
            self.pump(lambda: not self.missing(), timeout=60, what="every record produced")
        except WaitTimeout as exc:
            raise AssertionError(f"I3: {self.missing()} ({exc}); {self.describe_b()}") from None
        self.check()
        self.close()
        self.check_committed()  # after the final commits of close()

    def close(self) -> None:
        """Kill the children, close every consumer; what each was handed stays counted."""
        if self.closed:
            return
        self.closed = True
        for child in self.children:
            if not child.killed:
                child.kill()
        self.gone += [ch.received for ch in self.children] + [r for _, r in self.peers]
        consumers = [self.a, *(c for c, _ in self.peers), self.b]
        self.children.clear()
        self.peers.clear()
        for c in consumers:
            c.close()

    def abandon(self) -> None:
        """After a failure: no child left running, no member left in a group."""
        for child in self.children:
            if not child.killed:
                child.kill()
        if not self.closed:
            self.closed = True
            for c in [self.a, *(c for c, _ in self.peers), self.b]:
                with contextlib.suppress(Exception):
                    c.close()


def test_random_walk_keeps_every_invariant(kafka: KafkaTestKit, protocol: Protocol, tmp_path: Path) -> None:
    seed = os.environ.get("SAFECONSUMER_WALK_SEED", f"safeconsumer-{protocol}")
    steps = plan(random.Random(seed))
    walk = Walk(kafka, protocol, seed, tmp_path)
    try:
        walk.start()
        for step, choice in enumerate(steps):
            walk.step(step, choice)
        walk.finish()
    finally:
        walk.abandon()
