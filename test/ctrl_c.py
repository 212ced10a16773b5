"""Ctrl-C in tests as in a terminal: Python's SIGINT handler, and a library that swallows one.

A pytest-xdist worker ignores SIGINT, so a test that sends itself one installs Python's
handler for the test (:func:`python_sigint_handler`); a subprocess gets a terminal's
disposition back with ``preexec_fn=terminal_sigint``.
"""

import contextlib
import os
import signal
import time

__all__ = ["python_sigint_handler", "swallow_a_ctrl_c", "terminal_sigint"]

SIGNAL_WAIT = 5.0  # [s] the longest a SIGINT could take to arrive (it is raised at once)


@contextlib.contextmanager
def python_sigint_handler():
    """Python's SIGINT handler (KeyboardInterrupt) inside the block; the runner's handler back after."""
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, runner_handler)


def swallow_a_ctrl_c():
    """Send this process a real SIGINT and drop the KeyboardInterrupt, as some libraries do."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(SIGNAL_WAIT)
    except KeyboardInterrupt:
        return
    raise AssertionError("the SIGINT raised no KeyboardInterrupt (is Python's handler in place?)")


def terminal_sigint():
    """``preexec_fn`` of a subprocess: SIGINT as in a terminal, even if the test runner ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
