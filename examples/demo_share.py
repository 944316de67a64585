"""``make demo``'s share-group rows: raw ``confluent_kafka.ShareConsumer`` against ``SafeShareConsumer``.

Each scenario runs twice on the same broker, the same application code with the class changed
(and the SafeShareConsumer options the row is about), and reports what happened, measured:

- a new share group subscribes to a topic that already holds records;
- a member works on one record longer than the group's acquisition lock;
- a record the application cannot process reaches the group's delivery count limit;
- members SIGKILLed holding records, the second on their last delivery (Kafka 4.4: the raw group as
  teams run it today, without a dead-letter queue; ours with ``group_dlq=True``, the group's DLQ in
  the broker, which copies what it archives even when no member is alive).

    python -m examples.demo_share --member BOOTSTRAP TOPIC GROUP [--dlq TOPIC]

is the SIGKILL row's member process: it takes one batch, says so, and works on it until killed.

The Spark row (share tasks against consumer-group tasks on one partition) is printed by
``examples/spark_pipeline.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer

from safeconsumer import DeadLetter, SafeShareConsumer
from safeconsumer.share import LockExpiredError
from safeconsumer.testing import KafkaTestKit

#: A share scenario: given the broker's kit and the class, what happened and whether it held.
Scenario = Callable[[KafkaTestKit, type[ShareConsumer]], tuple[str, bool]]


#: librdkafka's own lines of the demo's consumers (the share consumer's Preview notice, ...).
LIBRDKAFKA_LOG = logging.getLogger("examples.demo_share.librdkafka")


def _conf(kit: KafkaTestKit, group: str, mode: str = "implicit") -> dict[str, Any]:
    return {**kit.client_config, "group.id": group, "share.acknowledgement.mode": mode, "logger": LIBRDKAFKA_LOG}


def _records(c: ShareConsumer, timeout: float = 0.5) -> list[Message]:
    return [m for m in c.poll(timeout) if m.error() is None]


def new_group_on_existing_records(kit: KafkaTestKit, make: type[ShareConsumer]) -> tuple[str, bool]:
    """A new share group on a topic holding 100 records; one more is produced once the member reads."""
    topic, group = kit.create_topic(partitions=1), kit.name("g")
    kit.produce(topic, 100, partitions=1)
    conf = _conf(kit, group)
    c = SafeShareConsumer(conf, start="earliest") if make is SafeShareConsumer else make(conf)
    c.subscribe([topic])
    got: set[int] = set()
    produced, last = 100, 0.0
    end = time.monotonic() + 60
    while time.monotonic() < end and not any(o >= 100 for o in got):
        got.update(m.offset() or 0 for m in _records(c))
        if time.monotonic() - last > 2:  # a live record, until the member is seen reading
            kit.produce(topic, 1, partitions=[0], start=produced)
            produced, last = produced + 1, time.monotonic()
    c.close()
    old = len([o for o in got if o < 100])
    if make is SafeShareConsumer:
        return f"start='earliest': read {old} of the 100 records already there, then the live ones", old == 100
    return f"read {old} of the 100 records already there, only the live ones; nothing said", old == 100


def long_work_past_the_lock(kit: KafkaTestKit, make: type[ShareConsumer]) -> tuple[str, bool]:
    """The group's lock is 2 s; member A works 3 s on the first of its 10 records while B polls."""
    topic, group = kit.create_topic(partitions=1), kit.name("g")
    kit.set_group_config(group, {"share.record.lock.duration.ms": "2000", "share.auto.offset.reset": "earliest"})
    kit.produce(topic, 10, partitions=1)
    a, b = make(_conf(kit, group)), make(_conf(kit, group))
    a.subscribe([topic])
    done_a: list[int] = []
    done_b: list[int] = []
    end = time.monotonic() + 60
    batch: Any = []
    while time.monotonic() < end and not batch:
        batch = a.poll(0.5)
    b.subscribe([topic])
    for i, m in enumerate(batch):
        if i == 0:  # the long work: B polls (and processes what it gets) meanwhile
            work_end = time.monotonic() + 3.0
            while time.monotonic() < work_end:
                done_b.extend(m.offset() or 0 for m in _records(b, 0.2))
        done_a.append(m.offset() or 0)
    answer = a.commit_sync(10)
    told = "LockExpiredError" if any(isinstance(e, LockExpiredError) for e in (answer or {}).values()) else "success"
    settle = time.monotonic() + 4
    while time.monotonic() < settle:
        done_b.extend(m.offset() or 0 for m in _records(b, 0.2))
    a.close()
    b.close()
    twice = len(set(done_a) & set(done_b))
    missed = 10 - len(set(done_a) | set(done_b))
    return f"{twice} of 10 records processed twice, {missed} by nobody; A's commit_sync told {told}", (
        twice <= 1 and missed == 0 and (twice == 0 or told == "LockExpiredError")
    )


def poison_past_the_delivery_limit(kit: KafkaTestKit, make: type[ShareConsumer]) -> tuple[str, bool]:
    """The group's delivery limit is 2; the application cannot process one of 10 records."""
    topic, dlq, group = kit.create_topic(partitions=1), kit.create_topic(), kit.name("g")
    kit.set_group_config(group, {"share.delivery.count.limit": "2", "share.auto.offset.reset": "earliest"})
    for i in range(10):
        kit.producer.produce(topic, value=b"poison" if i == 4 else str(i).encode(), partition=0)
    kit.producer.flush(30)
    safe = make is SafeShareConsumer

    def process(m: Message) -> None:
        if m.value() == b"poison":
            raise ValueError("cannot process this record")

    conf = _conf(kit, group, "explicit")
    c = SafeShareConsumer(conf, poison=DeadLetter(dlq, retries=1, backoff=0.1)) if safe else make(conf)
    c.subscribe([topic])
    deliveries = 0
    quiet_since = time.monotonic()
    end = time.monotonic() + 60
    while time.monotonic() < end and time.monotonic() - quiet_since < 5:
        batch = _records(c)
        if batch:
            quiet_since = time.monotonic()
        for m in batch:
            deliveries += m.value() == b"poison"
            if isinstance(c, SafeShareConsumer):
                c.handle(m, process)  # acknowledges: ACCEPT, or REJECT once the policy dead-lettered it
                continue
            try:  # the raw application: a record it cannot process goes back to the group
                process(m)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            except ValueError:
                c.acknowledge(m, AcknowledgeType.RELEASE)
        if batch:
            with contextlib.suppress(KafkaException):  # what it says is not this row's point
                c.commit_sync(10)
    c.close()
    copies = kit.end_offsets(dlq).get(0, 0)
    where = f"{copies} copy in the dead-letter topic" if copies else "archived by the broker: no copy, nothing logged"
    return f"poison handed out {deliveries} time(s); {where}", copies == 1


def sigkill_on_the_last_delivery(kit: KafkaTestKit, make: type[ShareConsumer]) -> tuple[str, bool]:
    """Lock 2 s, delivery limit 2: a member takes 5 records and is SIGKILLed, the next takes them on
    their last delivery and is SIGKILLed too. Who keeps a copy of the 5 the broker archives?"""
    topic, group = kit.create_topic(partitions=1), kit.name("g")
    dlq = f"dlq.{kit.name('d')}"
    kit.create_topic(dlq, config={"errors.deadletterqueue.group.enable": "true"})
    kit.set_group_config(
        group,
        {
            "share.record.lock.duration.ms": "2000",
            "share.delivery.count.limit": "2",
            "share.auto.offset.reset": "earliest",
        },
    )
    for i in range(5):
        kit.producer.produce(topic, value=str(i).encode(), partition=0)
    kit.producer.flush(30)
    safe = make is SafeShareConsumer
    args = [sys.executable, "-m", "examples.demo_share", "--member", kit.bootstrap_servers, topic, group]
    for _ in range(2):
        member = subprocess.Popen([*args, *(["--dlq", dlq] if safe else [])], stdout=subprocess.PIPE, text=True)
        assert member.stdout is not None
        took = member.stdout.readline().strip()  # "took N": a batch in its hands, unacknowledged
        member.send_signal(signal.SIGKILL)
        member.wait(30)
        member.stdout.close()
        if not took.startswith("took"):
            return f"the member exited {member.returncode} before taking its batch", False
    end = time.monotonic() + 30
    copies = 0
    while time.monotonic() < end and copies < 5:  # the locks run out, the broker archives (and copies)
        copies = kit.end_offsets(dlq).get(0, 0)
        time.sleep(0.5)
    if safe:
        return f"{copies} of 5 archived records copied to {dlq} by the broker (group_dlq=True)", copies == 5
    return f"{copies} of 5 archived records copied: archived by the broker, nothing logged", copies == 5


def member(bootstrap: str, topic: str, group: str, dlq: str | None) -> int:
    """The SIGKILL row's member: one batch taken (explicit mode, unacknowledged), then work until killed."""
    conf = {**_conf_for(bootstrap, group), "share.acknowledgement.mode": "explicit"}
    c = SafeShareConsumer(conf, poison=DeadLetter(dlq), group_dlq=True) if dlq else ShareConsumer(conf)
    c.subscribe([topic])
    end = time.monotonic() + 60
    while time.monotonic() < end:
        batch = _records(c)
        if batch:
            print(f"took {len(batch)}", flush=True)
            time.sleep(120)  # the work, which a SIGKILL ends
    return 3


def _conf_for(bootstrap: str, group: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, "logger": LIBRDKAFKA_LOG}


SCENARIOS: list[tuple[str, Scenario]] = [
    ("a new share group on a topic holding records", new_group_on_existing_records),
    ("long work on a record past the group's lock (2 s)", long_work_past_the_lock),
    ("a record that cannot be processed, delivery limit 2", poison_past_the_delivery_limit),
    ("members SIGKILLed holding records on their last delivery", sigkill_on_the_last_delivery),
]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m examples.demo_share")
    parser.add_argument("--member", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "GROUP"), required=True)
    parser.add_argument("--dlq")
    options = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    bootstrap, topic, group = options.member
    sys.exit(member(bootstrap, topic, group, options.dlq))
