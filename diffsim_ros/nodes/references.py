"""The controller node's reference: hold where the arm is, or visit waypoints with rests.

Built from the control layer's :class:`~diffsim_ros.control.MinimumJerkMove`: from the
measured start, each waypoint is reached by a minimum-jerk move of ``move_duration`` and
held for ``hold_duration`` (the rests are the static data the estimator learns from).
"""

import numpy as np

from diffsim_ros.control import MinimumJerkMove, SetPoint
from diffsim_ros.runtime.params import ParameterError

__all__ = ["WaypointSequence", "make_reference", "waypoint_array"]


def waypoint_array(flat, n, where="reference.waypoints"):
    """Waypoints from a flat parameter list, shape (k, n) (k = 0 for an empty list).

    Raises:
        ParameterError: Length not a multiple of n, or non-finite values.
    """
    flat = np.asarray(flat, dtype=np.float64).reshape(-1)
    if flat.size % n:
        raise ParameterError(f"{where}: {flat.size} values is not a multiple of the {n} joints")
    if not np.all(np.isfinite(flat)):
        raise ParameterError(f"{where}: waypoints must be finite")
    return flat.reshape(-1, n)


class WaypointSequence:
    """Minimum-jerk moves through waypoints, each followed by a hold; then holds the last.

    Args:
        start: Measured start positions [rad], shape (n,).
        waypoints: Targets [rad], shape (k, n), k >= 1.
        t_start: Start time [s].
        move_duration: Duration of each move [s] (> 0).
        hold_duration: Rest at each waypoint [s] (>= 0).
        loop: After the last waypoint, start over from the first.
    """

    def __init__(self, start, waypoints, t_start, move_duration, hold_duration, loop=False):
        self.waypoints = np.asarray(waypoints, dtype=np.float64)
        if self.waypoints.ndim != 2 or len(self.waypoints) == 0:
            raise ValueError("WaypointSequence needs at least one waypoint, shape (k, n)")
        if not move_duration > 0 or not hold_duration >= 0:
            raise ValueError("move_duration must be > 0 and hold_duration >= 0")
        self.start = np.asarray(start, dtype=np.float64).copy()
        self.t_start, self.loop = float(t_start), bool(loop)
        self.segment = float(move_duration) + float(hold_duration)
        self.move_duration = float(move_duration)
        self._current = (None, None)  # (segment index, its move): the loop asks for the same one ~200 times

    @property
    def duration(self):
        """Time [s] from the start until the last waypoint's hold ends (one pass)."""
        return self.segment * len(self.waypoints)

    def _move(self, index):
        """The minimum-jerk move of segment ``index``, in time relative to the segment start."""
        if self._current[0] != index:
            k = len(self.waypoints)
            origin = self.start if index == 0 else self.waypoints[(index - 1) % k]
            self._current = (index, MinimumJerkMove(origin, self.waypoints[index % k], 0.0, self.move_duration))
        return self._current[1]

    def __call__(self, t):
        """``(q_d, qd_d, qdd_d)`` [rad, rad/s, rad/s²], each shape (n,), at time ``t`` [s]."""
        index = max(int((t - self.t_start) // self.segment), 0)
        if not self.loop:
            index = min(index, len(self.waypoints) - 1)
        return self._move(index)(t - self.t_start - index * self.segment)


def make_reference(start, waypoints, t_start, move_duration, hold_duration, loop=False):
    """SetPoint at ``start`` when there are no waypoints, else a :class:`WaypointSequence`."""
    if len(waypoints) == 0:
        return SetPoint(start)
    return WaypointSequence(start, waypoints, t_start, move_duration, hold_duration, loop)
