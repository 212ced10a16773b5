"""``njit`` / ``prange`` from numba, or stand-ins so the same kernels run as plain Python without it.

numba's on-disk cache (``cache=True``) is checked against the kernel's own source file only:
a kernel that calls another file's kernel, or reads a constant it imports from another module,
keeps its stale machine code when only that other file changes (numba's documented limit).
``njit`` here therefore stamps the cached kernels of every kernel module (a module importing
this ``njit``) with a fingerprint of that module and of the package modules it imports,
transitively, and empties that module's cached kernels when the stamp differs, before any of
them is loaded. Each module has its own stamp beside its cache files
(``<module>.diffsim_kernels.fingerprint`` in the cache directory): editing one kernel module
recompiles it and the kernel modules importing it, not every kernel of the package.
"""

import functools
import hashlib
import os
import re
import sys
from pathlib import Path

__all__ = ["njit", "prange", "module_fingerprint", "module_dependencies", "refresh_cache_files", "used_kernel_modules",
           "STAMP_SUFFIX"]

STAMP_SUFFIX = ".diffsim_kernels.fingerprint"  # <module stem> + this, in the module's cache directory
KERNEL_MARK = "_compiled import"  # how a kernel module gets its njit


_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]+)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)$", re.MULTILINE)


def _imported_files(path, root):
    """Files of the package at ``root`` that the module at ``path`` imports (one level).

    Import statements are read with regular expressions, not parsed (``ast`` costs half a
    second per process for the kernel modules); imports inside strings or functions count too,
    which only widens the fingerprint.
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


@functools.lru_cache(maxsize=None)
def _imported_files_of(path, root, version):
    """:func:`_imported_files`, kept per process for each ``version`` (modification time, size) of the file."""
    return frozenset(_imported_files(path, root))


def module_dependencies(path, root):
    """The module at ``path`` and every file of the package at ``root`` it imports, transitively.

    A kernel reads the globals of its own module (called kernels, constants); those come from
    the module's imports, and a called kernel reads its own module's imports in turn.
    """
    path, root = Path(path).resolve(), Path(root).resolve()
    found, pending = set(), [path]
    while pending:
        current = pending.pop()
        if current not in found:
            found.add(current)
            status = current.stat()
            pending.extend(_imported_files_of(current, root, (status.st_mtime_ns, status.st_size)) - found)
    return found


@functools.cache
def module_fingerprint(path, root):
    """Hex digest of the module at ``path`` and of the package modules (``root``: the package
    directory) it imports transitively (:func:`module_dependencies`).

    Cached per process: the stamp a process checks its cache against is fixed at its first
    use, so sources edited while it compiles leave the stamp stale, never falsely current.
    """
    root = Path(root).resolve()
    digest = hashlib.sha256()
    for file in sorted(module_dependencies(path, root)):
        digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def refresh_cache_files(directory, stem, fingerprint):
    """Delete the numba cache files of module ``stem`` in ``directory`` unless they are stamped with ``fingerprint``.

    numba names a module's cache files ``<stem>.<function>-<line>.pyXY.nbi`` (and ``.nbc``);
    those of the other modules in the directory are kept.

    Returns:
        True when the module was stamped anew (its cached kernels, if any, were removed).
    """
    directory = Path(directory)
    stamp = directory / f"{stem}{STAMP_SUFFIX}"
    try:
        if stamp.read_text() == fingerprint:
            return False
    except OSError:
        pass
    try:
        for path in list(directory.glob(f"{stem}.*.nbi")) + list(directory.glob(f"{stem}.*.nbc")):
            path.unlink(missing_ok=True)
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{stamp.name}.{os.getpid()}"
        partial.write_text(fingerprint)
        partial.replace(stamp)
    except OSError:  # a read-only cache: numba itself then compiles in memory
        pass
    return True


_checked = set()  # (cache directory, module file) checked in this process
_dispatchers = []  # (module file, package root, dispatcher) of every kernel made here


def _package_root(fn):
    """Directory of the top-level package of ``fn``'s module, or None (a script's function)."""
    paths = getattr(sys.modules.get(fn.__module__.split(".")[0]), "__path__", None)
    return Path(list(paths)[0]).resolve() if paths else None


def _fresh(dispatcher):
    """Check the cache files of the dispatcher's module once per process (before any kernel loads)."""
    cache = getattr(dispatcher, "_cache", None)
    directory = getattr(cache, "_cache_path", None)
    root = _package_root(dispatcher.py_func)
    source = getattr(dispatcher.py_func, "__code__", None)
    if directory is not None and root is not None and source is not None:
        source = Path(source.co_filename).resolve()
        _dispatchers.append((source, root, dispatcher))
        if (directory, source) not in _checked:
            _checked.add((directory, source))
            refresh_cache_files(directory, source.stem, module_fingerprint(source, root))
    return dispatcher


def used_kernel_modules():
    """``{module file: (package root, fingerprint)}`` of the kernel modules with a kernel compiled or
    loaded in this process (what a kernel family that ran here needs)."""
    return {source: (root, module_fingerprint(source, root)) for source, root, d in _dispatchers if d.overloads}


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
