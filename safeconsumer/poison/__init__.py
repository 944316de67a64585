"""Poison-record policies (``Skip``, ``DeadLetter``), the handler that applies one for a consumer, and
the dead-letter writer (``_policy``). Internal: applications import them from :mod:`safeconsumer`.
"""
