"""The `coloco` command line: one entry point for operators, contributors, holders, organisers."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("coloco")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0+unknown"
