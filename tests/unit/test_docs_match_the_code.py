"""The migration guide names what the code has: the keyword-only options, the deprecated names."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from safeconsumer import SafeConsumer

MIGRATION = Path(__file__).resolve().parents[2] / "docs" / "migration.md"


def test_the_migration_guide_lists_every_keyword_only_option() -> None:
    text = MIGRATION.read_text()
    sentence = re.search(r"Options are keyword-only arguments \(([^)]*)\)", text)
    assert sentence is not None, "docs/migration.md no longer lists the options"
    listed = set(re.findall(r"`(\w+)`", sentence.group(1)))
    options = {
        name
        for name, param in inspect.signature(SafeConsumer.__init__).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert listed == options, f"missing: {sorted(options - listed)}; not options: {sorted(listed - options)}"


def test_the_migration_guide_uses_no_deprecated_call_outside_its_deprecation_section() -> None:
    text = MIGRATION.read_text().split("### Deprecated", 1)[0]
    assert ".delivery_stats()" not in text and ".parked" not in text
