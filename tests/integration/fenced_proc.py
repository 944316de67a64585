"""A static member (``group.instance.id``) with ``on_fatal="exit"``, run as its own process.

    python -m tests.integration.fenced_proc BOOTSTRAP TOPIC GROUP PROTOCOL INSTANCE_ID [--second]

Polls until it owns a partition, prints ``READY``, then waits for a line on stdin (the test
fences it meanwhile with another member of the same instance id) and commits: the fatal
error librdkafka *raises* from ``commit()`` must end the process with ``EXIT_FATAL``. The
keepalive is off, so nothing else can meet the error first.

With ``--second`` it is the member that joins while another holds its instance id (refused
under KIP-848): it polls for 30 s; the fatal error that refusal brings must end the process.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit


def main() -> None:
    bootstrap, topic, group, protocol, instance = sys.argv[1:6]
    conf = KafkaTestKit(bootstrap).consumer_conf(group, protocol, group_instance_id=instance)  # type: ignore[arg-type]
    c = SafeConsumer(conf, on_fatal="exit", keepalive="off")
    c.subscribe([topic])
    if sys.argv[6:] == ["--second"]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c.poll(0.2)
        print("still running: no fatal error within 30 s", flush=True)
        sys.exit(3)
    while not c.assignment():
        c.poll(0.2)
    print("READY", flush=True)
    sys.stdin.readline()
    c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    print("still running: the fatal commit did not end the process", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
