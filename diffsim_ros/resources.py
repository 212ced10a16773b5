"""Locate the package's shared files (urdf/, config/, launch/) in every installation layout.

Order: an ament index (colcon install on a ROS 2 workstation), then ``<prefix>/share`` of a
pip install, then the source checkout (editable installs and tests).
"""

import os
import sys
from pathlib import Path

__all__ = ["describe_path", "share_directory", "resolve_resource"]

PACKAGE = "diffsim_ros"


def share_directory():
    """The directory holding ``urdf/``, ``config/`` and ``launch/`` of this package."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

        try:
            return Path(get_package_share_directory(PACKAGE))
        except (PackageNotFoundError, OSError):  # OSError: no AMENT_PREFIX_PATH (ROS wheels, nothing sourced)
            pass
    except ImportError:
        pass
    source = Path(__file__).resolve().parents[1]
    if (source / "package.xml").is_file() and (source / "urdf").is_dir():
        return source
    installed = Path(sys.prefix) / "share" / PACKAGE
    if installed.is_dir():
        return installed
    raise FileNotFoundError(f"cannot find the {PACKAGE} share directory (looked in {source} and {installed})")


def resolve_resource(uri, relative_to=None):
    """Resolve ``package://diffsim_ros/...``, absolute, or relative paths to a filesystem path.

    Args:
        uri: ``package://<pkg>/<path>``, an absolute path, or a path relative to ``relative_to``.
        relative_to: Directory for relative paths (default: the current directory).

    Returns:
        Path (not checked for existence).

    Raises:
        FileNotFoundError: A ``package://`` URI of another package with no ament index to find it.
    """
    uri = os.fspath(uri)
    if uri.startswith("package://"):
        package, _, rest = uri[len("package://"):].partition("/")
        if package == PACKAGE:
            return share_directory() / rest
        try:
            from ament_index_python.packages import get_package_share_directory

            return Path(get_package_share_directory(package)) / rest
        except Exception:
            raise FileNotFoundError(f"cannot resolve {uri}: package '{package}' not found") from None
    path = Path(uri).expanduser()
    if not path.is_absolute() and relative_to is not None:
        path = Path(relative_to) / path
    return path


def describe_path(path, given=None, relative_to=None, what=None):
    """A path for a message: absolute, and what a relative one was relative to.

    Args:
        path: The path used (relative to the current directory if not absolute).
        given: The path as the user wrote it (default: ``path``).
        relative_to: The directory a relative ``given`` was taken from (default: the current
            directory).
        what: What ``relative_to`` is, e.g. ``"the config file /abs/robot.yaml"`` (default:
            ``"the current directory <cwd>"`` or ``"directory <relative_to>"``).

    Returns:
        ``"/abs/dir/panda.urdf ('panda.urdf' relative to the config file /abs/dir/robot.yaml)"``,
        or just the absolute path when ``given`` was absolute.
    """
    given = str(path if given is None else given)
    resolved = Path(os.path.abspath(Path(path).expanduser()))
    if Path(given).expanduser().is_absolute() or "://" in given:
        return str(resolved) if "://" not in given else f"{resolved} ({given})"
    if what is None:
        what = f"the current directory {Path.cwd()}" if relative_to is None else \
            f"the directory {os.path.abspath(relative_to)}"
    return f"{resolved} ({given!r} relative to {what})"
