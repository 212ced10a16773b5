"""Locate the package's shared files (urdf/, config/, launch/) in every installation layout.

Order: an ament index (colcon install on a ROS 2 workstation), then ``<prefix>/share`` of a
pip install, then the source checkout (editable installs and tests).
"""

import os
import sys
from pathlib import Path

__all__ = ["share_directory", "resolve_resource"]

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
