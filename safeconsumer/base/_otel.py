"""OpenTelemetry metrics and spans of a consumer: the instrumentation :mod:`safeconsumer.otel` publishes
(the instruments and spans are listed there). Built by :class:`~safeconsumer.base._telemetry.LazyTelemetry`
once OpenTelemetry is loaded."""

from __future__ import annotations

import contextlib
import time
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

from confluent_kafka import Message
from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, NoOpMeterProvider, Observation
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Span, SpanKind, TracerProvider
from opentelemetry.util.types import AttributeValue

from ._keys import Key
from ._version import __version__

__all__ = ["INSTRUMENTATION_NAME", "Counters", "Telemetry", "metrics_enabled"]


class Counters(Protocol):
    """What the telemetry reads of a consumer's partition table: its cumulative counters (the
    observable instruments read the integer attributes they name, e.g. ``delivered``)."""

    @property
    def consumed(self) -> Counter[tuple[str | None, int | None]] | None:
        """Records handed to the application per partition, once :meth:`count_consumed` started it."""

    @property
    def lane(self) -> Collection[Message]:
        """Records admitted and not yet handed out."""

    @property
    def purged(self) -> Mapping[Any, int]:
        """Buffered records dropped, per reason."""

    def count_consumed(self) -> None:
        """Start counting what is handed out per partition."""


INSTRUMENTATION_NAME = "safeconsumer"

_Headers = list[tuple[str, bytes | str | None]]


def metrics_enabled(provider: MeterProvider) -> bool:
    """Whether ``provider`` records anything: not the API's no-op, nor its global proxy while
    no SDK has been installed behind it."""
    if isinstance(provider, NoOpMeterProvider):
        return False
    # The API's global provider is a proxy until an SDK is set; it is then replaced, so a proxy
    # returned by get_meter_provider() means "none configured yet".
    return not (provider is metrics.get_meter_provider() and type(provider).__name__ == "_ProxyMeterProvider")


class _HeaderGetter(Getter[_Headers]):
    """Reads W3C trace context from Kafka headers (a list of (key, bytes) pairs)."""

    def get(self, carrier: _Headers, key: str) -> list[str] | None:
        found = [
            value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            for name, value in carrier
            if name.lower() == key and value is not None
        ]
        return found or None

    def keys(self, carrier: _Headers) -> list[str]:
        return [name for name, _ in carrier]


_GETTER = _HeaderGetter()


def _version() -> str:
    return __version__


class Telemetry:
    """The instruments and tracer of one consumer; created once, with the consumer."""

    def __init__(
        self,
        group_id: str,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self.recording = metrics_enabled(provider)
        self.base: dict[str, str] = {"messaging.system": "kafka", "messaging.consumer.group.name": group_id}
        meter = provider.get_meter(INSTRUMENTATION_NAME, _version())
        self._tracer = (tracer_provider if tracer_provider is not None else trace.get_tracer_provider()).get_tracer(
            INSTRUMENTATION_NAME, _version()
        )
        self._table: weakref.ref[Counters] | None = None
        meter.create_observable_counter(
            "messaging.client.consumed.messages",
            callbacks=[self._observe_consumed],
            unit="{message}",
            description="Records handed to the application.",
        )
        self._rebalances = meter.create_counter(
            "safeconsumer.rebalances", unit="{rebalance}", description="Rebalance callbacks, by change."
        )
        meter.create_observable_gauge(
            "safeconsumer.partitions.paused",
            callbacks=[self._observe("intent_paused")],
            unit="{partition}",
            description="Partitions of the assignment effectively paused by the application's intent.",
        )
        meter.create_observable_counter(
            "safeconsumer.records.withheld",
            callbacks=[self._observe("withheld")],
            unit="{record}",
            description="Records kept back because their partition was paused when they arrived.",
        )
        meter.create_observable_counter(
            "safeconsumer.records.purged",
            callbacks=[self._observe_purged],
            unit="{record}",
            description="Records never handed out because their partition left, was rewound, or was not owned.",
        )
        meter.create_observable_counter(
            "safeconsumer.offsets.dropped",
            callbacks=[self._observe("offsets_dropped")],
            unit="{offset}",
            description="Offsets of partitions not owned, refused by commit() or store_offsets().",
        )
        self._keepalive = meter.create_histogram(
            "safeconsumer.keepalive.duration", unit="s", description="Time one keepalive kept the member parked."
        )
        self._fatal = meter.create_counter(
            "safeconsumer.fatal_errors", unit="{error}", description="Fatal errors that stopped the consumer."
        )
        self._poisoned = meter.create_counter(
            "safeconsumer.records.poisoned",
            unit="{record}",
            description="Records that failed to deserialize or process, skipped or dead-lettered by the poison policy.",
        )
        self._stalls = meter.create_counter(
            "safeconsumer.stalls",
            unit="{partition}",
            description="Partitions found not fetching past their position, and started again (SPEC I11).",
        )

    def bind(self, table: Counters) -> None:
        """Read the partition table's counters (weakly: a meter provider never keeps a consumer alive)."""
        self._table = weakref.ref(table)
        if self.recording:
            table.count_consumed()

    # -- observable callbacks (run on the metric reader's thread) -------------------------
    def _live_table(self) -> Counters | None:
        """The consumer's partition table, while the consumer lives (it holds the counters)."""
        return self._table() if self._table is not None else None

    def _observe_consumed(self, _options: CallbackOptions) -> Iterable[Observation]:
        table = self._live_table()
        if table is None:
            return []
        if table.consumed is None:
            # An SDK was installed after the consumer was created: count from now on.
            table.count_consumed()
            return []
        counts = table.consumed.copy()
        counts.subtract((m.topic(), m.partition()) for m in list(table.lane))  # admitted, not yet handed out
        return [
            Observation(n, {**self.base, "messaging.destination.name": t, "messaging.destination.partition.id": str(p)})
            for (t, p), n in counts.items()
        ]

    def _observe(self, counter: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """A callback observing the table's integer attribute ``counter``."""

        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            table = self._live_table()
            return [Observation(getattr(table, counter), self.base)] if table is not None else []

        return callback

    def _observe_purged(self, _options: CallbackOptions) -> Iterable[Observation]:
        table = self._live_table()
        if table is None:
            return []
        return [Observation(n, {**self.base, "safeconsumer.purge.reason": r}) for r, n in dict(table.purged).items()]

    # -- events ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def rebalance(
        self, change: str, partitions: Iterable[Key], protocol: str, cause: str | None = None
    ) -> Iterator[Span]:
        """Wrap a rebalance callback in a span (an exception is recorded, then re-raised), and
        count it when its ``cause`` is known now (else :meth:`rebalance_caused` counts it later)."""
        keys = list(partitions)
        if cause is not None:
            self.rebalance_caused(change, cause)
        attributes: dict[str, AttributeValue] = {
            **self.base,
            "safeconsumer.rebalance.change": change,
            "safeconsumer.rebalance.protocol": protocol,
            "safeconsumer.rebalance.partitions": len(keys),
            "safeconsumer.rebalance.topics": sorted({t for t, _ in keys}),
        }
        if cause is not None:
            attributes["safeconsumer.rebalance.cause"] = cause
        with self._tracer.start_as_current_span(f"safeconsumer rebalance {change}", attributes=attributes) as span:
            yield span

    def rebalance_caused(self, change: str, cause: str) -> None:
        """Count one rebalance callback with its cause."""
        self._rebalances.add(
            1, {**self.base, "safeconsumer.rebalance.change": change, "safeconsumer.rebalance.cause": cause}
        )

    def rebalance_explained(self, cause: str, started: float, peers: list[str], protocol: str) -> None:
        """A span from a peer-caused rebalance's first callback (``started``, monotonic) until now,
        when describing the group explained it."""
        start_ns = time.time_ns() - int((time.monotonic() - started) * 1e9)
        attributes: dict[str, AttributeValue] = {
            **self.base,
            "safeconsumer.rebalance.cause": cause,
            "safeconsumer.rebalance.protocol": protocol,
            "safeconsumer.rebalance.peers": peers,
        }
        span = self._tracer.start_span("safeconsumer rebalance explained", attributes=attributes, start_time=start_ns)
        span.end()

    def keepalive_started(self, mode: str) -> Span:
        """A parked span of time begins (it may end on another thread: not made current)."""
        return self._tracer.start_span(
            "safeconsumer keepalive", attributes={**self.base, "safeconsumer.keepalive.mode": mode}
        )

    def keepalive_ended(self, span: Span, mode: str, seconds: float) -> None:
        self._keepalive.record(seconds, {**self.base, "safeconsumer.keepalive.mode": mode})
        span.end()

    def stall_healed(self, key: Key, cause: str) -> None:
        """One stalled partition started again: counted by topic and cause, and a span."""
        attributes: dict[str, AttributeValue] = {
            **self.base,
            "messaging.destination.name": key[0],
            "messaging.destination.partition.id": str(key[1]),
            "safeconsumer.stall.cause": cause,
        }
        self._stalls.add(1, {**self.base, "messaging.destination.name": key[0], "safeconsumer.stall.cause": cause})
        self._tracer.start_span("safeconsumer stall heal", attributes=attributes).end()

    def poisoned(self, outcome: str, stage: str) -> None:
        """One poison record ``skipped`` or ``dead_lettered`` at ``stage`` (deserialize, process)."""
        self._poisoned.add(1, {**self.base, "safeconsumer.poison.outcome": outcome, "safeconsumer.poison.stage": stage})

    def fatal(self, error_type: str) -> None:
        self._fatal.add(1, {**self.base, "error.type": error_type})

    def process(self, message: Message) -> contextlib.AbstractContextManager[Span]:
        """The ``process <topic>`` span of one record, parented on the trace the record carries."""
        if not isinstance(message, Message) or message.error() is not None:
            raise TypeError(f"process() takes a record returned by poll() or consume(), got {message!r}")
        return self._process(message)

    @contextlib.contextmanager
    def _process(self, message: Message) -> Iterator[Span]:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        raw = message.headers() or []
        headers: _Headers = list(raw.items()) if isinstance(raw, dict) else list(raw)
        parent = propagate.extract(headers, getter=_GETTER) if headers else None
        attributes: Mapping[str, str | int] = {
            **self.base,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": str(topic),
            "messaging.destination.partition.id": str(partition),
            "messaging.kafka.offset": int(offset or 0),
        }
        with self._tracer.start_as_current_span(
            f"process {topic}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            yield span
