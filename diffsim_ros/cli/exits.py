"""Exit codes of every ``diffsim-ros`` subcommand (one definition, documented in the README)."""

__all__ = ["OK", "FAILURE", "BAD_INPUT", "UNDETERMINED", "INTERRUPTED"]

OK = 0
"""Done; every requested result was determined and written."""
FAILURE = 1
"""An unexpected runtime failure (the message says what); nothing was written."""
BAD_INPUT = 2
"""Bad arguments, files or data (the message names the problem); nothing was written."""
UNDETERMINED = 3
"""The data do not determine a requested result (named), or a fit failed its quality check;
nothing was written unless the command was asked to write partial results."""
INTERRUPTED = 130
"""Interrupted by Ctrl-C (SIGINT); nothing half-written was left behind."""
