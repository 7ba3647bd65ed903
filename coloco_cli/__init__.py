"""The `coloco` command line: one entry point for operators, contributors, holders, organisers."""

__version__ = "0.1.0"
"""The package's version: pyproject.toml reads it from here (one definition; no metadata lookup
at start-up, which cost `coloco --version` a tenth of a second)."""
