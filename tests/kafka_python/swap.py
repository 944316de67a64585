"""A pytest plugin for kafka-python's published test suite: ``kafka.KafkaConsumer`` becomes ours.

Loaded with ``-p tests.kafka_python.swap`` before the suite's conftest imports kafka-python, when
``SAFECONSUMER_KAFKA_PYTHON_CONSUMER=safeconsumer``; otherwise the suite runs kafka-python's own
consumer (the baseline). Every other class of kafka-python (admin client, producer) stays theirs.
"""

from __future__ import annotations

import os

if os.environ.get("SAFECONSUMER_KAFKA_PYTHON_CONSUMER") == "safeconsumer":
    import kafka
    import kafka.consumer
    import kafka.consumer.group

    from safeconsumer.kafka_python import KafkaConsumer

    kafka.KafkaConsumer = KafkaConsumer
    kafka.consumer.KafkaConsumer = KafkaConsumer
    kafka.consumer.group.KafkaConsumer = KafkaConsumer
