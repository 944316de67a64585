"""I8 processed before stored: a member that dies while working on records never commits past one.

A child process (``crash_proc``) subscribes with the default offset store and a 100 ms
auto-commit, gets records, finishes some and dies with ``os._exit`` while it still holds the
rest: after a ``consume()`` batch, while working on one ``poll()`` record, inside
``keepalive()``, and inside ``keepalive()`` while a rebalance takes partitions from it. The
next member of the group must then get every record the dead one had not finished (at least
once; duplicates are allowed), and the group's committed offsets must never have passed one.

One characterization test pins what the raw client does instead (FACTS.md): it stores at
hand-out, so the next member starts after the whole batch and the unfinished rest is lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_poll, checked_pump

ROOT = Path(__file__).resolve().parents[2]

#: Records in the batch the child gets (``consume``, ``keepalive``, ``revoke``): all it can read.
BATCH = 100
#: ``poll`` mode: the child dies working on its NTH record, which reaches it after an idle poll.
NTH = 30
#: Records produced after the child died, so the next member has something to catch up to.
TAIL = 5
#: ``revoke`` mode: partitions of the topic; the batch holds unfinished records of every one.
REVOKE_PARTITIONS = 4

Record = tuple[int, int]  # (partition, offset)


class Child:
    """A running ``crash_proc``: its output lines are read on a thread, so the test can poll meanwhile."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.crash_proc", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: list[list[str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="crash_proc-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self._lines.append(line.split())

    def lines(self) -> list[list[str]]:
        with self._lock:
            return list(self._lines)

    def saw(self, kind: str) -> bool:
        return any(line[:1] == [kind] for line in self.lines())

    def records(self, kind: str) -> set[Record]:
        """The records of every ``G`` (handed out) or ``R`` (finished) line."""
        return {(int(line[1]), int(line[2])) for line in self.lines() if line[:1] == [kind]}

    def describe(self) -> str:
        self._stderr.flush()
        err = self._stderr_path.read_text()[-3000:]
        return f"exit status {self.proc.poll()}, last lines {self.lines()[-5:]}, stderr:\n{err}"

    def wait_for(self, kind: str, *, timeout: float, step: Callable[[], object] | None = None) -> None:
        """Wait until the child printed a ``kind`` line; fail naming its output if it ended first."""
        wait_until(
            lambda: self.saw(kind) or self.proc.poll() is not None,
            timeout=timeout,
            what=f"the child to print {kind!r}",
            step=step,
        )
        assert self.saw(kind), f"the child ended without printing {kind!r}: {self.describe()}"

    def wait_dead(self, *, timeout: float, step: Callable[[], object] | None = None) -> None:
        """Wait until the child has died as planned (``X`` printed, exit status 0) and all its output is read."""
        wait_until(lambda: self.proc.poll() is not None, timeout=timeout, what="the child to die", step=step)
        self._reader.join(timeout=10)
        assert self.proc.returncode == 0 and self.saw("X"), f"the child did not die as planned: {self.describe()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[[list[str]], Child]]:
    """``spawn(args)`` starts ``crash_proc`` with ``args``; every child is killed at teardown."""
    children: list[Child] = []

    def start(args: list[str]) -> Child:
        child = Child(args, tmp_path / f"crash_proc-{len(children)}.stderr")
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


def _ranges(records: Iterable[Record]) -> str:
    """``{(0, 10), (0, 11), (0, 12), (1, 4)}`` -> ``p0: 10..12, p1: 4``."""
    by_partition: dict[int, list[int]] = {}
    for partition, offset in sorted(records):
        by_partition.setdefault(partition, []).append(offset)
    parts = []
    for partition, offsets in by_partition.items():
        runs: list[list[int]] = []
        for offset in offsets:
            if runs and offset == runs[-1][-1] + 1:
                runs[-1].append(offset)
            else:
                runs.append([offset])
        text = ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
        parts.append(f"p{partition}: {text}")
    return "; ".join(parts) or "none"


def _caught_up(received: Received, ends: dict[int, int]) -> Callable[[], bool]:
    """Whether a member has read the last record of every partition (it reads each in order)."""
    return lambda: all((p, end - 1) in {(r[1], r[2]) for r in received.records} for p, end in ends.items())


def _next_member(kafka: KafkaTestKit, group: str, protocol: Protocol, topic: str) -> tuple[SafeConsumer, Received]:
    """A member that only reads: with auto-commit off, the committed offsets stay the dead member's.
    (A consumer-protocol one joining a classic cooperative-sticky group waits at most 2 s for it.)"""
    c = SafeConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False), migration_timeout=2.0)
    c.subscribe([topic])
    return c, Received()


def _run_child(
    kafka: KafkaTestKit,
    protocol: Protocol,
    mode: str,
    spawn: Callable[[list[str]], Child],
    *,
    raw: bool = False,
    secrets_dir: Path | None = None,
    next_protocol: Protocol | None = None,
) -> tuple[str, str, Child, dict[int, int], SafeConsumer, Received]:
    """Let a child die in ``mode``; then a next member reads the group's partitions to their end.

    Returns (topic, group, child, committed offsets when the child had died, next member, what it read).
    ``secrets_dir``: where the child's client config (a secured broker's credentials) is written.
    ``next_protocol``: the next member's protocol, when not the child's (a group between protocols).
    """
    peer_protocol = next_protocol or protocol
    partitions = REVOKE_PARTITIONS if mode == "revoke" else 1
    topic = kafka.create_topic(partitions=partitions)
    group = kafka.name("g")
    # consume(BATCH, 10 s) returns once it holds every record: in revoke mode the batch spans all partitions.
    kafka.produce(topic, NTH - 1 if mode == "poll" else BATCH, partitions=partitions)
    args = [kafka.bootstrap_servers, topic, group, protocol, mode, "--batch", str(BATCH), "--nth", str(NTH)]
    if secrets_dir is not None:
        config = secrets_dir / "client-config.json"
        config.touch(mode=0o600)
        config.write_text(json.dumps(kafka.client_config))
        args += ["--client-config", str(config)]
    child = spawn([*args, "--raw"] if raw else args)
    nxt: SafeConsumer | None = None
    got = Received()
    if mode == "poll":
        # The child finished every record so far and came back idle: the next one arrives on its own.
        child.wait_for("I", timeout=60)
        kafka.produce(topic, 10, partitions=1, start=NTH - 1)
    if mode == "revoke":
        child.wait_for("K", timeout=60)
        nxt, got = _next_member(kafka, group, peer_protocol, topic)
        # The peer's join makes the child's keeper serve a rebalance while its batch is unfinished.
        child.wait_dead(timeout=60, step=lambda: checked_poll(nxt, got))
        assert child.saw("V"), f"the rebalance never took partitions from the child: {child.describe()}"
    else:
        child.wait_dead(timeout=60)
    committed = kafka.committed(group, topic, partitions)
    kafka.produce(topic, TAIL * partitions, partitions=partitions, start=10_000)
    ends = kafka.end_offsets(topic)
    if nxt is None:
        nxt, got = _next_member(kafka, group, peer_protocol, topic)
    # The dead member holds its partitions until its session times out; then they are the next member's.
    checked_pump([(nxt, got)], _caught_up(got, ends), timeout=60, what="the next member to read every partition")
    return topic, group, child, committed, nxt, got


@pytest.mark.parametrize(
    ("protocol", "next_protocol"),
    [("range", "consumer"), ("cooperative-sticky", "consumer"), ("consumer", "cooperative-sticky")],
    ids=["range-upgraded", "cooperative-sticky-upgraded", "consumer-downgraded"],
)
def test_a_member_killed_mid_batch_while_a_peer_of_the_other_protocol_joins_skips_nothing(
    kafka: KafkaTestKit, protocol: Protocol, next_protocol: Protocol, spawn: Callable[[list[str]], Child]
) -> None:
    """Groups between protocols (I8, I9): the child holds an unfinished batch inside ``keepalive()``
    when a member of the other protocol joins (the broker converts the group, or takes a classic
    member into a consumer group) and takes partitions from it; the child dies. The next member gets
    every record the child had not finished."""
    topic, _group, child, committed, nxt, got = _run_child(
        kafka, protocol, "revoke", spawn, next_protocol=next_protocol
    )
    try:
        _check_nothing_unfinished_was_lost(kafka, topic, child, committed, got)
    finally:
        nxt.close()


@pytest.mark.parametrize("mode", ["consume", "poll", "keepalive", "revoke", "aio", "aio-keepalive"])
def test_the_next_member_gets_every_record_a_dead_member_had_not_finished(
    kafka: KafkaTestKit, protocol: Protocol, mode: str, spawn: Callable[[list[str]], Child]
) -> None:
    topic, _group, child, committed, nxt, got = _run_child(kafka, protocol, mode, spawn)
    try:
        _check_nothing_unfinished_was_lost(kafka, topic, child, committed, got)
    finally:
        nxt.close()


def test_over_sasl_ssl_the_next_member_gets_every_record_a_dead_member_had_not_finished(
    secured_kafka: KafkaTestKit, protocol: Protocol, spawn: Callable[[list[str]], Child], tmp_path: Path
) -> None:
    """I8 through a secured cluster (SCRAM-SHA-512 over TLS): the same guarantee, the same checks."""
    topic, _group, child, committed, nxt, got = _run_child(
        secured_kafka, protocol, "consume", spawn, secrets_dir=tmp_path
    )
    try:
        _check_nothing_unfinished_was_lost(secured_kafka, topic, child, committed, got)
    finally:
        nxt.close()


def _check_nothing_unfinished_was_lost(
    kafka: KafkaTestKit, topic: str, child: Child, committed: dict[int, int], got: Received
) -> None:
    finished = child.records("R")
    unfinished = child.records("G") - finished
    assert unfinished, f"the scenario must leave records unfinished: {child.describe()}"
    ends = kafka.end_offsets(topic)
    every = {(p, o) for p, end in ends.items() for o in range(end)}
    missing = every - finished - {(r[1], r[2]) for r in got.records}
    assert not missing, (
        f"I8: records the dead member had not finished never reached the next member: {_ranges(missing)} "
        f"(the dead member was handed {_ranges(child.records('G'))} and finished {_ranges(finished)}; "
        f"committed when it died: {committed})"
    )
    for partition, offset in sorted(unfinished):
        assert committed[partition] <= offset, (
            f"I8: partition {partition}: the dead member committed {committed[partition]}, past record "
            f"{offset} it had not finished (unfinished: {_ranges(unfinished)})"
        )


@pytest.mark.kafka_versions
def test_raw_consumer_commits_past_the_unfinished_rest_of_a_batch(
    kafka: KafkaTestKit, protocol: Protocol, spawn: Callable[[list[str]], Child]
) -> None:
    """FACTS.md: ``enable.auto.offset.store`` stores at hand-out; the next member starts after the batch."""
    _topic, _group, child, committed, nxt, got = _run_child(kafka, protocol, "consume", spawn, raw=True)
    try:
        handed = child.records("G")
        unfinished = handed - child.records("R")
        assert len(unfinished) == BATCH - 10, child.describe()
        last = max(offset for _, offset in handed)
        assert committed == {0: last + 1}, "the raw client committed the whole batch while the app worked on it"
        first = min(r[2] for r in got.records)
        assert first == last + 1, "the next member starts after the whole batch"
        assert not unfinished & {(r[1], r[2]) for r in got.records}, "nobody gets the unfinished rest"
    finally:
        nxt.close()


def test_a_record_held_through_eager_rebalances_is_not_handed_to_its_member_again(kafka: KafkaTestKit) -> None:
    """Classic ``range`` (eager): the member is working on the last record it was handed (inside
    ``keepalive()``, not come back: nothing stored for it) when a peer joins, and its partition is
    revoked and given back in that same rebalance; then the peer leaves and it happens again, before
    a record was read (librdkafka reports no position then). The partition reads on after what the
    member was handed, both times: its committed offset (behind the record it works on) would hand
    the record to it again. Once it comes back, the offset past the record is committed."""
    topic, other = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1)
    group = kafka.name("g")
    # The keeper polls a parked member well before max.poll.interval.ms runs out: 6 s keeps that often.
    member = SafeConsumer(kafka.consumer_conf(group, "range", max_poll_interval_ms=6000))
    member.subscribe([topic])
    got = Received()
    kafka.produce(topic, 10, partitions=1)
    checked_pump([(member, got)], lambda: len(got.records) == 10, timeout=30, what="ten records")
    peer = SafeConsumer(kafka.consumer_conf(group, "range"))
    peer.subscribe([other])  # range assigns by topic: the member gets its partition back every time
    peer_got = Received()
    with member.keepalive():  # still working on offset 9
        pump_members = [(peer, peer_got)]
        checked_pump(pump_members, peer.assignment, timeout=30, what="the peer joined")
        wait_until(lambda: len(kafka.describe_group(group).members) == 2, timeout=30, what="two members")
        wait_until(
            lambda: kafka.describe_group(group).state == "STABLE",
            timeout=30,
            what="the join's rebalance done",
            step=lambda: checked_poll(peer, peer_got, 0.1),
        )
        peer.close()
        wait_until(
            lambda: len(kafka.describe_group(group).members) == 1 and kafka.describe_group(group).state == "STABLE",
            timeout=30,
            what="the leave's rebalance done",
        )
    checked_pump([(member, got)], member.assignment, timeout=30, what="the member's partition")
    end = time.monotonic() + 3
    while time.monotonic() < end:
        checked_poll(member, got, 0.1)
    assert [r[2] for r in got.records] == list(range(10)), "a record was handed to its member again"
    wait_until(
        lambda: kafka.committed(group, topic, 1) == {0: 10},
        timeout=30,
        what="the offset past the record committed",
        step=lambda: checked_poll(member, got, 0.2),
    )
    member.close()
