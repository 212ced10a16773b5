"""Exact rigid Coulomb friction for a flat box sliding and spinning on a plane: an ODE reference.

An independent reference for contact simulators (ours and MuJoCo): no contact solver, no time
step. The box stays flat on its four bottom corners; each corner's friction is ``-mu N_i`` along
its own slip velocity (Coulomb's law at every instant). Four supports are statically
indeterminate: the loads take the planar split ``N_i = a + b x_i + c y_i`` (an elastic
foundation of equal springs, also the least-squares split of a stiff contact solver) that
balances the weight and the tipping moment of the friction acting ``h`` below the centre of mass
(so the centre of pressure leads the centre along the slip by ``mu h`` in pure translation).

The planar motion ``(x, y, yaw, vx, vy, wz)`` is integrated by scipy's DOP853 until every corner's
slip speed falls below ``stop_speed``; the box is at rest after that (Coulomb: a rigid box stops
translating and spinning at the same instant).
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

__all__ = ["CoulombBox", "corner_loads", "slide"]


@dataclass(frozen=True)
class CoulombBox:
    """A box resting flat on a horizontal plane.

    Attributes:
        half_extents: (3,) half sizes along the box's axes [m]; the third is vertical.
        mass: [kg].
        friction: Coulomb coefficient with the plane [-].
        gravity: [m/s^2], positive.
    """

    half_extents: tuple
    mass: float
    friction: float
    gravity: float = 9.81

    def __post_init__(self):
        values = (*self.half_extents, self.mass, self.gravity)
        if len(self.half_extents) != 3 or not all(math.isfinite(v) and v > 0.0 for v in values):
            raise ValueError(f"half_extents (3 values), mass and gravity must be positive, got {self!r}")
        if not (math.isfinite(self.friction) and self.friction >= 0.0):
            raise ValueError(f"friction must be finite and >= 0, got {self.friction!r}")

    @property
    def yaw_inertia(self):
        """Moment of inertia about the vertical axis through the centre [kg m^2]."""
        a, b, _ = self.half_extents
        return self.mass * (a * a + b * b) / 3.0

    def corners(self, yaw):
        """(4, 2) bottom corners relative to the centre, in the plane's frame [m]."""
        a, b, _ = self.half_extents
        local = np.array([[sx * a, sy * b] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)])
        c, s = math.cos(yaw), math.sin(yaw)
        return local @ np.array([[c, s], [-s, c]])


def corner_loads(box, corners, directions):
    """Normal loads (4,) [N] of the corners sliding along ``directions`` (4, 2) (unit or zero).

    Solves the planar split's three coefficients from the vertical force balance and the two
    tipping moments about the centre of mass (friction ``-mu N_i d_i`` acts ``h`` below it).

    Raises:
        ValueError: if a corner would need to pull (the box would tip; outside this reference).
    """
    h = box.half_extents[2]
    basis = np.column_stack([np.ones(4), corners])  # N = basis @ coefficients
    rows = np.stack([np.ones(4), corners[:, 0] - h * box.friction * directions[:, 0],
                     corners[:, 1] - h * box.friction * directions[:, 1]])
    rhs = np.array([box.mass * box.gravity, 0.0, 0.0])
    loads = basis @ np.linalg.solve(rows @ basis, rhs)
    if np.any(loads < 0.0):
        raise ValueError(f"a corner lifts (loads {loads} N): the box tips, outside the flat-box reference")
    return loads


def _slip(box, yaw, velocity, spin):
    corners = box.corners(yaw)
    slip = velocity + spin * np.column_stack([-corners[:, 1], corners[:, 0]])
    return corners, slip


def _rates(box, regularization):
    def rates(_, y):
        corners, slip = _slip(box, y[2], y[3:5], y[5])
        speed = np.linalg.norm(slip, axis=1)
        # A corner at the instantaneous centre of rotation has no slip direction: a smooth
        # unit vector there (measure zero along a trajectory).
        directions = slip / np.sqrt(speed[:, None] ** 2 + regularization**2)
        force = -box.friction * corner_loads(box, corners, directions)[:, None] * directions
        torque = np.sum(corners[:, 0] * force[:, 1] - corners[:, 1] * force[:, 0])
        return np.concatenate([y[3:6], force.sum(0) / box.mass, [torque / box.yaw_inertia]])

    return rates


def slide(box, velocity, spin, times, yaw=0.0, stop_speed=1e-6, rtol=1e-10):
    """The box's planar motion from the origin at ``yaw``, sampled at ``times``.

    Args:
        box: CoulombBox.
        velocity: (2,) initial velocity of the centre [m/s].
        spin: Initial yaw rate [rad/s].
        times: (T,) sample times [s], ascending, from 0.
        yaw: Initial yaw of the box's first axis from the plane's x axis [rad].
        stop_speed: Slip speed [m/s] of the fastest corner at which the box is taken to stop.
        rtol: Relative tolerance of the integration.

    Returns:
        dict with ``position`` (T, 2) [m], ``yaw`` (T,) [rad], ``velocity`` (T, 2) [m/s],
        ``spin`` (T,) [rad/s] and ``stop_time`` [s] (inf if still sliding at the last time).

    Raises:
        ValueError: on times that are not ascending from 0, or a non-finite start.
    """
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0 or times[0] < 0.0 or np.any(np.diff(times) < 0.0):
        raise ValueError("times must be a non-empty 1-D array, ascending from 0 or later")
    y0 = np.array([0.0, 0.0, float(yaw), *np.asarray(velocity, dtype=float), float(spin)])
    if y0.shape != (6,) or not np.all(np.isfinite(y0)):
        raise ValueError(f"velocity must be 2 finite values and spin finite, got {velocity!r}, {spin!r}")
    if np.max(np.linalg.norm(_slip(box, y0[2], y0[3:5], y0[5])[1], axis=1)) <= stop_speed:
        rest = np.tile(np.r_[y0[:3], 0.0, 0.0, 0.0], (times.size, 1))
        return {"position": rest[:, :2], "yaw": rest[:, 2], "velocity": rest[:, 3:5], "spin": rest[:, 5], "stop_time": 0.0}

    def stopped(_, y):
        return np.max(np.linalg.norm(_slip(box, y[2], y[3:5], y[5])[1], axis=1)) - stop_speed

    stopped.terminal, stopped.direction = True, -1
    end = float(times[-1])
    solution = solve_ivp(_rates(box, 0.1 * stop_speed), (0.0, end), y0, method="DOP853", rtol=rtol,
                         atol=1e-12, dense_output=True, events=stopped)
    stop = float(solution.t_events[0][0]) if solution.t_events[0].size else math.inf
    states = np.stack([solution.sol(min(t, solution.t[-1])) for t in times])
    states[times >= stop, 3:] = 0.0
    return {"position": states[:, :2], "yaw": states[:, 2], "velocity": states[:, 3:5], "spin": states[:, 5],
            "stop_time": stop}
