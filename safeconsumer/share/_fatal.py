"""S7: which client errors end a share consumer, and the error it then raises; and what a member that
left its group past ``max.poll.interval.ms`` says (S3)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError

from ..base._errors import FatalConsumerError, GroupMaxSizeReachedError, is_group_max_size
from ._batch import RELEASE_AT

logger = logging.getLogger("safeconsumer")


def fatal_of(error: KafkaError, group: str) -> FatalConsumerError | None:
    """The error that ends the consumer of ``group`` for librdkafka's ``error``: the group is full
    (``group.share.max.size``), or another fatal client error; None for any other error."""
    if is_group_max_size(error):
        fatal: FatalConsumerError = GroupMaxSizeReachedError(
            f"share group {group!r} is full: the broker refused this member because the group reached "
            "group.share.max.size (a broker setting, 200 unless its operators set one); the consumer stopped "
            "and closed, and what it held went back to the group. Run fewer members, or raise the limit.",
            kafka_error=error,
            group_id=group,
        )
    elif error.fatal():
        fatal = FatalConsumerError(
            f"fatal client error in share group {group!r}: {error.str()}; the consumer closed",
            kafka_error=error,
            group_id=group,
        )
    else:
        return None
    return fatal


def say_left(group: str, seconds: float, max_poll: float) -> None:
    """The one WARNING of a member librdkafka took out of its group: ``seconds`` passed between two
    ``poll()`` calls, more than ``max_poll`` (``max.poll.interval.ms`` in seconds)."""
    logger.warning(
        "share group %r: this member left its group: %.1f s passed between two poll() calls, more than "
        "max.poll.interval.ms (%d ms); it rejoins at the next poll(). The acknowledgements of what it was "
        "handed are kept; the records it had not reached were given back at %d%% of that interval. A share "
        "member cannot be kept in its group while the application works (a poll acquires records): raise "
        "max.poll.interval.ms above the longest work, or poll more often",
        group,
        seconds,
        max_poll * 1000,
        RELEASE_AT * 100,
    )
