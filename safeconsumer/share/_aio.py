"""asyncio: :class:`SafeAIOShareConsumer`, a share-group consumer for asyncio services.

confluent-kafka has no asyncio share consumer. This one is shaped like
:class:`safeconsumer.aio.SafeAIOConsumer`: the same constructor arguments (``consumer_conf``,
``max_workers``, ``executor``, then :class:`~safeconsumer.SafeShareConsumer`'s options), a coroutine
for every method of ``ShareConsumer``, ``async with``, ``async with consumer.keepalive()`` and
``await consumer.handle(msg, coro)`` under the poison policy, with a
:class:`~safeconsumer.SafeShareConsumer` underneath, so S1-S8 hold because every call is its.

- **The loop is never blocked.** Every call that may wait runs on the executor; a share consumer is
  single-threaded, so the executor it creates has one thread, and calls (from any task) run one at
  a time, in the order they were made.
- **A cancelled ``poll()`` gives its batch back** (S2): cancelled while librdkafka works for it, or
  after it returned but before the task resumed, its records are released at once, before any later
  call of the consumer runs: never accepted, never left to run out their lock.
- **Callbacks are coroutines** run on the consumer's loop (``error_cb``, ``throttle_cb``,
  ``stats_cb``, the acknowledgement commit callback); ``logger`` logs on the loop.
- ``close()`` shuts down the executor it created; a dropped consumer is freed where it is dropped.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from confluent_kafka import Message

from ..base._loop import AsyncKeepalive, on_loop, on_loop_conf, own_executor, shut_down
from ._consumer import SafeShareConsumer
from ._port import port_of

__all__ = ["SafeAIOShareConsumer"]

T = TypeVar("T")


class _Poll:
    """One ``poll()`` in flight: whether its caller was cancelled, and what librdkafka returned."""

    __slots__ = ("cancelled", "lock", "result")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.result: Any = None


class SafeAIOShareConsumer:
    """A :class:`~safeconsumer.SafeShareConsumer` for asyncio (see the module).

    ``consumer_conf``: the share consumer's config, as upstream's. ``max_workers``: threads of the
    executor created when ``executor`` is None (one: a share consumer is single-threaded; calls run
    one at a time whatever the executor). ``options``: :class:`~safeconsumer.SafeShareConsumer`'s
    keyword options (``start``, ``poison``, ``on_fatal``, ``meter_provider``, ``tracer_provider``).
    Made inside a coroutine (it keeps the running loop).
    """

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        max_workers: int = 1,
        executor: concurrent.futures.Executor | None = None,
        **options: Any,
    ) -> None:
        self._closed = False
        self.executor, self._owns_executor = own_executor(executor, max_workers, "safeconsumer-aio-share")
        self._loop = asyncio.get_running_loop()
        conf = on_loop_conf(self._loop, consumer_conf)
        self._consumer = SafeShareConsumer(conf, **options)
        self._port = port_of(self._consumer)
        #: One call of the share consumer at a time, from whichever executor thread: the consumer's own
        #: lock, which its watch and keepalive timers take too.
        self._calls = self._port.lock
        #: Calls of the coroutines in the order they were made; a poll() holds it until its caller
        #: has its batch (or was cancelled), so that no later call accepts a batch nobody received.
        self._order = asyncio.Lock()
        #: Batches of polls cancelled after librdkafka returned them, given back before the next call.
        self._cancelled: collections.deque[Any] = collections.deque()

    def __repr__(self) -> str:
        return f"<SafeAIOShareConsumer of {self._consumer!r}>"

    async def __aenter__(self) -> SafeAIOShareConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        if not self._closed:
            await self.close()

    # -- dispatch -------------------------------------------------------------------------------
    def _locked(self, call: Callable[[], T]) -> T:
        """On an executor thread: ``call`` alone, after what cancelled polls returned went back."""
        with self._calls:
            self._give_back_cancelled()
            return call()

    def _give_back_cancelled(self) -> None:
        while self._cancelled:
            self._port.give_back(self._cancelled.popleft())

    async def _run(self, call: Callable[[], T]) -> T:
        return await self._loop.run_in_executor(self.executor, functools.partial(self._locked, call))

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self._consumer, name)
        if self._closed:  # upstream's error for a closed consumer, at once (the executor is gone)
            return method(*args, **kwargs)
        async with self._order:
            return await self._run(functools.partial(method, *args, **kwargs))

    # -- ShareConsumer's methods ----------------------------------------------------------------
    async def poll(self, *args: Any, **kwargs: Any) -> Any:
        """``await poll(timeout=-1)``: upstream's ``Messages`` batch (possibly empty). Cancelled, its
        records go back to the group at once (see the module)."""
        if self._closed:
            return self._consumer.poll(*args, **kwargs)
        call = _Poll()
        consumer, port = self._consumer, self._port

        def work() -> Any:
            result = consumer.poll(*args, **kwargs)
            with call.lock:
                if call.cancelled:  # cancelled while librdkafka worked: back at once
                    port.give_back(result)
                    return None
                call.result = result
            return result

        async with self._order:
            try:
                return await self._run(work)
            except asyncio.CancelledError:
                with call.lock:
                    call.cancelled = True
                    returned, call.result = call.result, None
                if returned is not None:  # it returned, but never reached the caller: back now,
                    self._cancelled.append(returned)  # or first thing in the next call
                    if not self._closed:
                        self.executor.submit(self._locked, self._give_back_cancelled)
                raise

    async def subscribe(self, *args: Any, **kwargs: Any) -> None:
        await self._call("subscribe", *args, **kwargs)

    async def unsubscribe(self, *args: Any, **kwargs: Any) -> None:
        await self._call("unsubscribe", *args, **kwargs)

    async def subscription(self, *args: Any, **kwargs: Any) -> list[str]:
        result: list[str] = await self._call("subscription", *args, **kwargs)
        return result

    async def acknowledge(self, *args: Any, **kwargs: Any) -> None:
        await self._call("acknowledge", *args, **kwargs)

    async def acknowledge_offset(self, *args: Any, **kwargs: Any) -> None:
        await self._call("acknowledge_offset", *args, **kwargs)

    async def commit_sync(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("commit_sync", *args, **kwargs)

    async def commit_async(self, *args: Any, **kwargs: Any) -> None:
        await self._call("commit_async", *args, **kwargs)

    async def set_acknowledgement_commit_callback(self, callback: Callable[..., Awaitable[Any]] | None) -> None:
        """``callback(offsets, exception)``, a coroutine function run on the consumer's loop."""
        wrapped = None if callback is None else on_loop(self._loop, callback)
        await self._call("set_acknowledgement_commit_callback", wrapped)

    async def set_sasl_credentials(self, *args: Any, **kwargs: Any) -> None:
        await self._call("set_sasl_credentials", *args, **kwargs)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        """Leave the group, give back what the application did not come back after, release the
        client; shuts down the executor it created. A second call answers as upstream's."""
        if self._closed:
            self._consumer.close(*args, **kwargs)
            return
        try:
            async with self._order:
                await self._run(functools.partial(self._consumer.close, *args, **kwargs))
        finally:
            self._closed = True
            if self._owns_executor:
                await shut_down(self.executor, "safeconsumer-aio-share-close")

    async def pause(self) -> None:
        await self._call("pause")

    async def resume(self) -> None:
        await self._call("resume")

    async def pause_topics(self, topics: Any) -> None:
        """Pause topics (names, ``^regex``, ``re.Pattern``): see :meth:`SafeShareConsumer.pause_topics`."""
        await self._call("pause_topics", topics)

    async def resume_topics(self, topics: Any) -> None:
        await self._call("resume_topics", topics)

    async def paused_topics(self) -> list[str]:
        result: list[str] = await self._call("paused_topics")
        return result

    @property
    def lock_overruns(self) -> int:
        return self._consumer.lock_overruns

    @property
    def released_early(self) -> int:
        return self._consumer.released_early

    def keepalive(self) -> AsyncKeepalive:
        """``async with consumer.keepalive(): await long_work(msg)``: the records of the batch not
        reached yet go back before their locks run out (see :meth:`SafeShareConsumer.keepalive`)."""
        if self._closed:
            self._consumer.keepalive().__enter__()  # the closed consumer's error, at once
        return AsyncKeepalive(self._run, self._consumer)

    async def handle(self, message: Message, handler: Callable[[Message], Any]) -> Any:
        """``await consumer.handle(msg, handler)``: the handler (a coroutine function, or a plain one)
        under the consumer's poison policy, as :meth:`SafeShareConsumer.handle`: its result, or None
        once the record was skipped or dead-lettered (then rejected) or released for redelivery (its
        next attempt would not fit in its lock). Accepted once the handler returned; cancelled, the
        record goes back at once. Retries wait inside ``async with keepalive()``; acknowledgements
        and the dead-letter write run off the event loop."""
        consumer = self._consumer
        if self._closed:
            return consumer.handle(message, handler)  # the closed consumer's error (the handler never runs)
        port = self._port
        starting = asyncio.ensure_future(self._run(functools.partial(port.handling, message)))
        try:
            before = await asyncio.shield(starting)
        except asyncio.CancelledError:  # cancelled while the record was being taken in hand: given back
            with contextlib.suppress(Exception):
                taken = await starting
                await self._run(functools.partial(port.handled, message, taken, failed=True))
            raise
        try:
            handling = consumer.poison.handle_async(message, handler, keepalive=self.keepalive, run=self._run)
            if "opentelemetry" in sys.modules and message.error() is None:
                with port.process(message):  # the span continues the producer's trace
                    result = await handling
            else:
                result = await handling
        except BaseException:  # a cancelled await too: the record goes back at once (S2)
            await self._run(functools.partial(port.handled, message, before, failed=True))
            raise
        await self._run(functools.partial(port.handled, message, before, failed=False))
        return result

    @property
    def consumer(self) -> SafeShareConsumer:
        """The SafeShareConsumer underneath (call it only from a thread that may block)."""
        return self._consumer
