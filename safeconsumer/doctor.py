"""``safeconsumer doctor``: a live group's health and its findings, from outside the application.

The public entry points of :mod:`safeconsumer.health.doctor`, where the command lives.
"""

from __future__ import annotations

from .health._findings import Finding
from .health.doctor import Report, diagnose, main

__all__ = ["Finding", "Report", "diagnose", "main"]
