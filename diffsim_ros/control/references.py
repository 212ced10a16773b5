"""Joint-space references: what a controller should track, as a function of time.

A reference is any callable ``reference(t) -> (q_d, qd_d, qdd_d)`` returning float64 arrays
of shape (n,) [rad, rad/s, rad/s²]; these two cover set-points and point-to-point moves.

Targets are checked against the joint limits where they enter (:func:`check_within_limits`):
a set-point or a move between targets inside the limits stays inside them (a minimum-jerk move
never overshoots its end points).
"""

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.vectors import to_numpy
from diffsim_ros.sim.scenarios import quintic_profile as quintic_factors

__all__ = ["MinimumJerkMove", "SetPoint", "check_within_limits"]


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
        pos, vel, acc = quintic_factors((t - self.t_start) / self.duration, self.duration)
        return self.q_start + pos * self.delta, vel * self.delta, acc * self.delta
