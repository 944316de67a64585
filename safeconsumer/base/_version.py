"""The package version, in a module importing nothing (otel reads it without importing the package)."""

__version__ = "0.1.0"
