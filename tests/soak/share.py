"""The share soak: SafeShareConsumer member processes in one share group under random starts,
SIGKILLs and SIGTERMs, slow work past the lock, poison records and pauses.

    python -m tests.soak.share [--seconds 120] [--mode implicit explicit] [--seed share] [--rate 100]

Per acknowledgement mode, on a fresh topic (3 partitions) and a fresh share group whose lock is
:data:`LOCK_MS` and delivery count limit :data:`DELIVERY_LIMIT`: a producer thread writes numbered
records at ``--rate`` records/s, one in :data:`POISON_EVERY` a poison record that always fails,
while the controller keeps between 1 and ``--members`` member processes alive (more members than
partitions), starting, SIGKILLing and SIGTERMing them at random (seeded). A member
(``--member``) reads with ``start="earliest"`` and ``poison=DeadLetter(...)``, runs every record
through ``handle()``, works past the lock on one record in :data:`SLOW_EVERY`, pauses for a second
now and then, and prints one line per record it processed and per lock overrun the consumer
reported (its WARNING, parsed).

Then production and the chaos stop, two members drain the group, and every member gets SIGTERM
and must exit 0. A mode passes when every produced record was processed at least once or is in
the dead-letter topic (none archived without a copy), every poison record is in the dead-letter
topic, every record processed more than once is explained (a member that processed it before the
last one was killed or terminated, or a member reported a lock overrun covering it), and no
member crashed. Exit status 0 when every mode passed.

What a SIGKILL can lose: librdkafka acquires records before ``poll()`` returns them (its fetcher
fills a local queue). A member killed while records on their *last* delivery sit in that queue never
saw them, so no copy was written, and the broker archives them when their lock runs out. The soak
counts such records as lost (``make soak`` runs with kills); the short run in ``make test`` SIGTERMs
members only (``close()`` gives back what it holds).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from confluent_kafka import Consumer, Message

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
LOCK_MS = 3000
DELIVERY_LIMIT = 3
POISON_EVERY = 50
SLOW_EVERY = 200

Key = tuple[int, int]  # (partition, offset)


# -- the member -----------------------------------------------------------------------------------
def member(*args: str) -> None:
    bootstrap, group, topic, dlt, mode, seed = args
    from safeconsumer import DeadLetter, SafeShareConsumer

    rng = random.Random(f"{seed}-{os.getpid()}")
    out = sys.stdout
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            out.write(line + "\n")
            out.flush()

    class Overruns(logging.Handler):
        """The consumer's lock-overrun WARNINGs, as OVERRUN lines (partition, first, last offset)."""

        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "acquisition lock" in text:
                for partition, first, last in re.findall(r"\[(\d+)\] @ (\d+)(?:\.\.(\d+))?", text):
                    say(f"OVERRUN {partition} {first} {last or first}")

    logging.getLogger("safeconsumer").addHandler(Overruns(logging.WARNING))
    logging.getLogger("safeconsumer").setLevel(logging.WARNING)
    stop = threading.Event()
    calm = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: calm.set())
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": mode,
        "logger": logging.getLogger("soak.librdkafka"),
    }
    consumer = SafeShareConsumer(conf, start="earliest", poison=DeadLetter(dlt, retries=0))
    consumer.subscribe([topic])
    say(f"STARTED {os.getpid()}")

    def process(msg: Message) -> None:
        value = msg.value() or b""
        if value.startswith(b"poison"):
            raise ValueError("a poison record")
        if not calm.is_set() and int(value.split(b"-")[1]) % SLOW_EVERY == 0:
            time.sleep(LOCK_MS / 1000 * 1.3)  # past the lock: the rest of the batch goes back first
        say(f"P {os.getpid()} {msg.partition()} {msg.offset()} {msg.delivery_count()}")

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
    consumer.close()
    say("CLOSED")


# -- the controller -------------------------------------------------------------------------------
@dataclass
class Member:
    proc: subprocess.Popen[str]
    reader: threading.Thread
    ended: str = ""  # "", "killed", "terminated"


@dataclass
class Figures:
    mode: str
    produced: int = 0
    poison: int = 0
    processed: int = 0
    dead_lettered: int = 0
    starts: int = 0
    kills: int = 0
    terms: int = 0
    overruns: int = 0
    doubles: int = 0
    lost: list[Key] = field(default_factory=list)
    unexplained: list[Key] = field(default_factory=list)
    poison_missing: list[Key] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def report(self) -> str:
        return (
            f"share soak ({self.mode}): produced {self.produced} ({self.poison} poison), processed {self.processed} "
            f"times, dead-lettered {self.dead_lettered}, {self.doubles} processed more than once "
            f"({len(self.unexplained)} unexplained), {self.overruns} overruns reported; {self.starts} starts, "
            f"{self.kills} kills, {self.terms} terms; lost {len(self.lost)} {self.lost[:10]}, poison not "
            f"dead-lettered {self.poison_missing[:10]}, unexplained {self.unexplained[:10]}, failures {self.failures}"
        )

    @property
    def passed(self) -> bool:
        return not (self.lost or self.unexplained or self.poison_missing or self.failures)


def run_share_soak(
    kit: object, mode: str, *, seconds: float, seed: str, rate: float = 100.0, members: int = 5, kills: bool = True
) -> Figures:
    """One soak of ``mode`` on ``kit``'s broker (a :class:`safeconsumer.testing.KafkaTestKit`).
    ``kills=False``: members are only SIGTERMed (see the module: what a SIGKILL can lose)."""
    from safeconsumer.testing import KafkaTestKit, wait_until

    from ..support import set_group_config

    assert isinstance(kit, KafkaTestKit)
    rng = random.Random(f"{seed}-{mode}")
    figures = Figures(mode)
    topic, dlt, group = kit.create_topic(partitions=PARTITIONS), kit.create_topic(), kit.name("share-soak")
    set_group_config(
        kit, group, share_record_lock_duration_ms=str(LOCK_MS), share_delivery_count_limit=str(DELIVERY_LIMIT)
    )
    processed: dict[Key, list[int]] = defaultdict(list)  # (partition, offset) -> pids, in order
    overrun: set[Key] = set()
    ended: dict[int, str] = {}
    live: list[Member] = []
    poison: set[Key] = set()
    produced: set[Key] = set()
    lock = threading.Lock()

    def read(proc: subprocess.Popen[str], stdout: IO[str]) -> None:
        for line in stdout:
            parts = line.split()
            with lock:
                if parts[:1] == ["P"]:
                    processed[(int(parts[2]), int(parts[3]))].append(int(parts[1]))
                elif parts[:1] == ["OVERRUN"]:
                    partition, first, last = map(int, parts[1:4])
                    overrun.update((partition, o) for o in range(first, last + 1))

    def start() -> None:
        args = [kit.bootstrap_servers, group, topic, dlt, mode, seed]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.soak.share", "--member", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        reader = threading.Thread(target=read, args=(proc, proc.stdout), daemon=True)
        reader.start()
        live.append(Member(proc, reader))
        figures.starts += 1

    def end(m: Member, how: str) -> None:
        m.proc.send_signal(signal.SIGKILL if how == "killed" else signal.SIGTERM)
        m.ended = how
        ended[m.proc.pid] = how
        if how == "killed":
            figures.kills += 1
        else:
            figures.terms += 1

    producing = threading.Event()
    producing.set()

    def produce() -> None:
        n = 0
        while producing.is_set():
            value = f"poison-{n}" if n % POISON_EVERY == POISON_EVERY - 1 else f"record-{n}"

            def delivered(err: object, msg: Message, value: str = value) -> None:
                if err is None:
                    with lock:
                        key = (msg.partition() or 0, msg.offset() or 0)
                        produced.add(key)
                        if value.startswith("poison"):
                            poison.add(key)

            kit.producer.produce(topic, value=value.encode(), partition=n % PARTITIONS, on_delivery=delivered)
            kit.producer.poll(0)
            n += 1
            time.sleep(1 / rate)
        kit.producer.flush(30)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        start()
        start()
        producer.start()
        end_at = time.monotonic() + seconds
        while time.monotonic() < end_at:
            time.sleep(rng.uniform(1.0, 3.0))
            alive = [m for m in live if not m.ended and m.proc.poll() is None]
            action = rng.random()
            if len(alive) < members and (action < 0.45 or len(alive) < 2):
                start()
            elif len(alive) > 1 and action < 0.75 and kills:
                end(rng.choice(alive), "killed")
            elif len(alive) > 1:
                end(rng.choice(alive), "terminated")
        producing.clear()
        producer.join(60)
        for m in live:
            if not m.ended and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGUSR1)  # calm: no more pauses or slow work
        start()
        start()  # the drainers (SIGUSR1 arrives before they read much: they may still be slow once)
        for m in live[-2:]:
            m.proc.send_signal(signal.SIGUSR1)

        def settled() -> bool:
            with lock:
                missing = [k for k in produced if k not in processed]
            if len(missing) > len(poison) + len(produced) // 10:
                return False  # far from done: the dead-letter topic is not read yet
            dead = _dead_letters(kit, dlt) if missing else set()
            return all(k in dead for k in missing)

        try:
            wait_until(settled, timeout=120, what="every record processed or dead-lettered", interval=2.0)
        except Exception as exc:  # noqa: BLE001 - reported as a failure, the figures still count
            figures.failures.append(str(exc))
    finally:
        producing.clear()
        for m in live:
            if not m.ended and m.proc.poll() is None:
                end(m, "terminated")
                figures.terms -= 1  # the final stop is not chaos
                ended.pop(m.proc.pid, None)
                m.ended = "final"
        for m in live:
            try:
                m.proc.wait(30)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(10)
                figures.failures.append(f"member {m.proc.pid} hung at SIGTERM")
            code = m.proc.returncode
            if m.ended in ("final", "terminated") and code != 0:
                figures.failures.append(f"member {m.proc.pid} exited {code} at SIGTERM")
            m.reader.join(5)
            if m.proc.stdout is not None:
                m.proc.stdout.close()
    dead = _dead_letters(kit, dlt)
    with lock:
        figures.produced, figures.poison = len(produced), len(poison)
        figures.processed = sum(len(p) for p in processed.values())
        figures.dead_lettered = len(dead)
        figures.overruns = len(overrun)
        figures.lost = sorted(k for k in produced if k not in processed and k not in dead)
        figures.poison_missing = sorted(k for k in poison if k not in dead)
        for key, pids in processed.items():
            if len(pids) < 2:
                continue
            figures.doubles += 1
            if key not in overrun and not any(p in ended for p in pids[:-1]):
                figures.unexplained.append(key)
        figures.unexplained.sort()
    return figures


def _dead_letters(kit: object, dlt: str) -> set[Key]:
    """The origins (partition, offset) of every record in the dead-letter topic."""
    from safeconsumer.testing import KafkaTestKit, unique_name

    assert isinstance(kit, KafkaTestKit)
    end = kit.end_offsets(dlt).get(0, 0)
    if not end:
        return set()
    c = Consumer({**kit.client_config, "group.id": unique_name("soak-dlt"), "auto.offset.reset": "earliest"})
    got: set[Key] = set()
    try:
        c.subscribe([dlt])
        deadline, seen = time.monotonic() + 30, 0
        while seen < end and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    seen += 1
                    h: dict[str, bytes] = dict(m.headers() or [])  # type: ignore[arg-type]
                    got.add((int(h["safeconsumer.dlt.original.partition"]), int(h["safeconsumer.dlt.original.offset"])))
    finally:
        c.close()
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--member", nargs=6, metavar=("BOOTSTRAP", "GROUP", "TOPIC", "DLT", "MODE", "SEED"))
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--mode", nargs="+", default=["implicit", "explicit"])
    parser.add_argument("--seed", default="share")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--no-kills", action="store_true", help="SIGTERM members only")
    args = parser.parse_args(argv)
    if args.member:
        member(*args.member)
        return 0
    from safeconsumer.testing import KafkaTestKit, start_broker

    passed = True
    with start_broker() as broker:
        for mode in args.mode:
            kit = KafkaTestKit(broker.bootstrap_servers, prefix=f"share-soak-{mode}")
            try:
                figures = run_share_soak(
                    kit, mode, seconds=args.seconds, seed=args.seed, rate=args.rate, kills=not args.no_kills
                )
            finally:
                kit.close()
            print(figures.report(), flush=True)
            passed = passed and figures.passed
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
