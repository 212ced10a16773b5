"""Joint-space references: what a controller should track, as a function of time.

A reference is any callable ``reference(t) -> (q_d, qd_d, qdd_d)`` returning float64 arrays
of shape (n,) [rad, rad/s, rad/s²]; these cover set-points, point-to-point moves and waypoint
sequences with rests (the controller node's reference: the rests are the static data the
estimator learns from). The quintic here is also the recording scenarios' profile.

Targets are checked against the joint limits where they enter (:func:`check_within_limits`):
a set-point or a move between targets inside the limits stays inside them (a minimum-jerk move
never overshoots its end points).
"""

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.vectors import to_numpy

__all__ = ["MinimumJerkMove", "SetPoint", "WaypointSequence", "check_within_limits", "make_reference", "quintic_profile"]


def check_within_limits(targets, model, what="reference"):
    """Raise ControlError naming every target outside the model's joint limits.

    Args:
        targets: Joint positions [rad], shape (n,) or (k, n).
        model: RobotModel (joint names, ``lower``/``upper`` limits).
        what: Name of the targets, for the message.

    Returns:
        ``targets`` as a float64 array of shape (k, n).
    """
    names = list(model.joint_names)
    lower, upper = to_numpy(model.lower), to_numpy(model.upper)
    targets = np.atleast_2d(np.asarray(targets, dtype=np.float64))
    if targets.shape[-1] != len(names) or targets.ndim != 2:
        raise ControlError(f"{what}: expected targets of {len(names)} joints, got shape {targets.shape}")
    problems = []
    for k, row in enumerate(targets):
        for j in np.flatnonzero(~((row >= lower) & (row <= upper))):
            problems.append(f"#{k} {names[j]} = {row[j]:.6g} rad outside [{lower[j]:.6g}, {upper[j]:.6g}]")
    if problems:
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise ControlError(f"{what}: targets outside the joint limits: {shown}")
    return targets


def quintic_profile(x, duration):
    """Position, velocity and acceleration factors of a rest-to-rest quintic at phase x."""
    x = min(max(x, 0.0), 1.0)
    pos = x**3 * (10.0 - 15.0 * x + 6.0 * x * x)
    vel = 30.0 * x * x * (1.0 - x) ** 2 / duration
    acc = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) / duration**2
    return pos, vel, acc



class SetPoint:
    """A constant goal: ``(q_goal, 0, 0)`` at every time.

    Args:
        q_goal: Goal positions [rad], shape (n,).
    """

    def __init__(self, q_goal):
        self.q_goal = np.asarray(q_goal, dtype=np.float64).copy()
        if self.q_goal.ndim != 1 or not np.all(np.isfinite(self.q_goal)):
            raise ControlError(f"set-point must be a finite joint vector, got {q_goal!r}")
        self._zero = np.zeros_like(self.q_goal)

    def __call__(self, t):
        return self.q_goal, self._zero, self._zero


class MinimumJerkMove:
    """Rest-to-rest minimum-jerk (quintic) move from ``q_start`` to ``q_goal``, then hold.

    Args:
        q_start: Start positions [rad], shape (n,).
        q_goal: Goal positions [rad], shape (n,).
        t_start: Start time [s].
        duration: Move duration [s] (> 0).
    """

    def __init__(self, q_start, q_goal, t_start, duration):
        self.q_start = np.asarray(q_start, dtype=np.float64).copy()
        self.delta = np.asarray(q_goal, dtype=np.float64) - self.q_start
        if self.delta.shape != self.q_start.shape or not np.all(np.isfinite(self.delta)):
            raise ControlError("minimum-jerk move needs finite start and goal vectors of the same shape")
        if not duration > 0:
            raise ControlError(f"move duration must be positive, got {duration}")
        self.t_start = float(t_start)
        self.duration = float(duration)

    def __call__(self, t):
        # The recording scenarios' quintic: same profile, one implementation.
        pos, vel, acc = quintic_profile((t - self.t_start) / self.duration, self.duration)
        return self.q_start + pos * self.delta, vel * self.delta, acc * self.delta


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
