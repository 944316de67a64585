"""What every part of a ``KafkaConsumer`` holds: the SafeConsumer, the guarded call, the shared
consumed positions and config, whether the consumer has no group, and its default timeout."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._positions import Positions

if TYPE_CHECKING:
    from ..consumer._facade import SafeConsumer

__all__ = ["Part"]


class Part:
    """A part of the facade's work; holds the SafeConsumer, never the ``KafkaConsumer``."""

    def __init__(
        self,
        consumer: SafeConsumer,
        call: Callable[..., Any],
        positions: Positions,
        config: dict[str, Any],
        *,
        groupless: bool,
        timeout: float,
    ) -> None:
        self._consumer = consumer
        self._call = call
        self._positions = positions
        self._config = config
        self._groupless = groupless
        self._timeout = timeout
