"""An asyncio service that consumes in the background while it answers HTTP requests.

    python -m examples.asyncio_service

A plain ASGI app (no framework), served in-process by uvicorn. Its lifespan starts a background
task that consumes with ``SafeAIOConsumer`` - the drop-in for ``confluent_kafka.aio.AIOConsumer``
- and stops it on shutdown. ``GET /stats`` answers from the same event loop: how many records
were handled, and which partitions the service owns.

``run()`` shows the two together: it produces records, keeps requesting ``/stats`` while a
second member joins the group and leaves it again (two rebalances), and reports the slowest
request. The event loop is never blocked by the consumer (every call into librdkafka runs on
the executor's threads), so requests stay fast while the group rebalances.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from confluent_kafka import TopicPartition

# Before: from confluent_kafka.aio import AIOConsumer
from safeconsumer.aio import SafeAIOConsumer as AIOConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, start_broker

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass
class Service:
    """The consuming half of the app: state the HTTP half reads."""

    conf: dict[str, Any]
    topics: list[str]
    handled: set[tuple[int, int]] = field(default_factory=set)
    owned: list[TopicPartition] = field(default_factory=list)
    rebalances: int = 0
    _task: asyncio.Task[None] | None = None

    async def on_assign(self, consumer: AIOConsumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.owned = await consumer.assignment()

    async def on_revoke(self, consumer: AIOConsumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        await consumer.commit(asynchronous=False)  # what was handled, before the partitions move

    async def consume(self) -> None:
        async with AIOConsumer(self.conf) as consumer:
            await consumer.subscribe(self.topics, on_assign=self.on_assign, on_revoke=self.on_revoke)
            while True:
                for msg in await consumer.consume(100, 0.5):
                    if msg.error() is None:
                        self.handled.add((msg.partition(), msg.offset()))  # type: ignore[arg-type]
                self.owned = await consumer.assignment()

    def start(self) -> None:
        self._task = asyncio.create_task(self.consume(), name="consumer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()  # a cancelled consume() gives its records back: nothing is lost
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def app_for(service: Service) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app: lifespan starts and stops the consumer; ``GET /stats`` reports."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    service.start()
                    await send({"type": "lifespan.startup.complete"})
                elif event["type"] == "lifespan.shutdown":
                    await service.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["path"] != "/stats":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = json.dumps(
            {"handled": len(service.handled), "owned": [[tp.topic, tp.partition] for tp in service.owned]}
        ).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    return app


@dataclass
class Outcome:
    records: int
    handled_by_service: int
    handled_by_peer: int
    requests: int
    slowest_request: float
    rebalances: int


async def serve_and_rebalance(bootstrap: str, records: int, protocol: Protocol) -> Outcome:
    kit = KafkaTestKit(bootstrap, prefix="service")
    topic = kit.create_topic(partitions=4)
    group = kit.name("svc")
    conf = kit.consumer_conf(group, protocol, enable_auto_commit=False)
    service = Service(conf, [topic])
    server = uvicorn.Server(uvicorn.Config(app_for(service), host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    latencies: list[float] = []
    peer_handled: set[tuple[int, int]] = set()
    try:
        while not server.started:
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def stats() -> dict[str, Any]:
                started = time.monotonic()
                response = await http.get("/stats")
                latencies.append(time.monotonic() - started)
                result: dict[str, Any] = response.json()
                return result

            async def until(condition: Callable[[dict[str, Any]], bool], what: str) -> None:
                deadline = time.monotonic() + 60
                while not condition(await stats()):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the service never reached: {what}")
                    await asyncio.sleep(0.02)

            await until(lambda s: len(s["owned"]) == 4, "owning all four partitions")
            kit.produce(topic, records // 2, partitions=4)
            # A second member joins, reads for a while, and leaves: the group rebalances twice.
            async with AIOConsumer(conf) as peer:
                await peer.subscribe([topic])
                await until(lambda s: 0 < len(s["owned"]) < 4, "sharing partitions with the peer")
                kit.produce(topic, records - records // 2, partitions=4, start=records // 2)
                deadline = time.monotonic() + 60
                while len(service.handled | peer_handled) < records and time.monotonic() < deadline:
                    for msg in await peer.consume(100, 0.1):
                        if msg.error() is None:
                            peer_handled.add((msg.partition(), msg.offset()))  # type: ignore[arg-type]
                    await stats()
                await peer.commit(asynchronous=False)
            await until(lambda s: len(s["owned"]) == 4, "all four partitions back after the peer left")
            await until(lambda _s: len(service.handled | peer_handled) >= records, "every record handled")
    finally:
        server.should_exit = True
        await serving
        kit.close()
    return Outcome(
        records=records,
        handled_by_service=len(service.handled),
        handled_by_peer=len(peer_handled),
        requests=len(latencies),
        slowest_request=max(latencies),
        rebalances=service.rebalances,
    )


def run(bootstrap: str, records: int = 2000, protocol: Protocol = "cooperative-sticky") -> Outcome:
    return asyncio.run(serve_and_rebalance(bootstrap, records, protocol))


def main() -> int:
    with start_broker() as broker:
        out = run(broker.bootstrap_servers)
    print(
        f"{out.records} records: {out.handled_by_service} handled by the service, {out.handled_by_peer} by the peer; "
        f"{out.rebalances} rebalance callbacks; {out.requests} requests, slowest {out.slowest_request * 1000:.0f} ms",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
