"""kafka-python's ``KafkaConsumer`` vs ``safeconsumer.kafka_python.KafkaConsumer``, side by side in one run.

Produces N records of 100 bytes to a 4-partition topic on a real broker (the embedded one unless
KAFKA_BOOTSTRAP_SERVERS is set), then reads them all with the same consume loop on each consumer,
in a fresh group each time, alternating which goes first by round: ``poll(timeout_ms=1000,
max_records=500)`` and iteration (``for record in consumer``). Then the time from ``subscribe()``
to the first record, each round in a fresh group. Reports medians and the median ratio ours/theirs.

    python -m benchmarks.kafka_python [--records 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import kafka

from safeconsumer.kafka_python import KafkaConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name

from .throughput import _side_by_side

CONSUMERS: dict[str, Callable[..., Any]] = {"kafka-python": kafka.KafkaConsumer, "safeconsumer": KafkaConsumer}


def _consumer(name: str, bootstrap: str) -> Any:
    return CONSUMERS[name](
        bootstrap_servers=bootstrap,
        group_id=unique_name("bench"),
        auto_offset_reset="earliest",
        api_version=(4, 0, 0),
        consumer_timeout_ms=30_000,
    )


def _read_all(name: str, bootstrap: str, topic: str, n: int, mode: str) -> float:
    """Records/s from the first record to the last."""
    c = _consumer(name, bootstrap)
    c.subscribe([topic])
    got, started = 0, 0.0
    try:
        if mode == "poll(500)":
            while got < n:
                batch = sum(len(records) for records in c.poll(timeout_ms=1000, max_records=500).values())
                if batch and not started:
                    started = time.perf_counter()
                got += batch
        else:
            for _record in c:
                if not started:
                    started = time.perf_counter()
                got += 1
                if got >= n:
                    break
        if got < n:
            raise RuntimeError(f"{name} read {got} of {n} records")
        return got / (time.perf_counter() - started)
    finally:
        c.close()


def _first_record(name: str, bootstrap: str, topic: str) -> float:
    c = _consumer(name, bootstrap)
    try:
        started = time.perf_counter()
        c.subscribe([topic])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if c.poll(timeout_ms=100, max_records=1):
                return time.perf_counter() - started
        raise RuntimeError(f"{name}: no record of {topic} within 120 s of subscribe()")
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    names = list(CONSUMERS)
    with start_broker() as broker:
        bootstrap = broker.bootstrap_servers
        kit = KafkaTestKit(bootstrap, prefix="bench-kp")
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, args.records, partitions=4, value_size=100)
        print(f"produced {args.records} x 100 B to {topic}", flush=True)
        for mode in ("poll(500)", "iteration"):
            _side_by_side(
                mode,
                names,
                args.rounds,
                lambda name, mode=mode: _read_all(name, bootstrap, topic, args.records, mode),  # type: ignore[misc]
                lambda rate: f"{rate:>10,.0f}/s",
            )
        _side_by_side(
            "first record",
            names,
            args.rounds,
            lambda name: _first_record(name, bootstrap, topic),
            lambda took: f"{took * 1000:>8,.0f} ms",
        )
        kit.close()


if __name__ == "__main__":
    main()
