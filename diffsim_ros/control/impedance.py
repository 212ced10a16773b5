"""Joint impedance control (Liu et al., Eq. 28), with the model term analytic or from a torque map.

    tau = D (qd_d - qd) + K (q_d - q) + scale * model_term

with the model term

- ``"analytic"``: ``M(q) qdd_d + S(q, qd) qd + g(q) - tau_spring(q)``, i.e. the compiled RNEA
  at ``(q, qd, qdd_d)`` minus the springs' torque;
- ``"map"``: the feedforward of a :class:`~diffsim_ros.control.torque_map.TorqueMap` along
  the reference: the net torque that moves each joint by the reference's own step
  ``q_d(t + dt) - q_d(t)`` from its previous step's velocity ``(q_d(t) - q_d(t - dt)) / dt``,
  with the holding torque h(q) and the joint inertia M_jj(q) of the measured configuration. The gains K and D are
  then the only feedback: the arm is as compliant as they say (a push of tau deflects a
  joint by about tau / K);
- ``"map_servo"``: the map's net torque from the measured ``(q, qd)`` to ``q_d(t + dt)``
  in one map step: a stiff (~M / dt^2 per joint) but bounded position servo on top of K and
  D, for comparison (it needs a high torque rate limit and control rate);
- ``"gravity"``: ``g(q) - tau_spring(q)`` only (PD plus gravity compensation);
- ``"none"``: zero (PD only).

The damping D acts on measured velocities that are up to one joint-state period old. Where a
joint's effective inertia is small (Baxter's shoulder with the elbow folded: s0 drops from 0.8
to 0.1 kg·m²) a fixed D then over-corrects every period and the arm oscillates with growing
amplitude. Given the joint-state period, the controller limits D at each configuration
(:func:`stable_damping`) so that this loop stays stable.

The paper uses ``scale`` = 1 in simulation and 0.6 on the real robot. A map follows model
updates (calibration) through h(q) and M_jj(q); :attr:`JointImpedanceController.map_exact`
says whether it is exact for the current model or needs a rebuild
(:func:`~diffsim_ros.control.torque_map.rebuild_torque_map`, :meth:`use_map`).
"""

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.control.torque_map import joint_inertias
from diffsim_ros.control.vectors import per_joint
from diffsim_ros.dynamics.fast import FastDynamics

__all__ = [
    "DAMPING_MARGIN", "DAMPING_REFRESH", "MAP_TERMS", "MODEL_TERMS", "PERIOD_CHANGE", "JointImpedanceController",
    "stable_damping",
]

MODEL_TERMS = ("analytic", "map", "map_servo", "gravity", "none")
MAP_TERMS = ("map", "map_servo")
# Largest eigenvalue allowed for T D^1/2 M^-1 D^1/2. A damper acting on velocities one period T
# old gives each mode v_{k+1} = v_k - lambda v_{k-1}: stable for lambda < 1, ringing near 1.
DAMPING_MARGIN = 0.9
DAMPING_REFRESH = 0.01  # [rad] joint motion after which the damping limit is recomputed
PERIOD_CHANGE = 0.1  # relative change of the state period that recomputes the damping limit


def stable_damping(damping, inverse_mass, period, margin=DAMPING_MARGIN):
    """Damping limited so that it stays stable on velocities one sample ``period`` old.

    Each joint's damping is first held to ``margin / (period (M^-1)_jj)`` (its own mode),
    then all are scaled together until the coupled loop's largest eigenvalue
    ``period * lambda_max(D^1/2 M^-1 D^1/2)`` is at most ``margin``.

    Args:
        damping: Configured damping D [N·m·s/rad], shape (n,), >= 0.
        inverse_mass: M(q)^-1 at the current configuration, shape (n, n).
        period: Age of the velocities the damping acts on [s] (the joint-state period), > 0.
        margin: Largest eigenvalue allowed (below 1, the stability limit).

    Returns:
        Damping [N·m·s/rad], shape (n,), elementwise <= ``damping`` (equal where stable).
    """
    limited = np.minimum(damping, margin / (period * np.diag(inverse_mass)))
    root = np.sqrt(limited)
    largest = period * float(np.linalg.eigvalsh(root[:, None] * inverse_mass * root[None, :])[-1])
    return limited * min(1.0, margin / largest) if largest > 0.0 else limited


class JointImpedanceController:
    """Per-joint impedance around a reference, plus a scaled model term.

    Args:
        model: RobotModel (the map, if any, must have been built for it).
        stiffness: K [N·m/rad], scalar, (n,) or ``{joint: value}``.
        damping: D [N·m·s/rad], same forms.
        reference: Callable ``reference(t) -> (q_d, qd_d, qdd_d)``, each (n,) [rad, rad/s, rad/s²]
            (see :mod:`diffsim_ros.control.references`).
        model_term: One of :data:`MODEL_TERMS`.
        model_scale: Factor on the model term.
        torque_map: TorqueMap, required for the map terms.
        state_period: Period of the joint states the damping acts on [s]; the damping is then
            limited at each configuration by :func:`stable_damping`. None: D as given (only
            for states fast enough that it is stable everywhere).

    Attributes:
        state_period: The period the limit uses [s]: the configured one, or a longer measured
            one (:meth:`observe_state_period`); None without the limit.
        map_exact: Whether the torque map (if any) was built for exactly the current model's
            parameters (else it is conditioned on them through h(q) and M_jj(q)).

    Raises:
        ControlError: Negative or non-finite gains, an unknown model term, a missing map, or a state period
            that is not a positive number.
        TorqueMapError: A map built for another structure (joints, tree, springs).
    """

    def __init__(self, model, stiffness, damping, reference, model_term="analytic", model_scale=1.0, torque_map=None,
                 state_period=None):
        self.joint_names = tuple(model.joint_names)
        self.stiffness = per_joint(stiffness, self.joint_names, "impedance stiffness", 0.0)
        self.damping = per_joint(damping, self.joint_names, "impedance damping", 0.0)
        for what, gains in (("stiffness", self.stiffness), ("damping", self.damping)):
            if not np.all((gains >= 0) & (gains < np.inf)):  # `np.any(gains < 0)` is False for NaN
                raise ControlError(f"impedance {what} must be finite and >= 0, got {gains.tolist()}")
        if not np.isfinite(model_scale):
            raise ControlError(f"impedance model_scale must be finite, got {model_scale!r}")
        if model_term not in MODEL_TERMS:
            raise ControlError(f"unknown model term '{model_term}'; choose from {MODEL_TERMS}")
        if model_term in MAP_TERMS and torque_map is None:
            raise ControlError(f"model_term='{model_term}' needs a torque_map")
        if state_period is not None and not (np.isfinite(state_period) and state_period > 0):
            raise ControlError(f"state_period must be a positive number of seconds, got {state_period!r}")
        self.state_period = self.configured_period = None if state_period is None else float(state_period)
        self.reference = reference
        self.model_term = model_term
        self.model_scale = float(model_scale)
        self.torque_map = torque_map
        self.update_model(model)

    def update_model(self, model):
        """Use new parameter values; a torque map follows them (TorqueMapError for another structure)."""
        if tuple(model.joint_names) != self.joint_names:
            raise ControlError(f"model joints {list(model.joint_names)} differ from {list(self.joint_names)}")
        exact = self.torque_map.check_model(model) if self.torque_map is not None else True
        self.model, self.fast, self.map_exact = model, FastDynamics.from_model(model), exact
        self._zero = np.zeros(len(self.joint_names))
        self._limited = None  # (q [rad], damping) of the last damping limit: M(q) is the model's

    def use_map(self, torque_map):
        """Swap in a (rebuilt) map if it is exact for the current model; returns whether it was."""
        if torque_map.check_model(self.model):
            self.torque_map, self.map_exact = torque_map, True  # one reference: readers see old or new
            return True
        return False

    def reset(self):
        """Nothing to forget (stateless); part of the controller interface."""

    def observe_state_period(self, measured):
        """Limit the damping for the measured joint-state period [s] when it is longer than the
        configured one (slower states destabilize a damping that faster ones keep stable).

        Returns:
            Whether the period the limit uses changed (by more than PERIOD_CHANGE relative;
            never without a configured period, never below it).
        """
        if self.configured_period is None or measured is None:
            return False
        period = max(self.configured_period, float(measured))
        if abs(period - self.state_period) <= PERIOD_CHANGE * self.state_period:
            return False
        self.state_period, self._limited = period, None
        return True

    def model_torques(self, t, q, qd):
        """The unscaled model term [N·m], shape (n,), at time ``t`` [s]."""
        if self.model_term == "none":
            return self._zero
        if self.model_term == "gravity":
            return holding_torques(self.fast, q)
        if self.model_term == "analytic":
            _, _, qdd_d = self.reference(t)
            return self.fast.rnea(q, qd, qdd_d) - self.fast.spring_torques(q)
        tmap = self.torque_map
        q_next, _, _ = self.reference(t + tmap.dt)
        if self.model_term == "map_servo":
            return tmap.torques(self.fast, q, qd, q_next)
        # Keys of the reference's own discrete step: the step ahead and the backward-difference
        # velocity, so that the map's implicit-Euler acceleration is the reference's (second
        # central difference) rather than half of it.
        # Beyond the grid's velocity range the velocity is clamped and the step shifted with it,
        # which keeps the acceleration (only the damping is then the range edge's).
        q_d, _, _ = self.reference(t)
        q_prev, _, _ = self.reference(t - tmap.dt)
        grid = tmap.grid
        omega = (q_d - q_prev) / tmap.dt
        clamped = np.clip(omega, -grid.max_velocity, grid.max_velocity)
        dtheta = np.clip(q_next - q_d - tmap.dt * (omega - clamped), -grid.max_angle_step, grid.max_angle_step)
        return holding_torques(self.fast, q) + tmap.lookup(dtheta, clamped, joint_inertias(self.fast, q))

    def compute(self, t, q, qd):
        """Torques [N·m], shape (n,), for time ``t`` [s], positions ``q`` [rad], velocities ``qd`` [rad/s]."""
        q = np.asarray(q, dtype=np.float64)
        qd = np.asarray(qd, dtype=np.float64)
        q_d, qd_d, _ = self.reference(t)
        feedback = self.stiffness * (q_d - q) + self.damping_at(q) * (qd_d - qd)
        return feedback + self.model_scale * self.model_torques(t, q, qd)

    def damping_at(self, q):
        """The damping applied at configuration ``q`` [rad], shape (n,) [N·m·s/rad]: D, limited
        by :func:`stable_damping` when the state period is known.

        The limit is recomputed when a joint has moved DAMPING_REFRESH from where it was last
        computed (M(q) takes n + 1 RNEA calls, ~0.4 ms; it changes by a few % over that move,
        well inside DAMPING_MARGIN)."""
        if self.state_period is None or not np.any(self.damping > 0):
            return self.damping
        if self._limited is None or np.max(np.abs(q - self._limited[0])) > DAMPING_REFRESH:
            damping = stable_damping(self.damping, np.linalg.inv(self.fast.mass_matrix(q)), self.state_period)
            self._limited = (np.array(q, dtype=np.float64), damping)
        return self._limited[1]
