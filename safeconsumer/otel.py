"""OpenTelemetry metrics and spans of a SafeConsumer, through ``opentelemetry-api`` only.

Nothing here imports the SDK. With no SDK configured every instrument is the API's no-op and
the per-partition count of consumed records is not kept at all, so telemetry costs nothing on
the record path. Providers come from the ``meter_provider=`` / ``tracer_provider=`` options of
:class:`~safeconsumer.SafeConsumer`, else from the global ones.

Metrics (every one carries ``messaging.system=kafka`` and ``messaging.consumer.group.name``):

============================================  =================  ==============================================
instrument                                    kind               attributes
============================================  =================  ==============================================
``messaging.client.consumed.messages``        counter            ``messaging.destination.name``,
                                                                 ``messaging.destination.partition.id``
``safeconsumer.rebalances``                   counter            ``safeconsumer.rebalance.change``:
                                                                 assigned | revoked | lost;
                                                                 ``safeconsumer.rebalance.cause``
                                                                 (see :mod:`safeconsumer.group._explainer`)
``safeconsumer.partitions.paused``            gauge              (the effective paused set of the assignment)
``safeconsumer.records.withheld``             counter
``safeconsumer.records.purged``               counter            ``safeconsumer.purge.reason``:
                                                                 revoked | lost | unowned | seek
``safeconsumer.offsets.dropped``              counter            (offsets of unowned partitions refused)
``safeconsumer.records.poisoned``             counter            ``safeconsumer.poison.outcome``:
                                                                 skipped | dead_lettered;
                                                                 ``safeconsumer.poison.stage``
``safeconsumer.stalls``                       counter            ``messaging.destination.name``,
                                                                 ``safeconsumer.stall.cause``
``safeconsumer.keepalive.duration``           histogram (s)      ``safeconsumer.keepalive.mode``: auto | manual
``safeconsumer.fatal_errors``                 counter            ``error.type``
============================================  =================  ==============================================

Spans: one per rebalance callback (``safeconsumer rebalance <change>``, with its cause when
known in the callback), one per peer-caused rebalance once explained (``safeconsumer rebalance
explained``: the cause and the peers that joined or left), one per parked span
of the keepalive (``safeconsumer keepalive``), and ``process <topic>`` around the application's
own processing of a record (:meth:`SafeConsumer.process`), which continues the trace whose
context the record carries in its ``traceparent`` header. Payloads and keys are never recorded.
"""

from .base._otel import INSTRUMENTATION_NAME, Telemetry, metrics_enabled

__all__ = ["INSTRUMENTATION_NAME", "Telemetry", "metrics_enabled"]
