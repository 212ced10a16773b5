"""Joint-space references: what a controller should track, as a function of time.

A reference is any callable ``reference(t) -> (q_d, qd_d, qdd_d)`` returning float64 arrays
of shape (n,) [rad, rad/s, rad/s²]; these two cover set-points and point-to-point moves.
"""

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.sim.scenarios import quintic_profile as quintic_factors

__all__ = ["SetPoint", "MinimumJerkMove"]


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
