"""The shared base every layer above stands on: errors and exit codes (``_errors``), partition keys and
read-ahead sizes (``_keys``), topic entries (``_topics``), the asyncio plumbing (``_loop``), telemetry
(``_telemetry``, ``_otel``), the helper clients the library creates for itself, their config and their
logging (``_clients``), and the version. It imports nothing of safeconsumer's above it."""
