"""Topic-level entries (names, ``^regex`` strings, compiled patterns), validated once for every consumer."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ._errors import InvalidPauseRequest

__all__ = ["parse_topic_entries"]


def parse_topic_entries(topics: object) -> tuple[list[str], list[re.Pattern[str]]]:
    """Split topic-level entries into exact names and compiled patterns, validating each.

    An entry is a topic name, a string starting with ``^`` (a regular expression, the
    convention of ``subscribe()``), or a compiled ``re.Pattern``. A single entry may be
    passed on its own instead of in a list.
    """
    if isinstance(topics, (str, re.Pattern)):
        entries: Sequence[object] = [topics]
    elif isinstance(topics, Iterable) and not isinstance(topics, (bytes, dict)):
        entries = list(topics)
    else:
        raise InvalidPauseRequest(
            f"topics must be a topic name, a '^regex' string, an re.Pattern or a list of them, "
            f"got {type(topics).__name__}"
        )
    if not entries:
        raise InvalidPauseRequest("topics is empty: name at least one topic or pattern")
    names: list[str] = []
    patterns: list[re.Pattern[str]] = []
    for entry in entries:
        if isinstance(entry, re.Pattern):
            if not isinstance(entry.pattern, str):
                raise InvalidPauseRequest("a topic pattern must be a str pattern, not bytes")
            patterns.append(entry)
        elif isinstance(entry, str):
            if not entry.strip():
                raise InvalidPauseRequest("a topic name is empty")
            if entry.startswith("^"):
                try:
                    patterns.append(re.compile(entry))
                except re.error as exc:
                    raise InvalidPauseRequest(f"invalid topic regex {entry!r}: {exc}") from None
            else:
                names.append(entry)
        else:
            raise InvalidPauseRequest(
                f"a topic entry must be a str or re.Pattern, got {type(entry).__name__} ({entry!r})"
            )
    return names, patterns
