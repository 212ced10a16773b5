"""``python -m diffsim_ros.cli``: the ``diffsim-ros`` command, for a source tree not installed as a script."""

from diffsim_ros.cli import main

__all__ = []

if __name__ == "__main__":
    main()
