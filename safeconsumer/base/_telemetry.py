"""Telemetry that costs nothing until OpenTelemetry is loaded in the process.

:class:`LazyTelemetry` stands for one consumer's :class:`safeconsumer.otel.Telemetry` and builds
it the first time OpenTelemetry's API is imported in the process (``opentelemetry`` in
``sys.modules``): at construction when the application passed a provider or imported the API
first, else at the next event (a rebalance, a keepalive span, a fatal error, a stall healed)
or the stall guard's next check after the application imported it. Until then an application
that never uses OpenTelemetry pays neither its import (about 1.6 MiB resident) nor its calls.

Nothing is lost by building late: until the API is imported no SDK can be installed, and the
API's own global providers drop what is reported before one is; the observable instruments read
the partition table's cumulative counters, and ``process()`` builds the real telemetry at once
(the application asked for a span).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Message

from ._keys import Key

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from ._otel import Counters, Telemetry

__all__ = ["LazyTelemetry"]


class _NoSpan:
    """What a span is while OpenTelemetry is not loaded: ended, and nothing else."""

    def end(self) -> None:
        pass


class LazyTelemetry:
    """One consumer's telemetry, built when OpenTelemetry is loaded (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._group_id = group_id
        self._meter_provider = meter_provider
        self._tracer_provider = tracer_provider
        self._table: Counters | None = None
        self._real: Telemetry | None = None
        self.wake()

    def wake(self, *, force: bool = False) -> Telemetry | None:
        """The real telemetry, built now if OpenTelemetry is loaded (``force``: loading it)."""
        real = self._real
        if real is None and (force or "opentelemetry" in sys.modules):
            from ._otel import Telemetry

            real = self._real = Telemetry(
                self._group_id, meter_provider=self._meter_provider, tracer_provider=self._tracer_provider
            )
            if self._table is not None:
                real.bind(self._table)
            self._table = None
        return real

    def bind(self, table: Counters) -> None:
        real = self.wake()
        if real is not None:
            real.bind(table)
        else:
            self._table = table  # bound when built; the table is the consumer's own part, no cycle

    @contextlib.contextmanager
    def rebalance(
        self, change: str, partitions: Iterable[Key], protocol: str, cause: str | None = None
    ) -> Iterator[Any]:
        real = self.wake()
        if real is None:
            yield _NoSpan()
            return
        with real.rebalance(change, partitions, protocol, cause) as span:
            yield span

    def rebalance_caused(self, change: str, cause: str) -> None:
        real = self.wake()
        if real is not None:
            real.rebalance_caused(change, cause)

    def rebalance_explained(self, cause: str, started: float, peers: list[str], protocol: str) -> None:
        real = self.wake()
        if real is not None:
            real.rebalance_explained(cause, started, peers, protocol)

    def keepalive_started(self, mode: str) -> Span:
        real = self.wake()
        return real.keepalive_started(mode) if real is not None else cast("Span", _NoSpan())

    def keepalive_ended(self, span: Span, mode: str, seconds: float) -> None:
        real = self.wake()
        if real is not None and not isinstance(span, _NoSpan):
            real.keepalive_ended(span, mode, seconds)
        else:
            span.end()

    def stall_healed(self, key: Key, cause: str) -> None:
        real = self.wake()
        if real is not None:
            real.stall_healed(key, cause)

    def poisoned(self, outcome: str, stage: str) -> None:
        real = self.wake()
        if real is not None:
            real.poisoned(outcome, stage)

    def fatal(self, error_type: str) -> None:
        real = self.wake()
        if real is not None:
            real.fatal(error_type)

    def process(self, message: Message) -> contextlib.AbstractContextManager[Span]:
        """The ``process <topic>`` span: the application asked for OpenTelemetry, so it is loaded."""
        real = self.wake(force=True)
        assert real is not None
        return real.process(message)
