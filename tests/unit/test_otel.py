"""Which meter providers record: the no-op API, its global proxy, an SDK provider."""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider

from safeconsumer.otel import metrics_enabled


def test_only_a_real_provider_records() -> None:
    assert not metrics_enabled(NoOpMeterProvider())
    # The test suite never installs a global SDK: the global provider is the API's proxy.
    assert not metrics_enabled(metrics.get_meter_provider()), "the proxy is no longer recognised"
    sdk = MeterProvider()
    try:
        assert metrics_enabled(sdk)
    finally:
        sdk.shutdown()
