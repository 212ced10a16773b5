"""``njit`` / ``prange`` from numba, or stand-ins so the same kernels run as plain Python without it.

numba's on-disk cache (``cache=True``) is checked against the kernel's own source file only:
a kernel that calls another file's kernel, or reads a constant it imports from another module,
keeps its stale machine code when only that other file changes (numba's documented limit).
``njit`` here therefore stamps every cache directory it uses with a fingerprint of the
package's kernel modules and of the package modules they import, and empties the directory's
cached kernels when the stamp differs, before any kernel is loaded from it.
"""

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

__all__ = ["njit", "prange", "kernel_fingerprint", "refresh_cache_directory"]

STAMP = "diffsim_kernels.fingerprint"
KERNEL_MARK = "_compiled import"  # how a kernel module gets its njit


_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]+)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)$", re.MULTILINE)


def _imported_files(path, root):
    """Files of the package at ``root`` that the module at ``path`` imports (one level).

    Import statements are read with regular expressions, not parsed (``ast`` costs half a
    second per process for the kernel modules); imports inside strings count too, which only
    widens the fingerprint.
    """
    parts = path.relative_to(root.parent).with_suffix("").parts
    text = path.read_text()
    modules = []
    for module, names in _FROM.findall(text):
        level = len(module) - len(module.lstrip("."))
        if level:  # relative: from the module's own package upwards
            module = ".".join(parts[: len(parts) - level] + tuple(m for m in module[level:].split(".") if m))
        names = [n.split(" as ")[0].strip() for n in names.strip("()").replace("\\", " ").split(",")]
        modules += [module] + [f"{module}.{n}" for n in names if n.isidentifier()]
    for names in _IMPORT.findall(text):
        modules += [n.split(" as ")[0].strip() for n in names.split(",")]
    found = set()
    for module in modules:
        name = module.split(".")
        if name[0] != root.name:
            continue
        stem = root.parent.joinpath(*name)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                found.add(candidate)
    return found


@functools.cache
def kernel_fingerprint(root):
    """Hex digest of the kernel modules under the package directory ``root`` and what they import.

    Kernel modules are those importing this module's ``njit``; with them, every module of the
    same package they import (constants and called kernels live there).
    """
    root = Path(root)
    kernels = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts and KERNEL_MARK in p.read_text())
    files = set(kernels)
    for path in kernels:
        files |= _imported_files(path, root)
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def refresh_cache_directory(directory, fingerprint):
    """Delete the numba cache files of ``directory`` unless it is stamped with ``fingerprint``.

    Returns:
        True when the directory was stamped anew (its cached kernels, if any, were removed).
    """
    directory, stamp = Path(directory), Path(directory) / STAMP
    try:
        if stamp.read_text() == fingerprint:
            return False
    except OSError:
        pass
    try:
        for path in list(directory.glob("*.nbi")) + list(directory.glob("*.nbc")):
            path.unlink(missing_ok=True)
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{STAMP}.{os.getpid()}"
        partial.write_text(fingerprint)
        partial.replace(stamp)
    except OSError:  # a read-only cache: numba itself then compiles in memory
        pass
    return True


_checked = set()


def _package_root(fn):
    """Directory of the top-level package of ``fn``'s module, or None (a script's function)."""
    paths = getattr(sys.modules.get(fn.__module__.split(".")[0]), "__path__", None)
    return Path(list(paths)[0]).resolve() if paths else None


def _fresh(dispatcher):
    """Check the dispatcher's cache directory once per process (before any kernel loads)."""
    cache = getattr(dispatcher, "_cache", None)
    directory = getattr(cache, "_cache_path", None)
    root = _package_root(dispatcher.py_func)
    if directory is not None and root is not None and directory not in _checked:
        _checked.add(directory)
        refresh_cache_directory(directory, kernel_fingerprint(root))
    return dispatcher


try:
    from numba import njit as _numba_njit
    from numba import prange

    def njit(*args, **kwargs):
        """numba's ``njit``, whose cache is refreshed when a kernel's dependencies change."""
        if args and callable(args[0]):
            return _fresh(_numba_njit(args[0], **kwargs))
        decorate = _numba_njit(*args, **kwargs)
        return lambda fn: _fresh(decorate(fn))

except ImportError:  # pragma: no cover - numba is a declared dependency
    prange = range

    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda fn: fn)
