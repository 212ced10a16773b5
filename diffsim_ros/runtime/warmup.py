"""A node's numba kernels, compiled in a child process it owns, never on its executor.

numba compiles a kernel at its first call: minutes of CPU on a cold cache, which on the
executor froze a node (nothing published, Ctrl-C ignored until the compile ended, and a node
killed meanwhile never wrote the cache, so the next start froze again). A node that owns its
process therefore starts with a :class:`KernelWarmup`:

* the kernel families it needs (``python -m diffsim_ros.pipelines.kernels``) that are not
  current in the cache are compiled by a child process (``--warm-up``) that this process owns:
  niced, killed at the node's shutdown (and by the kernel if the node dies: ``PR_SET_PDEATHSIG``);
  each kernel it finishes is in the cache for the next start, even if the node stops first;
* then a dry run of the node's own compiled path (``prime``) on throwaway objects loads the
  cached kernels into this process on a worker thread, off the executor;
* until then the node publishes nothing that would need a kernel (see the nodes) and
  ``/diagnostics`` says ``warming up: compiling kernels (family ...)`` at WARN.

Whether a family is current is kept in a marker file per family, written once the family ran:
the numba and Python versions, a digest of the families' module, and every kernel module whose
kernels the family compiled or loaded, each with its fingerprint (:mod:`diffsim_ros._compiled`,
the same stamp that empties the module's stale cached kernels). A family is current iff all of
them still match: an edit to a kernel module, or to what it imports, makes stale exactly the
families that use it. The markers live where numba caches
this file's kernels would (``NUMBA_CACHE_DIR`` when set, else ``__pycache__`` beside this file,
else numba's user-wide cache), so they follow the cache they describe. A lock file per family
keeps two nodes from compiling the same family at once: the second waits, then finds it current.

The child is started by module name: the families run the nodes' models, so they live above
the nodes (``pipelines``); a process boundary, not an import.
"""

import contextlib
import functools
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from diffsim_ros.runtime.diagnostics import ERROR, OK, WARN, status
from diffsim_ros.runtime.scheduling import lower_thread_priority

__all__ = ["KernelWarmup", "PlainJointStateBounds", "WARMUP_MODULE", "family_lock", "mark_current", "marker_directory",
           "stale_families"]

WARMUP_MODULE = "diffsim_ros.pipelines.kernels"  # run as ``python -m``: its --warm-up mode
WARMUP_NICENESS = 5  # the child yields to control and drivers, but still finishes on a busy machine
_MARK = "diffsim_kernels.family."
_PACKAGE = Path(__file__).resolve().parents[1]  # the package directory
_CHILD_EXIT_WAIT_S = 0.5  # [s] after SIGTERM, before SIGKILL (the node must exit within 2 s)


def _marker_anchor():
    """A function of this file: numba's cache locator for it places the family markers."""


def marker_directory():
    """Directory of the family markers: where numba caches this file's kernels (see the module docstring)."""
    from numba.core.caching import FunctionCache

    return Path(FunctionCache(_marker_anchor)._cache_path)


_FAMILIES_FILE = _PACKAGE / "pipelines" / "kernels.py"  # read, not imported: it lives above this layer


@functools.cache
def _header():
    """The marker's first lines: the numba and Python versions, the families' module digest."""
    import numba

    families = hashlib.sha256(_FAMILIES_FILE.read_bytes()).hexdigest() if _FAMILIES_FILE.is_file() else "none"
    return f"diffsim kernels: numba {numba.__version__} python {sys.version.split()[0]}\nfamilies {families}\n"


def _marker(name):
    return marker_directory() / f"{_MARK}{name}"


def _current(text):
    """Whether a marker's text matches the versions, the families and every kernel module it lists."""
    from diffsim_ros._compiled import module_fingerprint

    header = _header()
    if not text.startswith(header):
        return False
    for line in text[len(header):].splitlines():
        relative, _, fingerprint = line.partition("\t")
        path = _PACKAGE / relative
        if not (fingerprint and path.is_file() and module_fingerprint(path, _PACKAGE) == fingerprint):
            return False
    return True


def stale_families(families):
    """The families of ``families`` (in their order) not compiled for the current kernels and numba."""
    stale = []
    for name in families:
        try:
            current = _current(_marker(name).read_text())
        except OSError:
            current = False
        if not current:
            stale.append(name)
    return stale


def mark_current(name):
    """Record that family ``name`` ran with the current kernels: those this process compiled or
    loaded are in the cache (the fingerprints were fixed when their modules were imported)."""
    from diffsim_ros._compiled import used_kernel_modules

    modules = sorted(str(path.relative_to(_PACKAGE)) + "\t" + fingerprint
                     for path, (root, fingerprint) in used_kernel_modules().items() if root == _PACKAGE)
    path = _marker(name)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(_header() + "".join(line + "\n" for line in modules))
        partial.replace(path)
    except OSError:  # a read-only cache: numba compiles in memory, nothing to record
        pass


@contextlib.contextmanager
def family_lock(name):
    """Hold the family's lock file (blocking): one process compiles a family at a time."""
    import fcntl

    path = Path(f"{_marker(name)}.lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError:  # read-only: no lock, each process compiles in memory
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes or the process dies
        yield


class PlainJointStateBounds:
    """:class:`~diffsim_ros.control.safety.JointStateBounds` checked with numpy, no compiled kernel.

    A node's joint-state input checks every message from the first one on, before any kernel
    is loaded; the safety layer keeps the compiled check. Same verdicts and messages.

    Args:
        bounds: JointStateBounds.
    """

    def __init__(self, bounds):
        self.bounds = bounds

    def violation(self, q, qd=None):
        """Why ``(q [rad], qd [rad/s])`` (finite, shape (n,); qd may be None) is implausible, or None."""
        b = self.bounds
        speed = np.zeros_like(q) if qd is None else np.asarray(qd)
        bad = ~((b.q_low <= q) & (q <= b.q_high)) | (np.abs(speed) > b.max_speed)
        if not bad.any():
            return None
        j = int(np.argmax(bad))
        name = b.joint_names[j]
        if not b.q_low[j] <= q[j] <= b.q_high[j]:
            return (f"{name} position {q[j]:.6g} rad is more than {b.position_slack:g} rad outside its limits "
                    f"[{b.lower[j]:.6g}, {b.upper[j]:.6g}]")
        return f"{name} speed {abs(speed[j]):.6g} rad/s exceeds {b.speed_factor:g} x its velocity limit {b.velocity_limit[j]:.6g}"


class KernelWarmup:
    """The kernels of a node's compiled path, compiled in a child process, then loaded off the executor.

    Args:
        families: Kernel families the node's path needs (names of ``pipelines.kernels.FAMILIES``).
        prime: Callable running the node's compiled path once on throwaway objects; run on a
            worker thread once the families are current (cache hits; a kernel no family covers
            compiles there, still off the executor).
        logger: Node logger (transitions at INFO, a failure at ERROR).
        niceness: CPU niceness of the child (0-19).
        enabled: False: nothing to do, :attr:`ready` at once (a node sharing its process, which
            compiles on first use as the library does).

    Attributes:
        state: ``"compiling"``, ``"loading"``, ``"ready"`` or ``"failed"``.
        compiling: Families the child compiles (empty when all were current).
        reason: Why the warm-up failed ('' otherwise).
    """

    def __init__(self, families, prime, logger=None, niceness=WARMUP_NICENESS, enabled=True):
        self.families, self._prime, self._logger = tuple(families), prime, logger
        self.compiling, self.reason = [], ""
        self._child = self._thread = self._errors = None
        self._outcome = {}
        self._started = time.monotonic()
        self.state = "loading" if enabled else "ready"
        if enabled:
            self.compiling = stale_families(self.families)
        if self.compiling:
            self._start_child(niceness)

    def _start_child(self, niceness):
        self._errors = tempfile.TemporaryFile()
        command = [sys.executable, "-m", WARMUP_MODULE, "--warm-up", str(os.getpid()), "--nice", str(int(niceness)),
                   *self.compiling]
        self._child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._errors)
        self.state = "compiling"
        self._log("info", f"warming up: compiling kernels (family {', '.join(self.compiling)}) in process "
                          f"{self._child.pid}; nothing that needs them is published meanwhile")

    def _log(self, level, message):
        if self._logger is not None:
            getattr(self._logger, level)(message)

    @property
    def ready(self):
        """Whether the node's kernels are loaded (:meth:`poll`)."""
        return self.poll()

    def poll(self):
        """Advance the warm-up (child done: start loading; loading done: ready); returns :attr:`ready`.

        Microseconds: a ``waitpid`` without waiting, or a thread's liveness.
        """
        if self.state == "compiling":
            self._poll_child()
        if self.state == "loading":
            self._poll_loading()
        return self.state == "ready"

    def _poll_child(self):
        code = self._child.poll()
        if code is None:
            return
        if code < 0:  # a Ctrl-C reaches the child too: the node is going down
            self.state, self.reason = "failed", f"kernel compilation ended by signal {-code}"
            self._log("warning", self.reason)
            return
        if code != 0:
            self._fail(f"kernel compilation failed (exit code {code}): {self._last_error_line()}")
            return
        self._log("info", f"kernels compiled in {time.monotonic() - self._started:.0f} s; loading them")
        self.state = "loading"

    def _last_error_line(self):
        self._errors.seek(0)
        lines = [line.strip() for line in self._errors.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no message"

    def _poll_loading(self):
        if self._thread is None:  # started from the first poll: on the executor, after its scheduling is set
            self._thread = threading.Thread(target=self._load, name="kernel-warmup", daemon=True)
            self._thread.start()
            return
        if self._thread.is_alive():
            return
        if "error" in self._outcome:
            err = self._outcome["error"]
            self._fail(f"loading the kernels failed: {type(err).__name__}: {err}")
            return
        self.state = "ready"
        self._log("info", f"kernels ready after {time.monotonic() - self._started:.1f} s")

    def _load(self):
        lower_thread_priority(WARMUP_NICENESS)
        try:
            self._prime()
        except Exception as err:  # reported by the executor's next poll
            self._outcome["error"] = err

    def _fail(self, reason):
        self.state, self.reason = "failed", reason
        self._log("error", f"{reason}; nothing that needs the kernels will run: compile them with "
                           f"`python -m {WARMUP_MODULE}` and restart the node")

    def status(self, label):
        """The warm-up as a diagnostic Status named ``<label>: kernels`` (polls it first: an inactive
        node still loads its kernels)."""
        self.poll()
        values = {"families": ",".join(self.families) or "none", "state": self.state,
                  "compiled at start": ",".join(self.compiling) or "none (all cached)"}
        if self.state in ("compiling", "loading"):
            values["warming up for [s]"] = f"{time.monotonic() - self._started:.1f}"
        if self.state == "compiling":
            values["compiler process"] = self._child.pid
            message = f"warming up: compiling kernels (family {', '.join(self.compiling)})"
            return status(WARN, f"{label}: kernels", message, values)
        if self.state == "loading":
            return status(WARN, f"{label}: kernels", "warming up: loading the compiled kernels", values)
        if self.state == "failed":
            return status(ERROR, f"{label}: kernels", self.reason, values)
        return status(OK, f"{label}: kernels", "ready", values)

    def close(self):
        """End the child now (shutdown): SIGTERM, SIGKILL if it is still there after 0.5 s."""
        child = self._child
        if child is None or child.poll() is not None:
            return
        self.state, self.reason = "failed", "stopped at shutdown"
        child.terminate()
        try:
            child.wait(_CHILD_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        self._log("info", "kernel compilation stopped at shutdown (the kernels it finished are cached)")
