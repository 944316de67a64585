"""asyncio: :class:`SafeAIOConsumer`, the drop-in for ``confluent_kafka.aio.AIOConsumer``, and
:class:`SafeAIOShareConsumer` for share groups (:mod:`safeconsumer.share._aio`).

``from safeconsumer.aio import SafeAIOConsumer as AIOConsumer`` migrates an asyncio app. The
same constructor (``consumer_conf``, ``max_workers``, ``executor``) and the same coroutine
methods as the installed ``AIOConsumer``, with a :class:`~safeconsumer.SafeConsumer` underneath
(not a second copy of it): every invariant holds because every call is the SafeConsumer's.

- **The loop is never blocked.** Every call runs on the executor's threads; a call waits there
  (not on the loop) for the consumer's lock.
- **Callbacks are coroutines**, run on the consumer's loop, as upstream requires: rebalance
  callbacks get the SafeAIOConsumer; ``error_cb``, ``stats_cb``, ``throttle_cb`` and
  ``on_commit`` are awaited too. A callback may await this consumer's own methods: those calls
  run on the thread that is waiting for the callback (it holds the consumer's lock), so they
  neither deadlock nor wait behind it.
- **Cancellation loses nothing.** A ``poll()``/``consume()`` cancelled while librdkafka works
  for it, or after it returned but before its task resumed (``task.cancel()``,
  ``asyncio.timeout``), gives what it got back to the consumer: it is handed out again first,
  and no call of any kind counts it as processed meanwhile (I8; see :class:`._partitions.Receipt`).
- ``async with consumer.keepalive():`` parks the consumer around a long ``await`` (I5); the
  automatic keepalive keeps a member whose coroutine awaits something else for longer than
  ``max.poll.interval.ms`` in its group.
- ``close()`` stops the keepalive thread and shuts down the executor it created.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from confluent_kafka import Message, TopicPartition

from .base._errors import consumer_closed
from .base._loop import CHANNEL, AsyncKeepalive, on_loop, on_loop_conf, own_executor, shut_down
from .consumer._facade import SafeConsumer
from .consumer._partitions import Receipt
from .consumer._pause import PauseState
from .consumer._port import port_of
from .consumer._upstream import TIMEOUT_TYPES as _TIMEOUT_TYPES
from .share._aio import SafeAIOShareConsumer

__all__ = ["SafeAIOConsumer", "SafeAIOShareConsumer"]


T = TypeVar("T")

_monotonic = time.monotonic


class _Receive:
    """One poll()/consume() in flight: who gets its result, the caller or (cancelled) the consumer."""

    __slots__ = ("cancelled", "lock", "receipt")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        #: The result in transit in the consumer's table, once the call returned (None: nothing returned).
        self.receipt: Receipt | None = None


class SafeAIOConsumer:
    """An asyncio consumer with SafeConsumer's guarantees; drop-in for ``confluent_kafka.aio.AIOConsumer``.

    Args:
        consumer_conf: the librdkafka config, as for ``AIOConsumer`` (callbacks are coroutines).
        max_workers: threads of the executor created when ``executor`` is None.
        executor: run the consumer's calls on this executor (not shut down by ``close()``).
        **options: SafeConsumer's keyword-only options (``keepalive``, ``on_fatal``, ...).

    Must be created inside a running event loop, whose thread then runs the callbacks.
    """

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        max_workers: int = 100,
        executor: concurrent.futures.Executor | None = None,
        **options: Any,
    ) -> None:
        self._closed = False
        self.executor, self._owns_executor = own_executor(executor, max_workers, "safeconsumer-aio")
        self._loop = asyncio.get_running_loop()
        conf = on_loop_conf(self._loop, consumer_conf)
        self._consumer = SafeConsumer(conf, **options)
        #: The lock, lane and give-back of the consumer underneath (see _receive and poll).
        self._link = port_of(self._consumer, "poll").async_link()

    def __repr__(self) -> str:
        return f"<SafeAIOConsumer of {self._consumer!r}>"

    async def __aenter__(self) -> SafeAIOConsumer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- dispatch -------------------------------------------------------------------------------
    def _check_open(self, name: str) -> None:
        if self._closed:
            fatal = self._link.fatal
            if fatal is not None:
                raise fatal
            raise consumer_closed(("Consumer closed",), f"SafeAIOConsumer is closed: cannot call {name}()")

    async def _run(self, call: Callable[[], T]) -> T:
        """``call`` off the loop: on the executor, or (from a callback) on the thread serving it."""
        channel = CHANNEL.get()
        if channel is not None and channel.open:
            return await channel.run(call)
        return await self._loop.run_in_executor(self.executor, call)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self._check_open(name)
        return await self._run(functools.partial(getattr(self._consumer, name), *args, **kwargs))

    async def _receive(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """poll()/consume(): what a cancelled caller never got goes back to the consumer (I8).

        The result stays in the consumer's table, in transit, until this coroutine resumes with
        it (then it is handed out) or is cancelled first (then it is given back): a commit(),
        store or close() meanwhile, from any task or thread, never counts it as processed.
        """
        self._check_open(name)
        link, receive = self._link, _Receive()
        method = getattr(self._consumer, name)

        def work() -> Any:
            with link.lock:
                if link.returned_waiting():
                    link.give_back_returned()
                result = method(*args, **kwargs)
                with receive.lock:
                    if receive.cancelled:  # cancelled while librdkafka worked: back at once
                        link.give_back(result)
                        return None
                    receive.receipt = link.in_transit(result)
                return result

        try:
            result = await self._run(work)
        except asyncio.CancelledError:
            with receive.lock:
                receive.cancelled = True
                if receive.receipt is not None:  # it returned, but never reached the caller
                    receive.receipt.returned()
            raise
        if receive.receipt is not None:
            receive.receipt.arrived()
        return result

    # -- confluent_kafka.aio.AIOConsumer's methods --------------------------------------------
    async def poll(self, *args: Any, **kwargs: Any) -> Message | None:
        """``await poll(timeout=-1)``: one record or error event, or None.

        A record of a batch SafeConsumer already read and found wholly deliverable (its fast
        lane) is handed out here, on the loop, without a thread hop: no call into librdkafka,
        no lock (see :meth:`SafeConsumer.poll`).
        """
        link = self._link
        lane = link.lane
        if (
            lane
            and not kwargs
            and len(args) <= 1
            and (not args or args[0].__class__ in _TIMEOUT_TYPES)
            and not self._closed
            and not link.returned_waiting()
            and _monotonic() < link.reader.lane_until
        ):
            try:
                return lane.popleft()
            except IndexError:
                pass
        result: Message | None = await self._receive("poll", args, kwargs)
        return result

    async def consume(self, *args: Any, **kwargs: Any) -> list[Message]:
        """``await consume(num_messages=1, timeout=-1)``: up to ``num_messages`` records and events."""
        result: list[Message] = await self._receive("consume", args, kwargs)
        return result

    async def subscribe(self, *args: Any, **kwargs: Any) -> None:
        """``await subscribe(topics, on_assign=..., on_revoke=..., on_lost=...)``: callbacks are
        coroutines and receive this SafeAIOConsumer."""
        for name in ("on_assign", "on_revoke", "on_lost"):
            callback = kwargs.get(name)
            if callback is not None:
                kwargs[name] = self._rebalance_callback(callback)
        await self._call("subscribe", *args, **kwargs)

    def _rebalance_callback(self, callback: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        # Weak: librdkafka holds the callback, so a strong one would keep this consumer (and its
        # SafeConsumer) alive after the application dropped it (I10). It runs only inside a call of ours.
        this = weakref.ref(self)

        def with_self(_consumer: SafeConsumer, partitions: list[TopicPartition]) -> Awaitable[Any]:
            return callback(this(), partitions)

        return on_loop(self._loop, with_self)

    async def unsubscribe(self, *args: Any, **kwargs: Any) -> None:
        await self._call("unsubscribe", *args, **kwargs)

    async def commit(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("commit", *args, **kwargs)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        """Leave the group and release the client; shuts down the executor it created.

        As ``AIOConsumer.close()``, a second call raises ``RuntimeError("Consumer closed")``.
        """
        self._check_open("close")
        try:
            await self._run(functools.partial(self._consumer.close, *args, **kwargs))
        finally:
            self._closed = True
            if self._owns_executor:
                await shut_down(self.executor, "safeconsumer-aio-close")

    async def seek(self, *args: Any, **kwargs: Any) -> None:
        await self._call("seek", *args, **kwargs)

    async def pause(self, *args: Any, **kwargs: Any) -> None:
        """``await pause(partitions)``; ``await pause()`` marks the whole consumer."""
        await self._call("pause", *args, **kwargs)

    async def resume(self, *args: Any, **kwargs: Any) -> None:
        await self._call("resume", *args, **kwargs)

    async def store_offsets(self, *args: Any, **kwargs: Any) -> None:
        await self._call("store_offsets", *args, **kwargs)

    async def committed(self, *args: Any, **kwargs: Any) -> list[TopicPartition]:
        result: list[TopicPartition] = await self._call("committed", *args, **kwargs)
        return result

    async def assign(self, *args: Any, **kwargs: Any) -> None:
        await self._call("assign", *args, **kwargs)

    async def unassign(self, *args: Any, **kwargs: Any) -> None:
        await self._call("unassign", *args, **kwargs)

    async def incremental_assign(self, *args: Any, **kwargs: Any) -> None:
        await self._call("incremental_assign", *args, **kwargs)

    async def incremental_unassign(self, *args: Any, **kwargs: Any) -> None:
        await self._call("incremental_unassign", *args, **kwargs)

    async def assignment(self, *args: Any, **kwargs: Any) -> list[TopicPartition]:
        result: list[TopicPartition] = await self._call("assignment", *args, **kwargs)
        return result

    async def position(self, *args: Any, **kwargs: Any) -> list[TopicPartition]:
        result: list[TopicPartition] = await self._call("position", *args, **kwargs)
        return result

    async def consumer_group_metadata(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("consumer_group_metadata", *args, **kwargs)

    async def set_sasl_credentials(self, *args: Any, **kwargs: Any) -> None:
        await self._call("set_sasl_credentials", *args, **kwargs)

    async def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("list_topics", *args, **kwargs)

    async def cluster_id(self, *args: Any, **kwargs: Any) -> str:
        result: str = await self._call("cluster_id", *args, **kwargs)
        return result

    async def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("get_watermark_offsets", *args, **kwargs)

    async def offsets_for_times(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("offsets_for_times", *args, **kwargs)

    # -- safeconsumer's additions ------------------------------------------------------------------
    async def pause_topics(self, topics: list[str] | str) -> None:
        """Mark topics (names, or ``^regex``) paused, for every partition now and later."""
        await self._call("pause_topics", topics)

    async def resume_topics(self, topics: list[str] | str) -> None:
        await self._call("resume_topics", topics)

    async def paused(self) -> list[TopicPartition]:
        """The effective paused set of the current assignment."""
        result: list[TopicPartition] = await self._call("paused")
        return result

    async def pause_state(self) -> PauseState:
        result: PauseState = await self._call("pause_state")
        return result

    async def owns(self, message_or_partition: Message | TopicPartition) -> bool:
        """Whether this consumer owns the record's (or the partition's) partition right now."""
        result: bool = await self._call("owns", message_or_partition)
        return result

    def keepalive(self) -> AsyncKeepalive:
        """``async with consumer.keepalive(): await long_work()``: stays in the group, no records."""
        self._check_open("keepalive")
        return AsyncKeepalive(self._run, self._consumer)

    async def handle(self, message: Message, handler: Callable[[Message], Any]) -> Any:
        """``await consumer.handle(msg, handler)``: the handler (a coroutine function, or a plain one)
        under the consumer's poison policy, as :meth:`SafeConsumer.handle`: its result, or None once
        the record was skipped or dead-lettered. Retries wait inside ``async with keepalive()``; the
        dead-letter write runs off the event loop."""
        self._check_open("handle")
        return (
            await port_of(self._consumer, "handle")
            .poison_handler()
            .handle_async(message, handler, keepalive=self.keepalive, run=self._run)
        )

    def process(self, message: Message) -> Any:
        """``with consumer.process(msg): ...``: the processing span (no call into librdkafka)."""
        return self._consumer.process(message)

    @property
    def consumer(self) -> SafeConsumer:
        """The SafeConsumer underneath (call it only from a thread that may block)."""
        return self._consumer
