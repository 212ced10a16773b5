"""Exit codes of every ``diffsim-ros`` subcommand (one definition, documented in the README)."""

import contextlib
import signal
import sys
import threading

__all__ = ["OK", "FAILURE", "BAD_INPUT", "UNDETERMINED", "INTERRUPTED", "check_interrupted", "record_interrupts", "write_guarded"]

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


_interrupts = []  # SIGINTs received during this command


def _on_sigint(signum, frame):
    # Python's own handler plus a record: a library that catches the KeyboardInterrupt and goes
    # on (swallowing it) cannot make a command write its outputs after a Ctrl-C.
    _interrupts.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def record_interrupts():
    """Around a command: forget earlier Ctrl-Cs and record those to come; restores the handler.

    Only in the main thread, where Python's handler is in place: a SIGINT the parent ignores
    (a background job) stays ignored.
    """
    _interrupts.clear()
    install = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if install:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def check_interrupted():
    """Raise KeyboardInterrupt if Ctrl-C was pressed during this command, even if it was swallowed.

    Commands call it right before they write their outputs.
    """
    if _interrupts:
        raise KeyboardInterrupt


def write_guarded(prog, out, write):
    """Run ``write()``, which writes the outputs into ``out`` atomically (all or nothing).

    Args:
        prog: Command name for messages (``"diffsim-ros replay"``).
        out: The output directory (named in messages).
        write: Callable writing the outputs; its result is returned.

    Returns:
        ``(OK, write())``, or ``(INTERRUPTED, None)`` after a Ctrl-C and ``(FAILURE, None)``
        after an OSError, each said on stderr (nothing was written).
    """
    try:
        check_interrupted()
        return OK, write()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; nothing written", file=sys.stderr)
        return INTERRUPTED, None
    except OSError as err:
        print(f"{prog}: error: cannot write {out}: {err}", file=sys.stderr)
        return FAILURE, None
