"""A finding of the doctor: something worth an operator's attention."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Finding:
    """Something worth an operator's attention: a stable ``code``, what was found, what to do."""

    code: str
    severity: str  # "warning" | "critical"
    message: str
    advice: str
    details: dict[str, Any] = field(default_factory=dict)
