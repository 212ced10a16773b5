"""Output paths: checked before any work, written atomically, leftovers of killed writers cleaned up.

* :func:`check_output_path` — refuse, before a long computation starts, an output that could
  not be written at its end: an existing path without ``force``, a file where a directory
  goes (or the reverse), a parent that is a file, an unwritable directory.
* :func:`atomic_file` and :class:`atomic_directory` — write into a hidden sibling and rename it
  into place on success, so readers never see partial outputs and a failure (or Ctrl-C) leaves
  nothing behind.
* :func:`record_interrupts` and :func:`check_interrupted` — the Ctrl-C record: a command run
  inside ``record_interrupts()`` remembers every SIGINT, and every atomic writer checks the
  record before it creates anything and before it renames into place. A Ctrl-C that a library
  catches and drops (swallows) therefore still stops every write that follows it.
* Hidden siblings carry the writer's process id and host (``.NAME.tmp-PID@HOST.XXXX``); a
  later write to the same path removes those whose process is gone (SIGKILL, power loss) and
  restores a previous version that a killed writer had moved aside but not yet replaced.
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import uuid
from pathlib import Path

__all__ = ["OutputPathError", "atomic_directory", "atomic_file", "atomic_write_text", "check_interrupted",
           "check_output_path", "clean_stale_siblings", "record_interrupts"]


class OutputPathError(ValueError):
    """An output path that cannot be written (the message names the path and the problem)."""


_HOST = socket.gethostname().replace("/", "_")

_interrupts = []  # SIGINTs received inside record_interrupts(); empty outside it


def _record_sigint(signum, frame):
    # Python's own handler plus a record: a library that catches the KeyboardInterrupt and goes
    # on (swallowing it) cannot make a writer commit its output after a Ctrl-C.
    _interrupts.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def record_interrupts():
    """Around a command: record its Ctrl-Cs (SIGINT) for :func:`check_interrupted`.

    Only in the main thread with Python's handler in place (a SIGINT that the parent process
    ignores, as for a background job, stays ignored). On exit, Python's handler is restored and
    the record is forgotten, so writes after the command are not affected.
    """
    install = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if install:
        _interrupts.clear()
        signal.signal(signal.SIGINT, _record_sigint)
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _interrupts.clear()


def check_interrupted():
    """Raise KeyboardInterrupt if Ctrl-C was pressed inside :func:`record_interrupts`, even if swallowed.

    Every atomic writer calls it before it creates anything and before it renames into place.
    """
    if _interrupts:
        raise KeyboardInterrupt


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tag():
    return f"{os.getpid()}@{_HOST}"


def _existing_ancestor(path):
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def check_output_path(path, *, force=False, kind="file", what="output"):
    """Check that ``path`` can be written, before any work.

    Args:
        path: Output file or directory (missing parents will be created).
        force: An existing output may be replaced.
        kind: ``"file"`` or ``"directory"``.
        what: What the output is, for messages.

    Returns:
        ``Path(path)``.

    Raises:
        FileExistsError: ``path`` exists and ``force`` is False.
        OutputPathError: A file where a directory goes or the reverse, a parent that is not a
            directory, or a directory that cannot be written.
    """
    path = Path(path)
    if kind not in ("file", "directory"):
        raise ValueError(f"kind must be 'file' or 'directory', got {kind!r}")
    if path.name in ("", ".", ".."):  # '.', '/', 'a/..': no name to write to, and replacing it would move the tree
        raise OutputPathError(f"{what} {path} names no {kind} of its own; give a path that ends in a name, e.g. {Path(path, 'out')}")
    if path.exists() or path.is_symlink():
        if kind == "directory" and not path.is_dir():
            raise OutputPathError(f"{what} {path} exists and is not a directory; refusing to replace a file "
                                  "with a directory (remove it or choose another path)")
        if kind == "file" and path.is_dir():
            raise OutputPathError(f"{what} {path} is a directory; give a file path")
        if not force:
            raise FileExistsError(f"{what} {path} exists; use --force to replace it")
    parent = path.parent
    ancestor = _existing_ancestor(parent)
    if not ancestor.is_dir():
        raise OutputPathError(f"cannot create {what} {path}: {ancestor} is not a directory")
    try:  # os.access is not enough: root, read-only mounts, ACLs
        fd, probe = tempfile.mkstemp(prefix=".diffsim-write-probe-", dir=ancestor)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise OutputPathError(f"cannot write {what} {path}: {ancestor} is not writable "
                              f"({err.strerror or err})") from None
    return path


def _stale_pattern(name):
    return re.compile(rf"^\.{re.escape(name)}\.(?P<kind>tmp|old)-(?P<pid>\d+)@(?P<host>.+)\.[^.]+$")


def _process_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def clean_stale_siblings(path):
    """Remove hidden siblings of ``path`` left by writers on this host that no longer run.

    A previous version moved aside (``.NAME.old-*``) is put back when ``path`` itself is
    missing (the writer died between its two renames). Returns the paths removed or restored.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return []
    pattern, handled = _stale_pattern(path.name), []
    for entry in sorted(parent.iterdir()):
        match = pattern.match(entry.name)
        if match is None or match["host"] != _HOST or int(match["pid"]) == os.getpid():
            continue
        if not _process_gone(int(match["pid"])):
            continue
        if match["kind"] == "old" and not (path.exists() or path.is_symlink()):
            os.replace(entry, path)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        handled.append(entry)
    return handled


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Write a file atomically: ``with atomic_file(path, "wb") as handle: ...``.

    The file appears at ``path`` (replacing an existing one) only when the block succeeds;
    permissions follow the umask. Missing parent directories are created.

    Raises:
        KeyboardInterrupt: Ctrl-C was recorded (:func:`check_interrupted`), before the write
            or during it; nothing is created, or the temporary file is removed.
    """
    path = Path(path)
    check_interrupted()  # after a Ctrl-C, not even a parent directory
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_siblings(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{_tag()}.", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        check_interrupted()  # one swallowed while the contents were made
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; outputs follow the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path, text):
    """Write the string ``text`` to ``path`` atomically (:func:`atomic_file` in text mode)."""
    with atomic_file(path, "w") as handle:
        handle.write(text)


class atomic_directory:
    """Create an output directory atomically: files go to a hidden sibling, renamed on success.

    Args:
        path: Final directory (missing parents are created).
        force: Replace an existing directory (only after everything was written).

    Raises:
        FileExistsError: ``path`` exists and ``force`` is False (raised on construction, before
            any work).
        OutputPathError: ``path`` is a file, or its parent cannot be written (on construction).
        KeyboardInterrupt: Ctrl-C was recorded (:func:`check_interrupted`) on entering the
            block or before the rename at its end; the hidden directory is removed.
    """

    def __init__(self, path, force=False):
        self.path = check_output_path(path, force=force, kind="directory", what="output directory")
        self.force = force
        self.tmp = None

    def __enter__(self):
        check_interrupted()  # after a Ctrl-C, not even a parent directory
        self.path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_siblings(self.path)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-{_tag()}.", dir=self.path.parent))
        os.chmod(self.tmp, 0o777 & ~_umask())
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        try:
            check_interrupted()  # one swallowed while the files were written
            self._swap()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        return False

    def _swap(self):
        if not (self.path.exists() or self.path.is_symlink()):
            os.replace(self.tmp, self.path)
            return
        if not self.path.is_dir() or not self.force:  # appeared while we worked
            raise OutputPathError(f"output directory {self.path} appeared while writing; nothing replaced")
        backup = self.path.with_name(f".{self.path.name}.old-{_tag()}.{uuid.uuid4().hex[:8]}")
        os.replace(self.path, backup)
        os.replace(self.tmp, self.path)
        try:
            if backup.is_dir() and not backup.is_symlink():
                shutil.rmtree(backup)
            else:
                backup.unlink()
        except OSError:
            pass  # named with our process id: a later write to this path removes it
