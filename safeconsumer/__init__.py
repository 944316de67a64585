"""safeconsumer: a drop-in ``confluent_kafka.Consumer`` that stays correct across rebalances, and a
``ShareConsumer`` for share groups that says what the raw one leaves silent."""

from __future__ import annotations

import logging

from ._deserializing import SafeDeserializingConsumer
from .base._clients import redact_config
from .base._errors import (
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
from .base._version import __version__
from .consumer._delivery import DeliveryStats
from .consumer._facade import SafeConsumer, delivery_stats
from .consumer._pause import PauseState
from .consumer._retry import CommitRetry
from .poison._policy import DeadLetter, DeadLetterError, PoisonLimitError, Skip
from .share import LockExpiredError, SafeDeserializingShareConsumer, SafeShareConsumer

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
    "LockExpiredError",
    "PauseState",
    "PauseStateError",
    "PoisonLimitError",
    "SafeConsumer",
    "SafeConsumerError",
    "SafeDeserializingConsumer",
    "SafeDeserializingShareConsumer",
    "SafeShareConsumer",
    "Skip",
    "__version__",
    "delivery_stats",
    "redact_config",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
