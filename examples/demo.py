"""``make demo``: each incident the project was born from, raw confluent-kafka vs SafeConsumer.

Starts real Kafka brokers (see ``safeconsumer.testing``), runs every scenario twice - once with
``confluent_kafka.Consumer``, once with ``SafeConsumer``, the same application code with the
import changed - and prints a table of what each did, measured; then the share-group scenarios
(``examples/demo_share.py``), raw ``ShareConsumer`` against ``SafeShareConsumer``, in a second
table. Then runs the Spark pipeline example (consumer-group and share-group tasks). Exits non-zero
if SafeConsumer or SafeShareConsumer misbehaves in any row.

Scenarios use the classic cooperative-sticky protocol (incremental rebalances, the common
production choice); the test suite covers range and KIP-848 as well.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from safeconsumer import AuthenticationFailedError, FatalConsumerError, SafeConsumer
from safeconsumer.testing import Broker, KafkaTestKit, Protocol, start_broker

Make = Callable[..., Consumer]
PROTOCOL: Protocol = "cooperative-sticky"
ROOT = Path(__file__).resolve().parents[1]


def _say(text: str) -> None:
    print(text, flush=True)


@dataclass
class Row:
    scenario: str
    raw: str
    safe: str
    safe_ok: bool


def _poll_for(members: list[Consumer], seconds: float, sink: Callable[[Consumer, Message], None]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in members:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                sink(c, m)


def _poll_until(members: list[Consumer], cond: Callable[[], bool], seconds: float, sink: Any = None) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        for c in members:
            m = c.poll(0.05)
            if sink is not None and m is not None and m.error() is None:
                sink(c, m)
    return cond()


def _owns_all(c: Consumer, n: int) -> bool:
    return len(_keys(c)) == n


def _keys(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


# -- 1. topic pause across a rebalance --------------------------------------------------------
def topic_pause_across_rebalance(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A pauses topic T while B owns half of it; B leaves. Does A receive records of T?"""
    topic = kit.create_topic(partitions=4)
    group = kit.name("g")
    a, b = make(kit.consumer_conf(group, PROTOCOL)), make(kit.consumer_conf(group, PROTOCOL))
    a.subscribe([topic])
    b.subscribe([topic])
    _poll_until([a, b], lambda: len(_keys(a)) == 2 == len(_keys(b)), 45)
    if isinstance(a, SafeConsumer):
        a.pause_topics([topic])
    else:
        a.pause(a.assignment())  # the only pause the raw client offers
    b.close()
    _poll_until([a], lambda: len(_keys(a)) == 4, 45)
    kit.produce(topic, 400, partitions=4)
    leaked = 0

    def count(_c: Consumer, _m: Message) -> None:
        nonlocal leaked
        leaked += 1

    _poll_for([a], 4.0, count)
    a.close()
    return f"{leaked} records of the paused topic delivered", leaked == 0


# -- 1b. the same with kafka-python's API -------------------------------------------------------
def kafka_python_topic_pause(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """Row 1 written against kafka-python's API: ``kafka.KafkaConsumer`` (raw column) against
    ``safeconsumer.kafka_python.KafkaConsumer``, the same code with the import changed."""
    import kafka

    from safeconsumer.kafka_python import KafkaConsumer

    ours = make is SafeConsumer
    cls: Any = KafkaConsumer if ours else kafka.KafkaConsumer
    topic = kit.create_topic(partitions=4)
    group = kit.name("g")
    conf = {
        "bootstrap_servers": kit.bootstrap_servers,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "api_version": (4, 0, 0),
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
    }
    a, b = cls(**conf), cls(**conf)
    a.subscribe([topic])
    b.subscribe([topic])
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and not (len(a.assignment()) == 2 == len(b.assignment())):
        a.poll(timeout_ms=50)
        b.poll(timeout_ms=50)
    if ours:
        a.pause_topics(topic)
    else:
        a.pause(*a.assignment())  # kafka-python pauses partitions only
    b.close()
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and len(a.assignment()) != 4:
        a.poll(timeout_ms=50)
    kit.produce(topic, 400, partitions=4)
    leaked = 0
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        leaked += sum(len(records) for records in a.poll(timeout_ms=50).values())
    a.close()
    return f"{leaked} records of the paused topic delivered", leaked == 0


# -- 1c. a poison record among 100 --------------------------------------------------------------
def poison_record(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """100 records, one of which the value deserializer refuses. Raw: DeserializingConsumer, and the
    application catches the error and goes on (the usual loop). Ours: SafeDeserializingConsumer with
    a dead-letter policy. Where does the poison record end up?"""
    from confluent_kafka import DeserializingConsumer
    from confluent_kafka.error import ValueDeserializationError

    from safeconsumer import DeadLetter, SafeDeserializingConsumer

    def strict(data: bytes | None, _ctx: Any) -> str:
        if not data or not data.isdigit():
            raise ValueError("not a number")
        return data.decode()

    topic, dlt, group = kit.create_topic(), kit.create_topic(), kit.name("g")
    for i in range(100):
        kit.producer.produce(topic, value=b"{not json" if i == 37 else str(i).encode(), partition=0)
    kit.producer.flush(30)
    conf = {**kit.consumer_conf(group, PROTOCOL), "value.deserializer": strict}
    ours = make is SafeConsumer
    c: Any = SafeDeserializingConsumer(conf, poison=DeadLetter(dlt)) if ours else DeserializingConsumer(conf)
    c.subscribe([topic])
    processed, caught = 0, 0
    deadline = time.monotonic() + 45
    while processed + caught < 100 and time.monotonic() < deadline:
        try:
            msg = c.poll(0.2)
        except ValueDeserializationError:
            caught += 1  # the usual application: log it and go on
            continue
        if msg is not None and msg.error() is None:
            processed += 1
    c.close()
    committed = kit.committed(group, topic, 1)[0]
    dead = Consumer({**kit.client_config, "group.id": kit.name("r"), "auto.offset.reset": "earliest"})
    dead.assign([TopicPartition(dlt, 0, 0)])
    found: list[Message] = []
    while time.monotonic() < deadline + 10 and not found:
        found += [m for m in dead.consume(10, 0.5) if m.error() is None]
    dead.close()
    if not ours:
        return f"{processed} processed; the poison record raised, was caught and is gone (committed {committed})", False
    headers: dict[str, Any] = dict(found[0].headers() or []) if found else {}
    where = bytes(headers.get("safeconsumer.dlt.original.offset", b"?")).decode()
    ok = processed == 99 and committed == 100 and len(found) == 1
    return (
        f"{processed} processed; the poison record (offset {where}) in the dead-letter topic; committed {committed}",
        ok,
    )


# -- 2. stale pause after revoke and re-assign ---------------------------------------------------
def stale_pause(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A pauses both partitions; B joins (takes M) and leaves; A resumes the one it kept. Is M consumed?"""
    topic = kit.create_topic(partitions=2)
    group = kit.name("g")
    a = make(kit.consumer_conf(group, PROTOCOL))
    a.subscribe([topic])
    _poll_until([a], lambda: len(_keys(a)) == 2, 45)
    a.pause(a.assignment())
    b = make(kit.consumer_conf(group, PROTOCOL))
    b.subscribe([topic])
    _poll_until([a, b], lambda: len(_keys(a)) == 1 == len(_keys(b)), 45)
    (moved,) = b.assignment()
    (stayed,) = a.assignment()
    b.close()
    _poll_until([a], lambda: len(_keys(a)) == 2, 45)
    # M left A and came back: its old pause should be gone. A resumes what it kept paused.
    a.resume([TopicPartition(topic, stayed.partition)])
    kit.produce(topic, 100, partitions=[moved.partition])
    got = 0

    def count(_c: Consumer, m: Message) -> None:
        nonlocal got
        got += m.partition() == moved.partition

    _poll_until([a], lambda: got >= 100, 6.0, count)
    a.close()
    return f"{got}/100 records of the returned partition consumed", got == 100


# -- 3. records of a paused partition around a rebalance ------------------------------------------
def paused_records_after_rebalance(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A pauses P with records fetched; a peer joins and leaves. Does A return records of P?

    The assignor may move P to the peer; a partition that leaves and comes back returns
    unpaused (SPEC, I4), so A pauses P again whenever it is assigned P: any record of P that
    A returns after the first pause is one it should not have seen.
    """
    topic = kit.create_topic(partitions=2)
    kit.produce(topic, 2000, partitions=2)
    group = kit.name("g")
    a = make(kit.consumer_conf(group, PROTOCOL))
    paused: list[TopicPartition] = []

    def pause_again(c: Consumer, partitions: list[TopicPartition]) -> None:
        if paused and any((tp.topic, tp.partition) == (topic, paused[0].partition) for tp in partitions):
            c.pause(paused)

    a.subscribe([topic], on_assign=pause_again)
    first: list[Message] = []
    _poll_until([a], lambda: bool(first), 45, lambda _c, m: first.append(m))
    p = TopicPartition(topic, first[0].partition() or 0)
    a.pause([p])
    paused.append(p)
    leaked = 0

    def count(_c: Consumer, m: Message) -> None:
        nonlocal leaked
        leaked += m.partition() == p.partition

    b = make(kit.consumer_conf(group, PROTOCOL))
    b.subscribe([topic])
    _poll_until([a, b], lambda: bool(_keys(b)), 45, lambda c, m: count(c, m) if c is a else None)
    b.close()
    _poll_for([a], 3.0, count)
    a.close()
    return f"{leaked} records of the paused partition returned", leaked == 0


# -- 4. long processing vs max.poll.interval.ms ----------------------------------------------------
def long_processing(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A works 10 s (3 x max.poll.interval.ms) on a record without polling; B keeps polling."""
    topic = kit.create_topic(partitions=2)
    kit.produce(topic, 200, partitions=2)
    group = kit.name("g")
    conf = kit.consumer_conf(group, PROTOCOL, max_poll_interval_ms=3000, session_timeout_ms=3000)
    changes = 0

    def on_change(_c: Any, partitions: list[TopicPartition]) -> None:
        nonlocal changes
        changes += bool(partitions)  # librdkafka may also call back with nothing to change

    a, b = make(conf), make(conf)
    a.subscribe([topic])
    b.subscribe([topic], on_assign=on_change, on_revoke=on_change)
    got: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}

    def sink(c: Consumer, m: Message) -> None:
        got["a" if c is a else "b"].append((m.partition() or 0, m.offset() or 0))

    _poll_until([a, b], lambda: bool(_keys(a)) and bool(_keys(b)), 45, sink)
    _poll_until([a, b], lambda: len(got["a"]) + len(got["b"]) >= 200, 30, sink)
    _poll_for([a, b], 1.0, sink)  # let the group settle
    changes = 0
    kit.produce(topic, 200, partitions=2)
    before = len(got["a"])
    _poll_until([a], lambda: len(got["a"]) > before, 10, sink)
    # The long work: A does not poll for 10 s (it waits here on its "work"); B polls throughout.
    _poll_for([b], 10.0, sink)
    evicted = False
    try:
        m = a.poll(1.0)
        evicted = m is not None and m.error() is not None and m.error().code() == KafkaError._MAX_POLL_EXCEEDED  # type: ignore[union-attr]
    except KafkaException:
        evicted = True
    _poll_for([a, b], 3.0, sink)
    total = len(got["a"]) + len(got["b"])
    redone = total - len(set(got["a"] + got["b"]))
    callbacks = changes  # before close(), whose own revocations are not evictions
    evicted = evicted or callbacks > 0
    a.close()
    b.close()
    what = "evicted" if evicted else "stayed in the group"
    return f"{what}; {callbacks} rebalance callbacks at the peer; {redone} records redone", not evicted


# -- 5. a process dies while working on a consume() batch ------------------------------------------
def dies_mid_batch(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A worker takes a consume(100) batch, finishes 10, dies on the 11th. Who gets the other 90?"""
    topic = kit.create_topic(partitions=1)
    kit.produce(topic, 200, partitions=1)
    group = kit.name("g")
    kind = "safe" if isinstance(make, type) and issubclass(make, SafeConsumer) else "raw"
    args = [kind, kit.bootstrap_servers, topic, group, PROTOCOL]
    worker = subprocess.run(
        [sys.executable, "-m", "examples.batch_worker", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )
    fields = worker.stdout.split()
    if worker.returncode != 1 or len(fields) < 2 or fields[0] != "U":
        return f"the worker did not get a batch of more than 10 records (exit {worker.returncode})", False
    unfinished = {int(o) for o in fields[1:]}
    # A fresh consumer in the group (the dead worker's session has to time out first) reads to the end.
    nxt = make(kit.consumer_conf(group, PROTOCOL))
    nxt.subscribe([topic])
    got: set[int] = set()
    reached_end = _poll_until([nxt], lambda: 199 in got, 45, lambda _c, m: got.add(m.offset()))
    nxt.close()
    if not reached_end:
        return f"the next owner did not read to the end within 45 s ({len(got)} records)", False
    skipped = len(unfinished - got)
    if skipped:
        return f"skips {skipped} of {len(unfinished)} unfinished records", False
    return f"0 skipped: the next owner gets all {len(unfinished)} unfinished records", True


# -- 6. one group id shared by two applications ----------------------------------------------------
class _CauseLines(logging.Handler):
    """Collects SafeConsumer's rebalance-cause lines of one group (INFO, logger ``safeconsumer``)."""

    def __init__(self, group: str) -> None:
        super().__init__(logging.INFO)
        self.prefix = f"rebalance of group {group!r}"
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.lines.append(record.getMessage())


def shared_group_id(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """Apps A (orders) and B (invoices) share one group id; B restarts twice. What does A see?"""
    orders, invoices = kit.create_topic(partitions=2), kit.create_topic(partitions=2)
    group = kit.name("g")
    changes = 0

    def on_change(_c: Any, partitions: list[TopicPartition]) -> None:
        nonlocal changes
        changes += 1  # one per rebalance A takes part in, also when its own partitions stay

    causes = _CauseLines(group)
    log = logging.getLogger("safeconsumer")
    level, propagate = log.level, log.propagate
    log.addHandler(causes)
    log.setLevel(logging.INFO)
    log.propagate = False  # the demo prints its table, not the log
    try:
        a = make({**kit.consumer_conf(group, PROTOCOL), "client.id": "orders-app"})
        a.subscribe([orders], on_assign=on_change, on_revoke=on_change)
        _poll_until([a], lambda: len(_keys(a)) == 2, 45)
        _poll_for([a], 1.0, lambda _c, _m: None)
        changes = 0  # A's own join is not the incident
        doctor = ""
        for deploy in range(2):  # B deploys: starts, then stops
            b = make({**kit.consumer_conf(group, PROTOCOL), "client.id": "billing-app"})
            b.subscribe([invoices])
            _poll_until([a, b], functools.partial(_owns_all, b, 2), 45)
            _poll_for([a, b], 2.0, lambda _c, _m: None)  # the rebalance settles and is explained
            if deploy == 1:
                doctor = _run_doctor(kit.bootstrap_servers, group, [a, b])
            b.close()
            _poll_for([a], 3.0, lambda _c, _m: None)
        suffered = changes
        a.close()
    finally:
        log.removeHandler(causes)
        log.setLevel(level)
        log.propagate = propagate
    if not isinstance(a, SafeConsumer):
        return f"A rebalanced {suffered} times (callbacks) while B restarted twice; no cause given", True
    named = [line for line in causes.lines if "peer" in line and "client.id billing-app" in line]
    found = '"shared_group_id"' in doctor
    ok = len(named) >= 4 and found  # B joined twice and left twice: each one named
    return (
        f"A rebalanced {suffered} times; {len(named)} logged with a cause naming billing-app; "
        f"doctor: {'shared_group_id' if found else 'no finding'}"
    ), ok


def _run_doctor(bootstrap: str, group: str, members: list[Consumer]) -> str:
    """``safeconsumer doctor --json`` on the group, while its members keep polling: its output."""
    command = [sys.executable, "-m", "safeconsumer", "doctor", "--bootstrap-servers", bootstrap]
    child = subprocess.Popen(
        [*command, "--group", group, "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _poll_until(members, lambda: child.poll() is not None, 60)
    out, _ = child.communicate(timeout=10)
    return out if child.returncode == 1 else ""


# -- 7. fetch memory of several consumers in one process ----------------------------------------------
def fetch_memory(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """Three consumers in one process, 300 kB records: how much do their fetch buffers take?"""
    from examples import fetch_memory as example

    # Both kinds are measured in alternating rounds, once (when the raw row is asked for): one
    # sample each, in order, told nothing (RSS growth moved by tens of MiB between runs).
    if make is not SafeConsumer or not _FETCH_MEMORY:
        _FETCH_MEMORY.clear()
        _FETCH_MEMORY.update(example.measure_rounds(kit, example.flood(kit)))
    kind = "safe" if make is SafeConsumer else "raw"
    return example.describe(_FETCH_MEMORY[kind], kind)


_FETCH_MEMORY: dict[str, list[dict[str, Any]]] = {}


# -- 8. GROUP_MAX_SIZE_REACHED -----------------------------------------------------------------------
def group_full(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A third member joins a group at group.max.size=2. How long until it fails?"""
    topic = kit.create_topic(partitions=3)
    group = kit.name("g")
    members = [make(kit.consumer_conf(group, PROTOCOL)) for _ in range(2)]
    for m in members:
        m.subscribe([topic])
    _poll_until(members, lambda: all(_keys(m) for m in members), 45)
    third = make(kit.consumer_conf(group, PROTOCOL))
    third.subscribe([topic])
    started = time.monotonic()
    errors = 0
    failed_after: float | None = None
    while time.monotonic() - started < 10 and failed_after is None:
        for m in members:
            m.poll(0.02)
        try:
            msg = third.poll(0.1)
            if msg is not None and msg.error() is not None:
                errors += 1
        except FatalConsumerError:
            failed_after = time.monotonic() - started
    for m in [*members, third]:
        m.close()
    if failed_after is None:
        return f"still retrying after 10 s ({errors} error events)", False
    return f"failed with GroupMaxSizeReachedError after {failed_after:.1f} s", True


def wrong_password(kit: KafkaTestKit, make: Make) -> tuple[str, bool]:
    """A consumer of a SASL_SSL cluster given a wrong password. What does it tell within 15 s?"""
    conf = {**kit.consumer_conf(kit.name("g"), PROTOCOL), "sasl.password": "not-the-password"}
    c = make(conf)
    c.subscribe(["orders"])
    started = time.monotonic()
    events = 0
    try:
        while time.monotonic() - started < 15:
            if c.poll(0.2) is not None:
                events += 1
    except AuthenticationFailedError as exc:
        took = time.monotonic() - started
        named = "invalid credentials" in str(exc)
        return f"AuthenticationFailedError after {took:.1f} s{', naming invalid credentials' if named else ''}", named
    finally:
        c.close()
    return f"poll() returned {events} events in 15 s: nothing says the password is wrong", False


SCENARIOS: list[tuple[str, Callable[[KafkaTestKit, Make], tuple[str, bool]]]] = [
    ("topic paused, then a rebalance", topic_pause_across_rebalance),
    ("kafka-python API (raw column: kafka.KafkaConsumer): topic paused, then a rebalance", kafka_python_topic_pause),
    ("stale pause after revoke/re-assign", stale_pause),
    ("one poison record among 100 (raw column: DeserializingConsumer)", poison_record),
    ("paused partition's records after rebalance", paused_records_after_rebalance),
    ("processing > max.poll.interval.ms", long_processing),
    ("process dies while working on a consume() batch (auto-commit defaults)", dies_mid_batch),
    ("one group id shared by two applications (B restarts twice)", shared_group_id),
    ("fetch memory: 3 consumers in one process, 300 kB records", fetch_memory),
]


def _table(rows: list[Row], raw: str = "raw confluent_kafka.Consumer", safe: str = "SafeConsumer") -> str:
    cells = [("scenario", raw, safe, "")]
    cells += [(r.scenario, r.raw, r.safe, "ok" if r.safe_ok else "FAIL") for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(4)]

    def line(row: tuple[str, str, str, str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])


def _row(title: str, scenario: Callable[[Any], tuple[str, bool]], raw_class: type, safe_class: type) -> Row:
    """One scenario with the raw class, then with ours (said as it goes); the row judges ours."""
    _say(f"- {title}: raw confluent_kafka.{raw_class.__name__} ...")
    raw, _ = scenario(raw_class)
    _say(f"    {raw}")
    _say(f"- {title}: {safe_class.__name__} ...")
    safe, ok = scenario(safe_class)
    _say(f"    {safe}")
    return Row(title, raw, safe, ok)


def run(bootstrap: str, full_group_bootstrap: str, secured: Broker | None = None) -> list[Row]:
    """Every scenario, raw then SafeConsumer; the wrong-password one needs ``secured`` (a SASL_SSL broker)."""
    rows: list[Row] = []
    kit = KafkaTestKit(bootstrap, prefix="demo")
    full = KafkaTestKit(full_group_bootstrap, prefix="demo-full")
    sasl = (
        KafkaTestKit(secured.bootstrap_servers, prefix="demo-sasl", client_config=secured.client_config)
        if secured is not None
        else None
    )
    scenarios = [*SCENARIOS, ("GROUP_MAX_SIZE_REACHED", group_full)]
    if sasl is not None:
        scenarios.append(("wrong password on a SASL_SSL cluster", wrong_password))
    try:
        for title, scenario in scenarios:
            target = full if scenario is group_full else sasl if scenario is wrong_password and sasl else kit
            rows.append(_row(title, functools.partial(scenario, target), Consumer, SafeConsumer))
    finally:
        kit.close()
        full.close()
        if sasl is not None:
            sasl.close()
    return rows


def run_share(bootstrap: str) -> list[Row]:
    """The share-group scenarios (``examples/demo_share.py``), raw ShareConsumer then SafeShareConsumer."""
    from confluent_kafka import ShareConsumer

    from examples import demo_share
    from safeconsumer import SafeShareConsumer

    rows: list[Row] = []
    kit = KafkaTestKit(bootstrap, prefix="demo-share")
    try:
        for title, scenario in demo_share.SCENARIOS:
            rows.append(_row(title, functools.partial(scenario, kit), ShareConsumer, SafeShareConsumer))
    finally:
        kit.close()
    return rows


def main() -> int:
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    # The raw kafka-python column's own failed commits (a traceback each): its row reports the outcome.
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    _say(
        "starting three embedded Kafka brokers (the second with group.max.size=2, the third SASL_SSL); "
        "the first run resolves jars ..."
    )
    started = time.monotonic()
    limits = {"group.max.size": "2", "group.consumer.max.size": "2"}
    with start_broker() as broker, start_broker(limits) as small, start_broker(security="sasl_ssl") as secured:
        _say(f"brokers ready in {time.monotonic() - started:.1f}s; each scenario runs raw, then with SafeConsumer")
        rows = run(broker.bootstrap_servers, small.bootstrap_servers, secured)
        _say("share groups (KIP-932): each scenario runs raw, then with SafeShareConsumer")
        share_rows = run_share(broker.bootstrap_servers)
    _say("")
    _say(_table(rows))
    _say("")
    _say(_table(share_rows, "raw confluent_kafka.ShareConsumer", "SafeShareConsumer"))
    _say("")
    from examples import spark_pipeline

    _say("Spark: foreachPartition tasks as consumer-group and as share-group members (safeconsumer.spark) ...")
    spark_status = spark_pipeline.main([])
    bad = [r.scenario for r in rows + share_rows if not r.safe_ok]
    if bad or spark_status:
        _say(f"SafeConsumer misbehaved: {bad or 'spark pipeline'}")
        return 1
    _say("SafeConsumer and SafeShareConsumer held in every row.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
