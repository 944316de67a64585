"""safeconsumer: a drop-in ``confluent_kafka.Consumer`` that stays correct across rebalances."""

from __future__ import annotations

import logging

from ._config import redact_config
from ._consumer import SafeConsumer, delivery_stats
from ._delivery import DeliveryStats
from ._deserializing import SafeDeserializingConsumer
from ._errors import (
    EXIT_FATAL,
    EXIT_GROUP_MAX_SIZE,
    AuthenticationFailedError,
    ConsumerClosedError,
    FatalConsumerError,
    GroupMaxSizeReachedError,
    GroupMigrationError,
    InvalidPauseRequest,
    PauseStateError,
    SafeConsumerError,
)
from ._pause import PauseState
from ._poison import DeadLetter, DeadLetterError, PoisonLimitError, Skip
from ._retry import CommitRetry
from ._version import __version__

__all__ = [
    "AuthenticationFailedError",
    "CommitRetry",
    "ConsumerClosedError",
    "DeadLetter",
    "DeadLetterError",
    "DeliveryStats",
    "EXIT_FATAL",
    "EXIT_GROUP_MAX_SIZE",
    "FatalConsumerError",
    "GroupMaxSizeReachedError",
    "GroupMigrationError",
    "InvalidPauseRequest",
    "PauseState",
    "PauseStateError",
    "PoisonLimitError",
    "SafeConsumer",
    "SafeConsumerError",
    "SafeDeserializingConsumer",
    "Skip",
    "__version__",
    "delivery_stats",
    "redact_config",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
