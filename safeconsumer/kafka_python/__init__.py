"""kafka-python's ``KafkaConsumer`` on librdkafka, with every SafeConsumer guarantee.

Change one import::

    from safeconsumer.kafka_python import KafkaConsumer   # was: from kafka import KafkaConsumer

kafka-python's own types and exceptions (``kafka.TopicPartition``, ``kafka.structs.OffsetAndMetadata``,
``kafka.consumer.fetcher.ConsumerRecord``, ``kafka.errors``) are used as they are: install the
``kafka-python`` extra (``pip install safeconsumer[kafka-python]``). See docs/migration.md.
"""

from __future__ import annotations

try:
    import kafka  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "safeconsumer.kafka_python uses kafka-python's types: pip install 'safeconsumer[kafka-python]'"
    ) from exc

from ._consumer import KafkaConsumer

__all__ = ["KafkaConsumer"]
