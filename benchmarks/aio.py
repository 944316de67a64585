"""asyncio throughput: SafeAIOConsumer vs confluent_kafka.aio.AIOConsumer (and aiokafka), one run.

Produces N records of 100 bytes to a 4-partition topic on a real broker (the embedded one
unless KAFKA_BOOTSTRAP_SERVERS is set), then reads them all with each contender in a fresh
group, alternating which goes first by round, with ``await consume(500)`` and with
``await poll()``. aiokafka's ``AIOKafkaConsumer`` reads the same records with its batch call
(``getmany(max_records=500)``) and its single-record call (``getone()``): the peer an asyncio
user would otherwise pick. Reports per call style the median records/s of each and the median
ratios to AIOConsumer.

    python -m benchmarks.aio [--records 300000] [--rounds 5] [--no-aiokafka] [--mode poll() ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka.aio import AIOConsumer

from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name

MODES = ("consume(500)", "poll()")

Reader = Callable[[str, str, int, str], Awaitable[float]]


def _conf(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("bench"),
        "auto.offset.reset": "earliest",
        # As benchmarks.throughput: no one-second fetch pauses whenever librdkafka's queue fills.
        "fetch.queue.backoff.ms": 10,
    }


def _confluent(cls: type[AIOConsumer] | type[SafeAIOConsumer]) -> Reader:
    async def read(bootstrap: str, topic: str, n: int, mode: str) -> float:
        c: Any = cls(_conf(bootstrap))
        await c.subscribe([topic])
        got, started = 0, 0.0
        try:
            while got < n:
                if mode == "poll()":
                    msg = await c.poll(1.0)
                    batch = 0 if msg is None or msg.error() is not None else 1
                else:
                    batch = sum(1 for m in await c.consume(500, 1.0) if m.error() is None)
                if batch and not started:
                    started = time.perf_counter()
                got += batch
            return got / (time.perf_counter() - started)
        finally:
            await c.close()

    return read


async def _aiokafka(bootstrap: str, topic: str, n: int, mode: str) -> float:
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=unique_name("bench"), auto_offset_reset="earliest"
    )
    await c.start()
    got, started = 0, 0.0
    try:
        while got < n:
            if mode == "poll()":
                await c.getone()
                batch = 1
            else:
                batches = await c.getmany(timeout_ms=1000, max_records=500)
                batch = sum(len(records) for records in batches.values())
            if batch and not started:
                started = time.perf_counter()
            got += batch
        return got / (time.perf_counter() - started)
    finally:
        await c.stop()


async def _run(args: argparse.Namespace) -> None:
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench")
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, args.records, partitions=4, value_size=100)
        print(f"produced {args.records} x 100 B to {topic}", flush=True)
        order: list[tuple[str, Reader]] = [
            ("AIOConsumer", _confluent(AIOConsumer)),
            ("SafeAIO", _confluent(SafeAIOConsumer)),
        ]
        if not args.no_aiokafka:
            order.append(("aiokafka", _aiokafka))
        for mode in args.mode or MODES:
            rates: dict[str, list[float]] = {name: [] for name, _ in order}
            for r in range(args.rounds):
                for name, read in order if r % 2 == 0 else order[::-1]:
                    rate = await read(broker.bootstrap_servers, topic, args.records, mode)
                    rates[name].append(rate)
                    print(f"  {mode:13} round {r + 1} {name:11}: {rate:>10,.0f} records/s", flush=True)
            base = rates["AIOConsumer"]
            for name, _ in order:
                ratios = [s / b for s, b in zip(rates[name], base, strict=True)]
                print(
                    f"{mode:13} {name:11} median {statistics.median(rates[name]):>10,.0f}/s  "
                    f"median ratio to AIOConsumer {statistics.median(ratios):.2f}",
                    flush=True,
                )
        kit.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-aiokafka", action="store_true", help="leave aiokafka out")
    parser.add_argument("--mode", action="append", choices=MODES, help="only these call styles (default both)")
    asyncio.run(_run(parser.parse_args()))


if __name__ == "__main__":
    main()
