"""S4's copies of records handed out on their last delivery: written to the dead-letter topic before the
application sees them, all of a batch in one round trip (while the consumer makes its own copies: the
broker's DLQ makes them otherwise)."""

from __future__ import annotations

import logging

from confluent_kafka import Message

from ..group._share import GroupLook
from ..poison._policy import DeadLetter, DeadLetterWriter

logger = logging.getLogger("safeconsumer")


class LastDelivery(Exception):
    """Why a record on its last delivery is in the dead-letter topic (its ``exception.class`` header)."""


def copy_last_deliveries(records: list[Message], policy: DeadLetter, look: GroupLook, writer: DeadLetterWriter) -> None:
    """S4: records on their last delivery go to the dead-letter topic before the application sees
    them, all of a batch in one round trip (the shorter the wait, the less a SIGKILL meanwhile takes)."""
    limit = look.settings.delivery_limit
    at = look.copy_from
    last = [(m, count) for m in records if (count := m.delivery_count() or 0) >= at and m.error() is None]
    if not last:
        return
    copies: list[tuple[Message, Exception, int]] = [
        (
            message,
            LastDelivery(
                (
                    f"delivery {count} of the group's limit of {limit}"
                    if look.known
                    else f"delivery {count}, the group's limit unknown yet (its settings could not be read)"
                )
                + ": the broker archives the record if it is not accepted now; written here before "
                "processing, so it may also have been processed"
            ),
            count,
        )
        for message, count in last
    ]
    try:
        failed = writer.write_all(policy, copies, "last-delivery")
    except Exception as exc:  # noqa: BLE001 - handed out all the same; a failure of handle() dead-letters it
        failed = [(message, exc) for message, _count in last]
    for message, why in failed:
        logger.warning(
            "could not copy %s [%s] at offset %s (its last delivery) to %r: %s",
            message.topic(),
            message.partition(),
            message.offset(),
            policy.topic,
            why,
        )
