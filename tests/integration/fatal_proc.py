"""A SafeConsumer with ``on_fatal="exit"`` joining a full group, run as its own process.

    python -m tests.integration.fatal_proc BOOTSTRAP TOPIC GROUP PROTOCOL {poll|keepalive|aio|aio-keepalive}

``poll``: polls until the process ends. ``keepalive``: polls once, then sits in a long
``keepalive()`` block, so the error is seen on the keepalive thread. ``aio`` and
``aio-keepalive``: the same with ``SafeAIOConsumer`` in an asyncio task (``await`` instead of
blocking).
"""

from __future__ import annotations

import asyncio
import sys
import time

from safeconsumer import SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit


async def in_a_task(conf: dict[str, object], topic: str, where: str) -> None:
    c = SafeAIOConsumer(conf, on_fatal="exit")
    await c.subscribe([topic])
    if where == "aio-keepalive":
        await c.poll(0.1)
        async with c.keepalive():
            await asyncio.sleep(120)  # the long work; the process must end long before this
    else:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            await c.poll(0.2)


def main() -> None:
    bootstrap, topic, group, protocol, where = sys.argv[1:6]
    if where.startswith("aio"):
        asyncio.run(in_a_task(KafkaTestKit(bootstrap).consumer_conf(group, protocol), topic, where))  # type: ignore[arg-type]
        print("still running: the fatal error did not end the process", flush=True)
        sys.exit(3)
    c = SafeConsumer(KafkaTestKit(bootstrap).consumer_conf(group, protocol), on_fatal="exit")  # type: ignore[arg-type]
    c.subscribe([topic])
    if where == "keepalive":
        c.poll(0.1)
        with c.keepalive():
            time.sleep(120)  # the long work; the process must end long before this
    else:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            c.poll(0.2)
    print("still running: the fatal error did not end the process", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
