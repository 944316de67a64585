"""CPU used by a parked SafeConsumer: one member inside ``keepalive()`` for 60 s.

Measures this process's CPU time (user+system, librdkafka's threads included) while the
member is parked, and, for comparison, while a raw ``confluent_kafka.Consumer`` sits in a
``poll(0.1)`` loop consuming nothing for the same time.

    python -m benchmarks.parked_cpu [--seconds 60]
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name


def parked_cpu(kit: KafkaTestKit, seconds: float) -> tuple[float, float]:
    """CPU seconds this process used while a SafeConsumer owning 4 partitions sat inside
    ``keepalive()`` for ``seconds``, and the wall-clock seconds that took."""
    topic = kit.create_topic(partitions=4)
    kit.produce(topic, 10_000, partitions=4)
    safe = SafeConsumer(kit.consumer_conf(unique_name("parked"), "cooperative-sticky"))
    try:
        safe.subscribe([topic])
        while len(safe.assignment()) < 4:
            safe.poll(0.1)
        with safe.keepalive():
            cpu0, wall0 = time.process_time(), time.monotonic()
            time.sleep(seconds)  # the application's "long work"
            return time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        safe.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="parked")
        cpu, wall = parked_cpu(kit, args.seconds)
        print(f"parked SafeConsumer: {cpu:.2f}s CPU in {wall:.0f}s = {100 * cpu / wall:.2f}% of one core")

        raw = Consumer(kit.consumer_conf(unique_name("idle"), "cooperative-sticky"))
        raw.subscribe([unique_name("none")])
        cpu0, wall0 = time.process_time(), time.monotonic()
        while time.monotonic() - wall0 < args.seconds:
            raw.poll(0.1)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        raw.close()
        print(f"raw consumer idling in poll(0.1): {cpu:.2f}s CPU in {wall:.0f}s = {100 * cpu / wall:.2f}% of one core")
        kit.close()


if __name__ == "__main__":
    main()
