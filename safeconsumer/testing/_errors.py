"""Errors of the test-broker launchers."""

from __future__ import annotations


class BrokerStartError(RuntimeError):
    """No broker could be started or reached; the message says why and where the log is."""


class BrokerOverridesUnsupported(ValueError):
    """Broker setting overrides were asked of a cluster this process did not start."""


class BrokerRestartUnsupported(RuntimeError):
    """down() was asked of a broker this process did not start from local jars."""
