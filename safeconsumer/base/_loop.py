"""asyncio plumbing shared by :mod:`safeconsumer.aio` and the share consumer's asyncio class
(:mod:`safeconsumer.share._aio`): callbacks written as coroutines run on the consumer's loop, a
``logger`` that logs on the loop, and ``async with consumer.keepalive()``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import queue
import threading
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: The config callbacks librdkafka calls, which asyncio users write as coroutines.
CONF_CALLBACKS = ("error_cb", "throttle_cb", "stats_cb", "on_commit")


class Channel:
    """Calls a callback coroutine makes on its own consumer, run by the thread waiting for it.

    That thread holds the consumer's lock (librdkafka called the callback from inside a call),
    so it must make them itself: any other thread would wait for the lock forever.
    """

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self.open = True

    def serve_until(self, done: concurrent.futures.Future[Any]) -> Any:
        done.add_done_callback(lambda _f: self.calls.put(None))
        while True:
            item = self.calls.get()
            if item is None:
                break
            call, result = item
            if result.set_running_or_notify_cancel():
                try:
                    result.set_result(call())
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                    result.set_exception(exc)
        self.open = False
        # Calls that raced with the end of the callback run here too, never dropped.
        while True:
            try:
                item = self.calls.get_nowait()
            except queue.Empty:
                break
            if item is not None and item[1].set_running_or_notify_cancel():
                try:
                    item[1].set_result(item[0]())
                except BaseException as exc:  # noqa: BLE001
                    item[1].set_exception(exc)
        return done.result()

    async def run(self, call: Callable[[], T]) -> T:
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.calls.put((call, result))
        return await asyncio.wrap_future(result)


#: Set while a callback coroutine of a SafeAIOConsumer runs (and in tasks it starts).
CHANNEL: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("safeconsumer_aio_channel", default=None)


def on_loop(loop: asyncio.AbstractEventLoop, coroutine_function: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """A plain callable for librdkafka's threads that runs ``coroutine_function`` on ``loop``."""

    loop_thread = threading.get_ident()  # created on the loop (in SafeAIOConsumer's constructor or a coroutine)

    def call(*args: Any) -> Any:
        channel = Channel()

        async def run() -> Any:
            CHANNEL.set(channel)  # this task's own context: seen by the calls it makes
            return await coroutine_function(*args)

        if loop.is_closed():
            raise RuntimeError("the event loop of this SafeAIOConsumer is closed: cannot run its callback")
        if threading.get_ident() == loop_thread:
            # Waiting here for the loop would block it forever: librdkafka was called on the loop.
            raise RuntimeError("a SafeAIOConsumer callback was called on its event loop's thread")
        return channel.serve_until(asyncio.run_coroutine_threadsafe(run(), loop))

    return call


class HasKeepalive(Protocol):
    def keepalive(self) -> contextlib.AbstractContextManager[Any]: ...


class AsyncKeepalive:
    """``async with consumer.keepalive():`` (entering and leaving take the consumer's lock: off the loop)."""

    def __init__(self, run: Callable[[Callable[[], Any]], Awaitable[Any]], consumer: HasKeepalive) -> None:
        self._run = run
        self._block = consumer.keepalive()

    async def __aenter__(self) -> None:
        await self._run(self._block.__enter__)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._run(functools.partial(self._block.__exit__, exc_type, exc, tb))


class LoopLogger:
    """A ``logger`` for librdkafka's threads that logs on the consumer's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        self._loop = loop
        self._logger = logger

    def log(self, *args: Any, **kwargs: Any) -> None:
        self._loop.call_soon_threadsafe(functools.partial(self._logger.log, *args, **kwargs))


def own_executor(
    executor: concurrent.futures.Executor | None, max_workers: int, prefix: str
) -> tuple[concurrent.futures.Executor, bool]:
    """The executor an asyncio consumer runs its calls on: ``executor``, or one of ``max_workers``
    threads it creates (and owns: shut down by its ``close()``)."""
    if executor is not None:
        return executor, False
    if max_workers < 1:
        raise ValueError("max_workers must be at least 1")
    return concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=prefix), True


def on_loop_conf(loop: asyncio.AbstractEventLoop, consumer_conf: Any) -> Any:
    """``consumer_conf`` with its coroutine callbacks run on ``loop`` and its ``logger`` logging there."""
    conf = dict(consumer_conf) if isinstance(consumer_conf, Mapping) else consumer_conf
    if isinstance(conf, dict):
        for name in CONF_CALLBACKS:
            if conf.get(name) is not None:
                conf[name] = on_loop(loop, conf[name])
        if conf.get("logger") is not None:
            conf["logger"] = LoopLogger(loop, conf["logger"])
    return conf


async def shut_down(executor: concurrent.futures.Executor, name: str) -> None:
    """Wait for ``executor``'s threads to end, on a thread of its own (none is left behind)."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    def run() -> None:
        executor.shutdown(wait=True)
        loop.call_soon_threadsafe(finished.set_result, None)

    closer = threading.Thread(target=run, name=name, daemon=True)
    closer.start()
    await finished
    closer.join()  # it has nothing left to do but end
