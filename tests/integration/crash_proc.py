"""A group member that dies in the middle of its work, run as its own process (I8).

    python -m tests.integration.crash_proc BOOTSTRAP TOPIC GROUP PROTOCOL MODE [--raw] [--batch N] [--nth N]

It subscribes to TOPIC with the default offset store and auto-commit (every 100 ms, so several
commits run while it works) and ends with ``os._exit(0)``: no close(), no final commit, like a
process killed by the OOM killer. The time.sleep calls below are the simulated work on a record
the process never finishes. What it does first depends on MODE:

- ``consume``: ``consume(BATCH)`` until it gets a whole batch, finishes its first 10 records
  and dies while working on the 11th;
- ``poll``: polls record by record, finishing each, and dies while working on its NTH record.
  Before that record it prints ``I`` once it has finished NTH - 1 records and a poll came back
  empty, then does other work for a second: the test produces more meanwhile, so its next
  poll() finds the NTH record with others behind it, all fetched at once;
- ``keepalive``: like ``consume``, but the work on the 11th record happens inside
  ``keepalive()`` (long enough for the keeper to poll and auto-commit), where it dies;
- ``revoke``: like ``keepalive``, but it prints ``K`` inside the block and keeps working until
  a rebalance (a peer the test starts) has taken some of its partitions - the keeper thread
  serves that rebalance while the batch is still unfinished (work longer than three quarters of
  ``max.poll.interval.ms``, 6 s here) - then works on and dies;
- ``aio``, ``aio-keepalive``: ``consume`` and ``keepalive`` with ``SafeAIOConsumer`` in an
  asyncio task: the work is ``await asyncio.sleep``, and the process dies inside the task.

``--raw`` uses ``confluent_kafka.Consumer`` instead of SafeConsumer (``consume`` and ``poll``).
Output, one line each, flushed at once:

- ``G <partition> <offset>``: the record was handed to the application (work on it not done);
- ``R <partition> <offset>``: the application finished it;
- ``I``, ``K``: see above; ``V <partitions>``: the rebalance left it these partitions;
- ``X``: it is about to die.

A record with a ``G`` line and no ``R`` line was not finished: the next owner must get it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from confluent_kafka import Consumer, Message

from safeconsumer import SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import PROTOCOLS, KafkaTestKit, Protocol

#: How long the process may take to reach its planned death before it gives up (exit status 3).
GIVE_UP_AFTER = 60.0
#: Records of a batch finished before the process dies working on the next one.
FINISHED_IN_BATCH = 10
_started = time.monotonic()


def say(line: str) -> None:
    print(line, flush=True)


def got(msg: Message) -> None:
    say(f"G {msg.partition()} {msg.offset()}")


def finished(msg: Message) -> None:
    say(f"R {msg.partition()} {msg.offset()}")


def give_up_if_late(what: str) -> None:
    if time.monotonic() - _started > GIVE_UP_AFTER:
        print(f"crash_proc: gave up after {GIVE_UP_AFTER:.0f}s waiting for {what}", file=sys.stderr, flush=True)
        os._exit(3)


def die() -> NoReturn:
    say("X")
    os._exit(0)


def whole_batch(c: Consumer, size: int) -> list[Message]:
    """consume() until one call returns ``size`` records; smaller batches are processed in full."""
    while True:
        give_up_if_late(f"a batch of {size} records")
        batch = [m for m in c.consume(size, 10.0) if m.error() is None]
        for msg in batch:
            got(msg)
        if len(batch) >= size:
            return batch
        for msg in batch:
            finished(msg)


def work_through_batch(c: Consumer, size: int) -> list[Message]:
    """Get a whole batch and finish its first records; the rest stay unfinished."""
    batch = whole_batch(c, size)
    for msg in batch[:FINISHED_IN_BATCH]:
        finished(msg)
    return batch


def poll_until_nth(c: Consumer, nth: int) -> NoReturn:
    done = 0
    idle_said = False
    while True:
        give_up_if_late(f"record number {nth}")
        msg = c.poll(0.2)
        if msg is None:
            if done == nth - 1 and not idle_said:
                say("I")
                idle_said = True
                # Other work between polls: the records produced meanwhile reach the next poll() together.
                time.sleep(1.0)
            continue
        if msg.error() is not None:
            continue
        got(msg)
        if done == nth - 1:
            time.sleep(1.0)  # the simulated work on this record: several auto-commits run meanwhile
            die()
        finished(msg)
        done += 1


def revoked_while_working(c: SafeConsumer, partitions: int) -> NoReturn:
    with c.keepalive():
        say("K")
        # The simulated work on the batch, while a peer joins: the keeper serves the rebalance.
        while not 0 < len(c.assignment()) < partitions:
            give_up_if_late("a rebalance that takes some partitions")
            time.sleep(0.1)
        say("V " + " ".join(str(tp.partition) for tp in c.assignment()))
        time.sleep(1.0)  # more work: auto-commits run meanwhile
        die()


async def crash_in_a_task(conf: dict[str, object], topic: str, size: int, *, keepalive: bool) -> NoReturn:
    c = SafeAIOConsumer(conf)
    await c.subscribe([topic])

    async def worker() -> NoReturn:
        while True:
            give_up_if_late(f"a batch of {size} records")
            batch = [m for m in await c.consume(size, 10.0) if m.error() is None]
            for msg in batch:
                got(msg)
            if len(batch) < size:
                for msg in batch:
                    finished(msg)
                continue
            for msg in batch[:FINISHED_IN_BATCH]:
                finished(msg)
            if keepalive:
                async with c.keepalive():
                    await asyncio.sleep(1.5)  # the simulated work, kept alive: auto-commits meanwhile
                    die()
            await asyncio.sleep(1.0)  # the simulated work on the next record: auto-commits meanwhile
            die()

    await asyncio.create_task(worker())
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.integration.crash_proc")
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("protocol", choices=PROTOCOLS)
    parser.add_argument("mode", choices=["consume", "poll", "keepalive", "revoke", "aio", "aio-keepalive"])
    parser.add_argument("--raw", action="store_true", help="use confluent_kafka.Consumer")
    parser.add_argument("--batch", type=int, default=100, help="records per consume() batch")
    parser.add_argument("--nth", type=int, default=30, help="poll mode: the record it dies working on")
    parser.add_argument("--client-config", help="a JSON file of client settings (a secured broker's)")
    args = parser.parse_args()
    if args.raw and args.mode in ("keepalive", "revoke"):
        parser.error(f"mode {args.mode} needs SafeConsumer.keepalive(): drop --raw")
    protocol: Protocol = args.protocol
    client_config = json.loads(Path(args.client_config).read_text()) if args.client_config else None
    kit = KafkaTestKit(args.bootstrap, client_config=client_config)
    conf = kit.consumer_conf(args.group, protocol, auto_commit_interval_ms=100)
    if args.mode == "revoke":
        # While the application holds records the keeper serves a rebalance only at three quarters
        # of max.poll.interval.ms: 4.5 s here, so the work outlasts it and the rebalance is served
        # while the batch is unfinished (with the default 300 s it would wait for the application).
        conf["max.poll.interval.ms"] = 6000
    if args.mode.startswith("aio"):
        asyncio.run(crash_in_a_task(conf, args.topic, args.batch, keepalive=args.mode == "aio-keepalive"))
    c = Consumer(conf) if args.raw else SafeConsumer(conf)
    c.subscribe([args.topic])
    if args.mode == "poll":
        poll_until_nth(c, args.nth)
    work_through_batch(c, args.batch)
    if args.mode == "consume":
        time.sleep(1.0)  # the simulated work on the next record: several auto-commits run meanwhile
        die()
    assert isinstance(c, SafeConsumer)
    if args.mode == "keepalive":
        with c.keepalive():
            time.sleep(1.5)  # the simulated work, kept alive: the keeper polls and auto-commits meanwhile
            die()
    revoked_while_working(c, len(c.list_topics(args.topic, timeout=10).topics[args.topic].partitions))


if __name__ == "__main__":
    main()
