"""A share consumer's OpenTelemetry metrics, built when OpenTelemetry is loaded in the process.

As :mod:`safeconsumer.base._telemetry` does for SafeConsumer: nothing is imported or called until
``opentelemetry`` is in ``sys.modules`` (the application imported the API, or passed a provider).
The ``process <topic>`` span (:meth:`ShareTelemetry.process`) and the poison counter are the
consumer's (:class:`safeconsumer.base._telemetry.LazyTelemetry`); these are the share group's own:

- ``safeconsumer.share.acknowledgements`` {record}: acknowledgements this consumer sent, by
  ``safeconsumer.acknowledgement.type`` (accept, release, reject);
- ``safeconsumer.share.lock_overruns`` {record}: records acknowledged after their lock ran out;
- ``safeconsumer.share.released_early`` {record}: records given back before their locks ran out
  because the application had not reached them (S3), had not come back (``cancelled``), will
  retry them (``retry``), their topic was paused (S6), or they came past their release point
  (``acquired_earlier``: see :mod:`._fetch`);
- ``safeconsumer.share.delivery_count`` {delivery}: the delivery count of each record handed out
  again (a count of 1, a first delivery, is not recorded: the histogram shows redeliveries).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from ..base._telemetry import LazyTelemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

INSTRUMENTATION_NAME = "safeconsumer"


class ShareTelemetry(LazyTelemetry):
    """One share consumer's telemetry (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        *,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._share_provider = meter_provider
        self._instruments: dict[str, Any] | None = None
        self._attributes = {"messaging.system": "kafka", "messaging.consumer.group.name": group_id}
        super().__init__(group_id, meter_provider=meter_provider, tracer_provider=tracer_provider)

    def _share(self) -> dict[str, Any] | None:
        instruments = self._instruments
        if instruments is None and "opentelemetry" in sys.modules:
            from opentelemetry import metrics

            provider = self._share_provider if self._share_provider is not None else metrics.get_meter_provider()
            meter = provider.get_meter(INSTRUMENTATION_NAME)
            instruments = self._instruments = {
                "acks": meter.create_counter(
                    "safeconsumer.share.acknowledgements",
                    unit="{record}",
                    description="Acknowledgements sent, by type.",
                ),
                "overruns": meter.create_counter(
                    "safeconsumer.share.lock_overruns",
                    unit="{record}",
                    description="Records acknowledged after their acquisition lock ran out.",
                ),
                "early": meter.create_counter(
                    "safeconsumer.share.released_early",
                    unit="{record}",
                    description="Records given back before their locks ran out, not reached or paused.",
                ),
                "deliveries": meter.create_histogram(
                    "safeconsumer.share.delivery_count",
                    unit="{delivery}",
                    description="Delivery count of each record handed out again.",
                ),
            }
        return instruments

    def acknowledged(self, ack_type: str, count: int = 1) -> None:
        instruments = self._share()
        if instruments is not None and count:
            instruments["acks"].add(count, {**self._attributes, "safeconsumer.acknowledgement.type": ack_type})

    def lock_overrun(self, count: int) -> None:
        instruments = self._share()
        if instruments is not None and count:
            instruments["overruns"].add(count, self._attributes)

    def released_early(self, count: int, reason: str) -> None:
        instruments = self._share()
        if instruments is not None and count:
            instruments["early"].add(count, {**self._attributes, "safeconsumer.release.reason": reason})

    def redelivered(self, count: int) -> None:
        instruments = self._share()
        if instruments is not None:
            instruments["deliveries"].record(count, self._attributes)

    def redeliveries(self, records: list[Message]) -> None:
        """The delivery count of each record of a batch handed out again."""
        for m in records:
            if (count := m.delivery_count() or 1) > 1:
                self.redelivered(count)
