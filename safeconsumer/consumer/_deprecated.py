"""SafeConsumer's public names that predate SPEC's list of additions to upstream's API.

Each warns (``DeprecationWarning``), names its replacement and answers as the replacement does.
They go in 1.0 (CHANGELOG): removing them is deleting this module and the base class.
"""

from __future__ import annotations

import warnings
from typing import Protocol

from ._delivery import DeliveryStats
from ._pause import PauseState


class _Replacements(Protocol):
    def pause_state(self) -> PauseState: ...
    def _delivery_stats(self) -> DeliveryStats: ...


class DeprecatedNames:
    """SafeConsumer's first base class: the deprecated names, apart from the facade."""

    @property
    def parked(self: _Replacements) -> bool:
        """Deprecated: ``pause_state().parked``. Whether the keepalive has parked this consumer now.

        Not among SPEC's additions to upstream's API; removed in 1.0.
        """
        warnings.warn(
            "SafeConsumer.parked is deprecated: use consumer.pause_state().parked", DeprecationWarning, stacklevel=2
        )
        return self.pause_state().parked

    def delivery_stats(self: _Replacements) -> DeliveryStats:
        """Deprecated: ``safeconsumer.delivery_stats(consumer)``. Counters of the delivery gate.

        Not among SPEC's additions to upstream's API; removed in 1.0.
        """
        warnings.warn(
            "SafeConsumer.delivery_stats() is deprecated: use safeconsumer.delivery_stats(consumer)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._delivery_stats()
