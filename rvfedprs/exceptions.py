"""Exceptions raised for bad input; the CLI turns them into a message and a non-zero exit."""

from __future__ import annotations

__all__ = ["RvfedprsError", "ConfigError", "InputDataError", "GenotypeFormatError"]


class RvfedprsError(Exception):
    """Base class of the errors the CLI reports as a one-line message (exit status 2)."""


class ConfigError(RvfedprsError, ValueError):
    """A configuration file or option is invalid; the message names the key and its value."""


class InputDataError(RvfedprsError, ValueError):
    """Input data (samples, phenotypes, client folders, scoring files) is inconsistent."""


class GenotypeFormatError(InputDataError):
    """A genotype file (VCF, PLINK) cannot be read; the message names the file and line/value."""
