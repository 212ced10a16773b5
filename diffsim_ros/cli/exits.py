"""Exit codes of every ``diffsim-ros`` subcommand (one definition, documented in the README)."""

import sys

__all__ = ["OK", "FAILURE", "BAD_INPUT", "UNDETERMINED", "INTERRUPTED", "write_guarded"]

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
"""Interrupted by Ctrl-C (SIGINT); nothing half-written was left behind, and nothing was written
after the Ctrl-C even if a library swallowed it (the atomic writers of :mod:`diffsim_ros.outputs`
check the record that :func:`diffsim_ros.cli.main` keeps with ``record_interrupts``)."""


def write_guarded(prog, out, write):
    """Run ``write()``, which writes the outputs into ``out`` atomically (all or nothing).

    Args:
        prog: Command name for messages (``"diffsim-ros replay"``).
        out: The output directory (named in messages).
        write: Callable writing the outputs; its result is returned.

    Returns:
        ``(OK, write())``, or ``(INTERRUPTED, None)`` after a Ctrl-C (also one swallowed before:
        the atomic writer raises KeyboardInterrupt) and ``(FAILURE, None)`` after an OSError,
        each said on stderr (nothing was written).
    """
    try:
        return OK, write()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; nothing written", file=sys.stderr)
        return INTERRUPTED, None
    except OSError as err:
        print(f"{prog}: error: cannot write {out}: {err}", file=sys.stderr)
        return FAILURE, None
