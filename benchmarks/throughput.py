"""Throughput of SafeConsumer vs raw confluent_kafka.Consumer, side by side in one run.

Produces N records of 100 bytes to a 4-partition topic on a real broker (the embedded one
unless KAFKA_BOOTSTRAP_SERVERS is set), then reads them all, alternating raw and safe
consumers (each in a fresh group, default config: auto-commit and auto offset store on),
for several rounds, with ``poll()`` and with ``consume(500)``. Reports the median
records/s of each and the median ratio safe/raw.

    python -m benchmarks.throughput [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name


def _read_all(
    make: Callable[[dict[str, object]], Consumer], conf: dict[str, object], topic: str, n: int, mode: str
) -> float:
    c = make(conf)
    c.subscribe([topic])
    got = 0
    started = 0.0
    try:
        while got < n:
            if mode == "poll":
                msg = c.poll(1.0)
                if msg is None or msg.error() is not None:
                    continue
                if not started:
                    started = time.perf_counter()
                got += 1
            else:
                msgs = c.consume(500, 1.0)
                if msgs and not started:
                    started = time.perf_counter()
                got += sum(1 for m in msgs if m.error() is None)
        return got / (time.perf_counter() - started)
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench")
        topic = kit.create_topic(partitions=4)
        started = time.perf_counter()
        kit.produce(topic, args.records, partitions=4, value_size=100)
        print(f"produced {args.records} x 100 B in {time.perf_counter() - started:.1f}s to {topic}", flush=True)
        for mode in ("consume(500)", "poll()"):
            rates: dict[str, list[float]] = {"raw": [], "safe": []}
            ratios = []
            for r in range(args.rounds):
                for name, make in (("raw", Consumer), ("safe", SafeConsumer)):
                    conf: dict[str, object] = {
                        "bootstrap.servers": broker.bootstrap_servers,
                        "group.id": unique_name("bench"),
                        "auto.offset.reset": "earliest",
                    }
                    rate = _read_all(make, conf, topic, args.records, "poll" if mode == "poll()" else "consume")
                    rates[name].append(rate)
                    print(f"  {mode:13} round {r + 1} {name:4}: {rate:>10,.0f} records/s", flush=True)
                ratios.append(rates["safe"][-1] / rates["raw"][-1])
            print(
                f"{mode:13} raw median {statistics.median(rates['raw']):>10,.0f}/s  "
                f"safe median {statistics.median(rates['safe']):>10,.0f}/s  "
                f"median ratio safe/raw {statistics.median(ratios):.2f}",
                flush=True,
            )
        kit.close()


if __name__ == "__main__":
    main()
