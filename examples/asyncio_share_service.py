"""An asyncio service that works through a share group (a Kafka queue) while it answers HTTP requests.

    python -m examples.asyncio_share_service

A plain ASGI app (no framework), served in-process by uvicorn. Its lifespan starts a background
task that reads a share group with ``SafeAIOShareConsumer`` and runs each record through ``await
consumer.handle(msg, work)`` (a coroutine; a record it cannot process is dead-lettered, then
rejected), and stops it on shutdown. ``GET /stats`` answers from the same event loop.

``run()`` produces records to a one-partition topic, and while the service works a second member
joins the same share group: a share group hands one partition's records to both (more members than
partitions, no rebalance), and every record is processed by one of them. Requests stay fast: the
event loop never waits for the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from confluent_kafka import Message

from safeconsumer import DeadLetter
from safeconsumer.aio import SafeAIOShareConsumer
from safeconsumer.testing import KafkaTestKit, start_broker

Scope = MutableMapping[str, Any]
Event = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Event]]
Send = Callable[[Event], Awaitable[None]]

#: The record the work cannot process (its value), to show the dead-letter path.
POISON = b"poison"


@dataclass
class Member:
    """One share-group member: what it processed."""

    conf: dict[str, Any]
    topic: str
    dead_letters: str
    processed: set[int] = field(default_factory=set)
    #: Records the work failed on (then dead-lettered by the policy).
    failed: int = 0
    _task: asyncio.Task[None] | None = None

    async def work(self, msg: Message) -> None:
        await asyncio.sleep(0.002)  # an awaited call per record (a database, another service)
        if msg.value() == POISON:
            self.failed += 1
            raise ValueError("cannot process this record")
        self.processed.add(msg.offset() or 0)

    async def consume(self) -> None:
        policy = DeadLetter(self.dead_letters, retries=0)
        async with SafeAIOShareConsumer(self.conf, start="earliest", poison=policy) as consumer:
            await consumer.subscribe([self.topic])
            while True:
                for msg in await consumer.poll(0.5):
                    if msg.error() is None:
                        await consumer.handle(msg, self.work)

    def start(self) -> None:
        self._task = asyncio.create_task(self.consume(), name=f"member {id(self)}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()  # a cancelled poll() gives its batch back; close() the rest
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def app_for(service: Member) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app: lifespan starts and stops the member; ``GET /stats`` reports."""

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
        status, body = 404, b""
        if scope["path"] == "/stats":
            status, body = 200, json.dumps({"processed": len(service.processed)}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


@dataclass
class Outcome:
    records: int
    processed: int
    by_service: int
    by_peer: int
    dead_lettered: int
    requests: int
    slowest_request: float


async def serve(bootstrap: str, records: int) -> Outcome:
    kit = KafkaTestKit(bootstrap, prefix="share-service")
    topic, dead_letters = kit.create_topic(partitions=1), kit.create_topic(partitions=1)
    poison_at = records // 2
    kit.produce(topic, poison_at, partitions=1)
    kit.producer.produce(topic, value=POISON, partition=0)
    kit.producer.flush(30)
    kit.produce(topic, records - poison_at - 1, partitions=1, start=poison_at + 1)
    conf = {**kit.client_config, "group.id": kit.name("queue"), "logger": logging.getLogger("share-service")}
    service, peer = Member(conf, topic, dead_letters), Member(conf, topic, dead_letters)
    server = uvicorn.Server(uvicorn.Config(app_for(service), host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    latencies: list[float] = []
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
                deadline = time.monotonic() + 90
                while not condition(await stats()):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"never reached: {what}")
                    await asyncio.sleep(0.02)

            await until(lambda s: s["processed"] > 0, "the service processing records")
            peer.start()  # a second member of the same group, on the same single partition
            try:
                await until(
                    lambda _s: (
                        len(service.processed | peer.processed) >= records - 1 and service.failed + peer.failed > 0
                    ),
                    "every record processed, the poison record failed",
                )
            finally:
                await peer.stop()
    finally:
        server.should_exit = True
        await serving
        dead = kit.end_offsets(dead_letters)[0]
        kit.close()
    return Outcome(
        records=records,
        processed=len(service.processed | peer.processed),
        by_service=len(service.processed),
        by_peer=len(peer.processed),
        dead_lettered=dead,
        requests=len(latencies),
        slowest_request=max(latencies),
    )


def run(bootstrap: str, records: int = 2000) -> Outcome:
    return asyncio.run(serve(bootstrap, records))


def main() -> int:
    with start_broker() as broker:
        out = run(broker.bootstrap_servers)
    print(
        f"{out.records} records on one partition: {out.processed} processed ({out.by_service} by the service, "
        f"{out.by_peer} by the peer), {out.dead_lettered} dead-lettered; {out.requests} requests, slowest "
        f"{out.slowest_request * 1000:.0f} ms",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
