"""``ShareConsumeTask``'s run, outside Spark (``task.run()`` is what each Spark task calls), against
the real broker: several runs at once share one partition, each batch is acknowledged after the sink
returned, a sink that raises gives its batch back, a poison policy dead-letters what the sink still
refuses, and the bounds end every run. ``test_spark.py`` and ``test_spark_cluster.py`` run the same
task in Spark jobs.

The task acknowledges explicitly whatever mode the config names; the tests that depend on it run
with the application's config naming each mode.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Message

from safeconsumer import DeadLetter
from safeconsumer.health.dead_letters import read_dead_letters
from safeconsumer.spark import ShareConsumeTask, ShareTaskFigures
from safeconsumer.testing import KafkaTestKit

from ..support import produce_in_small_batches, set_group_config

MODES = ("implicit", "explicit")

pytestmark = pytest.mark.xdist_group("share-groups")


class Sink:
    """Keeps (partition, offset) of what it was handed; refuses a batch holding ``b"poison"``, or
    every batch once ``fail`` is set; waits ``delay`` seconds per batch."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.rows: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, records: list[Message]) -> None:
        time.sleep(self.delay)  # the sink's own work: a slow write
        if self.fail:
            raise RuntimeError("the sink is down")
        if any(m.value() == b"poison" for m in records):
            raise ValueError("the sink refuses this record")
        with self.lock:
            self.rows.extend((m.partition() or 0, m.offset() or 0) for m in records)


def _conf(kafka: KafkaTestKit, group: str, mode: str = "explicit") -> dict[str, Any]:
    """At most 10 records a poll (best effort: the broker hands out whole record batches)."""
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode, "max.poll.records": 10}


def _runs(tasks: list[ShareConsumeTask]) -> list[ShareTaskFigures | BaseException]:
    """Run the tasks side by side (threads, as Spark's Python workers would, each its own consumer)."""
    out: list[ShareTaskFigures | BaseException] = [RuntimeError("did not run")] * len(tasks)

    def one(i: int) -> None:
        try:
            out[i] = tasks[i].run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(tasks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not any(t.is_alive() for t in threads), "a run did not end"
    return out


def test_more_runs_than_partitions_share_the_backlog_and_stop_at_its_end(kafka: KafkaTestKit) -> None:
    """Two runs on a one-partition topic: both are handed records of it (no partition is anyone's),
    every record reaches a sink, each is accepted once, nothing is handed out twice; both stop at the
    end seen at start (not after ``idle_seconds``), and the next run finds nothing to do."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    produce_in_small_batches(kafka, topic, 600)
    sink = Sink(delay=0.05)
    conf = _conf(kafka, group)
    task = ShareConsumeTask(conf, [topic], sink, start="earliest", idle_seconds=60, max_seconds=120)
    started = time.monotonic()
    a, b = _runs([task, task])
    assert isinstance(a, ShareTaskFigures) and isinstance(b, ShareTaskFigures), (a, b)
    took = time.monotonic() - started
    both = a.merge(b)
    assert sorted(sink.rows) == [(0, o) for o in range(600)], "a record missing from the sink, or written twice"
    assert both.records == both.accepted == 600 and both.redelivered == 0 and both.lock_overruns == 0, both
    assert a.task_records[0] > 0 and b.task_records[0] > 0, f"one run had the partition to itself: {both}"
    assert took < 60, f"the runs waited for idle_seconds ({took:.0f} s): the end seen at start did not end them"

    again = ShareConsumeTask(conf, [topic], sink, idle_seconds=3, max_seconds=60).run()
    assert again.records == 0 and len(sink.rows) == 600, again


@pytest.mark.parametrize("mode", MODES)
def test_a_sink_that_raises_gives_the_batch_back_and_nothing_is_accepted_before_it_returned(
    kafka: KafkaTestKit, mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    produce_in_small_batches(kafka, topic, 30)
    conf = _conf(kafka, group, mode)
    with pytest.raises(RuntimeError, match="the sink is down"):
        ShareConsumeTask(conf, [topic], Sink(fail=True), start="earliest", max_seconds=60).run()
    # The refused batch went back at once (released, not left to run out its lock): the next run gets
    # every record, those of the refused batch on their second delivery.
    sink = Sink()
    second = ShareConsumeTask(conf, [topic], sink, max_seconds=60, idle_seconds=10).run()
    assert sorted(sink.rows) == [(0, o) for o in range(30)] and second.accepted == 30, second
    assert 1 <= second.redelivered <= 10 and second.task_seconds[0] < 20, second


@pytest.mark.parametrize("mode", MODES)
def test_a_record_the_sink_still_refuses_alone_is_dead_lettered_and_the_run_goes_on(
    kafka: KafkaTestKit, mode: str
) -> None:
    topic, dlq, group = kafka.create_topic(partitions=1), kafka.create_topic(), kafka.name("g")
    produce_in_small_batches(kafka, topic, 40, poison=17)
    sink = Sink()
    conf = _conf(kafka, group, mode)
    figures = ShareConsumeTask(conf, [topic], sink, start="earliest", poison=DeadLetter(dlq), max_seconds=60).run()
    assert sorted(sink.rows) == [(0, o) for o in range(40) if o != 17], "a good record lost, or the poison written"
    assert figures.dead_lettered == 1 and figures.accepted == 39 and figures.skipped == 0, figures
    assert kafka.end_offsets(dlq) == {0: 1}, "the poison record is not in the dead-letter topic"
    again = ShareConsumeTask(conf, [topic], Sink(), idle_seconds=3, max_seconds=60).run()
    assert again.records == 0, f"a record was left to the group: {again}"


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_record_whose_retries_outlast_the_lock_holds_none_of_its_neighbours(
    kafka: KafkaTestKit, mode: str
) -> None:
    """Lock 4 s, delivery limit 3, the sink refuses one record of 40 under a policy whose retries
    (backoff 1 s, doubling) cannot fit in the lock: the record goes back for redelivery (not counted
    accepted) and is dead-lettered on its last delivery; every other record reaches the sink once,
    and none reaches the dead-letter topic."""
    topic, dlq, group = kafka.create_topic(partitions=1), kafka.create_topic(), kafka.name("g")
    set_group_config(kafka, group, share_record_lock_duration_ms="4000", share_delivery_count_limit="3")
    produce_in_small_batches(kafka, topic, 40, poison=17)
    sink = Sink()
    conf = _conf(kafka, group, mode)
    policy = DeadLetter(dlq, retries=6, backoff=1.0)
    figures = ShareConsumeTask(conf, [topic], sink, start="earliest", poison=policy, max_seconds=90).run()
    assert sorted(sink.rows) == [(0, o) for o in range(40) if o != 17], "a good record lost or written twice"
    assert figures.dead_lettered == 1 and figures.accepted == 39, figures
    copies = read_dead_letters(kafka.client_config, dlq, 10)  # on its last delivery, and as it failed
    assert {view.original_offset for view, _ in copies} == {17}, "a good record in the dead-letter topic"
    assert [view.stage for view, _ in copies].count("process") == 1


def test_a_sink_outlasting_the_lock_is_counted_and_its_records_not_counted_accepted(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_record_lock_duration_ms="2000")
    kafka.produce(topic, 5, partitions=1)
    task = ShareConsumeTask(_conf(kafka, group), [topic], Sink(delay=3.0), start="earliest", max_records=1)
    figures = task.run()
    assert figures.records == 5 and figures.lock_overruns == 5 and figures.accepted == 0, figures


def test_the_bounds_end_a_run(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    empty = kafka.create_topic(partitions=1)
    conf = _conf(kafka, group)
    nothing = ShareConsumeTask(conf, [empty], Sink(), start="earliest").run()
    assert nothing.records == 0 and nothing.task_seconds[0] < 5, "a run over empty topics waited"
    produce_in_small_batches(kafka, topic, 100)
    capped = ShareConsumeTask(conf, [topic], Sink(), start="earliest", max_records=15).run()
    assert 15 <= capped.records < 100 and capped.accepted == capped.records, capped
    sink = Sink()
    rest = ShareConsumeTask(conf, [topic], sink, until_end=False, max_seconds=8, idle_seconds=3).run()
    assert rest.records == 100 - capped.records and rest.task_seconds[0] < 8, rest


def test_bad_config_is_refused_naming_it(kafka: KafkaTestKit) -> None:
    good = _conf(kafka, kafka.name("g"))
    sink = Sink()
    refused = [
        (ShareConsumeTask({**good, "no.such.property": "1"}, ["t"], sink), ValueError, r"no\.such\.property"),
        (ShareConsumeTask({**good, "auto.offset.reset": "earliest"}, ["t"], sink), ValueError, r"auto\.offset\.reset"),
        (ShareConsumeTask({"bootstrap.servers": "x:1"}, ["t"], sink), ValueError, r"group\.id"),
        (ShareConsumeTask(good, "t", sink), TypeError, "topics"),
        (ShareConsumeTask(good, ["^t.*"], sink), ValueError, "no patterns"),
        (ShareConsumeTask(good, ["t"], "not callable"), TypeError, "sink"),  # type: ignore[arg-type]
        (ShareConsumeTask(good, ["t"], sink, start="middle"), ValueError, "start"),
        (ShareConsumeTask(good, ["t"], sink, max_records=0), ValueError, "max_records"),
        (ShareConsumeTask(good, ["t"], sink, idle_seconds=0), ValueError, "idle_seconds"),
        (ShareConsumeTask(good, ["t"], sink, until_end=False, max_seconds=None), ValueError, "unbounded"),
        (ShareConsumeTask(good, ["t"], sink, max_seconds=None), ValueError, "needs max_seconds"),
        (ShareConsumeTask(good, ["t"], sink, poison="skip"), TypeError, "poison"),  # type: ignore[arg-type]
    ]
    for task, error, match in refused:
        with pytest.raises(error, match=match):
            task.validate()
    ShareConsumeTask(good, ["t"], sink).validate()
    assert "s3cret" not in repr(ShareConsumeTask({**good, "sasl.password": "s3cret"}, ["t"], sink))
