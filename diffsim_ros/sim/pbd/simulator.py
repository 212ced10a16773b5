"""PBDSimulator: the differentiable articulated XPBD simulator behind the joint-space API."""

import warnings

import torch
import torch.autograd.forward_ad as fwad

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.sim.base import JointSpaceSimulator
from diffsim_ros.sim.checkpointing import checkpoint_block
from diffsim_ros.sim.pbd.bodies import build_system
from diffsim_ros.sim.pbd.constraints import constraint_residuals
from diffsim_ros.sim.pbd.errors import PBDConvergenceWarning, PBDError
from diffsim_ros.sim.pbd.fast import FastPBD, fast_rollout_supported
from diffsim_ros.sim.pbd.mapping import joints_from_state, state_from_joints
from diffsim_ros.sim.pbd.solver import SolverSettings, integrate
from diffsim_ros.sim.pbd.state import PBDControl, PBDState, check_control, check_state

__all__ = ["PBDSimulator"]

RESIDUAL_ACTIONS = ("warn", "raise", "ignore")


class PBDSimulator(JointSpaceSimulator):
    """Articulated rigid bodies simulated by extended position-based dynamics (XPBD).

    One particle (a rigid body with orientation) per merged link, joints as positional and
    angular constraints (Liu et al., Section III), XPBD compliance and Lagrange multipliers
    (Müller et al. 2020), substepping, implicit joint damping. Differentiable with respect
    to the initial state, the torques and every model parameter; batched over leading
    dimensions; dtype and device follow the model.

    Args:
        model: RobotModel (fixed base, revolute/prismatic joints, positive masses).
        dt: Control period [s]: one :meth:`step` / :meth:`joint_step` advances ``dt``.
        substeps: XPBD substeps per control period (accuracy grows with substeps).
        iterations: Constraint iterations per substep.
        solver: ``"direct"`` (exact linearized projection of all joints, one dense solve),
            ``"gauss_seidel"`` (joint by joint, base to tip) or ``"jacobi"`` (the paper's,
            vectorized over joints with constraint averaging).
        compliance: XPBD joint compliance [m/N, rad/(N·m)]; 0 = rigid joints.
        limits: Enforce the model's joint position limits.
        relaxation: Jacobi over-relaxation factor.
        residual_tolerance: Largest accepted constraint violation [m or rad] after a
            :meth:`joint_step`; None disables the check.
        on_residual: ``"warn"`` (:class:`PBDConvergenceWarning`), ``"raise"`` (:class:`PBDError`)
            or ``"ignore"`` when the residual exceeds the tolerance.
        base: None for a base fixed in the world, or a :class:`FreeBase` for a floating one
            (particle-state API only: joint states do not describe the base).
        fast: Run :meth:`rollout` in the compiled forward kernel (:mod:`.fast`) when no
            gradient is needed and the setup is supported (fixed-base serial revolute
            chain, direct solver, float64 on the CPU); same step, same results to
            rounding. ``False`` always uses the torch implementation.
    """

    def __init__(
        self,
        model,
        dt=0.01,
        substeps=10,
        iterations=2,
        solver="direct",
        compliance=0.0,
        limits=True,
        relaxation=1.0,
        residual_tolerance=1e-3,
        on_residual="warn",
        base=None,
        fast=True,
    ):
        super().__init__(model, dt)
        if on_residual not in RESIDUAL_ACTIONS:
            raise ValueError(f"on_residual must be one of {RESIDUAL_ACTIONS}, got '{on_residual}'")
        self.settings = SolverSettings(
            substeps=int(substeps),
            iterations=int(iterations),
            solver=solver,
            compliance=float(compliance),
            limits=bool(limits),
            relaxation=float(relaxation),
        )
        self.residual_tolerance = residual_tolerance
        self.on_residual = on_residual
        self.base = base
        self.fast = bool(fast)
        self._system()  # fail early on unsupported models

    @classmethod
    def paper(cls, model, **overrides):
        """The reference paper's setting: dt = 0.01 s, one step, 30 Jacobi iterations.

        (The paper also uses g = 9.8 m/s²; gravity is the model's, see ``model.replace``.)
        """
        kwargs = dict(dt=0.01, substeps=1, iterations=30, solver="jacobi")
        kwargs.update(overrides)
        return cls(model, **kwargs)

    # ------------------------------------------------------------------ particle space
    def _system(self):
        return build_system(self.model, self.base)

    def initial_state(self, q, qd, base_pose=None, base_twist=None):
        """Particle state at joint positions ``q`` and velocities ``qd``, each (..., n).

        ``base_pose`` / ``base_twist`` place and move a free base (see
        :func:`~diffsim_ros.sim.pbd.mapping.state_from_joints`).
        """
        return state_from_joints(self.model, q, qd, self._system(), base_pose, base_twist)

    def joint_state(self, state, q_ref=None):
        """``(q, qd)`` of a particle state, each (..., n); ``q_ref`` picks the angle branch."""
        return joints_from_state(self.model, state, q_ref, self._system())

    def residuals(self, state):
        """Constraint violations ``(positional [m], angular [rad])``, each (..., n)."""
        with torch.no_grad():
            return constraint_residuals(self._system(), state.pos, state.quat)

    def step(self, state, control):
        """Advance a particle state by ``dt`` (the state is not modified).

        Args:
            state: PBDState, batch shape (...).
            control: PBDControl, or joint torques [N·m or N] of shape (..., n).

        Returns:
            New PBDState with the broadcast batch shape of state and control.

        Raises:
            PBDError: Non-finite or malformed state/wrench, or a diverged simulation.
            RobotModelError: Malformed or non-finite torques (the joints are named).
        """
        if not isinstance(control, PBDControl):
            control = PBDControl(tau=control)
        check_state(self.model, state)
        control = check_control(self.model, control)
        system = self._system()
        new = self._integrate(system, _broadcast(state, control), control)
        _check_finite(new.pos, "particle positions")
        return new

    def simulate(self, state, tau_seq, checkpoint_every=None):
        """Roll a particle state through a torque sequence.

        Args:
            state: PBDState, batch shape (...).
            tau_seq: Torques, shape (..., T, n).
            checkpoint_every: Recompute blocks of this many steps in the backward pass.

        Returns:
            PBDState whose fields have shape (..., T, N, k): the state after every step.
        """
        tau_seq = joint_tensor(self.model, "tau_seq", tau_seq)
        if tau_seq.ndim < 2:
            raise PBDError(f"tau_seq must have shape (..., T, n), got {tuple(tau_seq.shape)}")
        steps = tau_seq.shape[-2]
        block = int(checkpoint_every) if checkpoint_every else steps
        chunks = []
        for start in range(0, steps, block):
            chunk = tau_seq[..., start : start + block, :]
            fields = (state.pos, state.quat, state.vel, state.omega)
            if checkpoint_every and torch.is_grad_enabled():
                out = checkpoint_block(self, type(self)._state_block, *fields, chunk)
            else:
                out = self._state_block(*fields, chunk)
            chunks.append(out)
            state = PBDState(*(f[..., -1, :, :] for f in out))
        return PBDState(*(torch.cat([c[k] for c in chunks], dim=-3) for k in range(4)))

    def _state_block(self, pos, quat, vel, omega, tau_block):
        state, out = PBDState(pos, quat, vel, omega), []
        for t in range(tau_block.shape[-2]):
            state = self.step(state, tau_block[..., t, :])
            out.append((state.pos, state.quat, state.vel, state.omega))
        return tuple(torch.stack([o[k] for o in out], dim=-3) for k in range(4))

    # ------------------------------------------------------------------ joint space
    def rollout(self, q0, qd0, tau_seq, checkpoint_every=None):
        """Simulate a torque sequence (see :meth:`JointSpaceSimulator.rollout`).

        Without gradients (``torch.no_grad()`` or no input and no model parameter requiring
        one) and for a supported setup (see ``fast``), the rollout runs in the compiled
        kernel, one rollout per thread; otherwise step by step in torch.
        """
        if not self._fast_rollout_applies(q0, qd0, tau_seq):
            return super().rollout(q0, qd0, tau_seq, checkpoint_every)
        model = self.model
        q0, qd0, tau_seq = self._rollout_inputs(q0, qd0, tau_seq)
        batch = torch.broadcast_shapes(q0.shape[:-1], qd0.shape[:-1], tau_seq.shape[:-2])
        steps, n = tau_seq.shape[-2:]
        flat = lambda x, shape: x.expand(*batch, *shape).reshape(-1, *shape).numpy()  # noqa: E731
        q, qd, residual = FastPBD.from_model(model).rollout(
            flat(q0, (n,)), flat(qd0, (n,)), flat(tau_seq, (steps, n)), self.dt, self.settings
        )
        q, qd = (torch.from_numpy(x).reshape(*batch, steps, n).to(model.dtype) for x in (q, qd))
        _check_finite(q, "joint positions")
        _check_finite(qd, "joint velocities")
        self._report_residual(torch.from_numpy(residual).amax(0) if residual.size else torch.zeros(n))
        return q, qd

    def fast_rollout_supported(self):
        """None if :meth:`rollout` can run in the compiled kernel (when no derivative is
        needed), else the reason it cannot."""
        if not self.fast:
            return "fast=False"
        return fast_rollout_supported(self.model, self.settings, self.base)

    def _fast_rollout_applies(self, *inputs):
        if self.fast_rollout_supported() is not None:
            return False
        return not _needs_derivatives((*inputs, *self.model.tensors()))

    def joint_step(self, q, qd, tau):
        """Advance joint positions/velocities by ``dt`` with ``tau`` held (see base class).

        ``tau`` may also be a :class:`PBDControl` (external wrenches, an implicit joint
        drive). The particle state is rebuilt from ``(q, qd)`` at every call, so constraint
        errors never accumulate across control periods; angles are read on the branch
        nearest q.
        """
        model = self.model
        if self.base is not None:
            raise PBDError("a free-base PBDSimulator has no joint-space step (joint states miss the base); use step()")
        q = joint_tensor(model, "q", q)
        qd = joint_tensor(model, "qd", qd)
        control = check_control(model, tau if isinstance(tau, PBDControl) else PBDControl(tau=tau))
        system = self._system()
        state = state_from_joints(model, q, qd, system)
        state = self._integrate(system, _broadcast(state, control), control)
        q_new, qd_new = joints_from_state(model, state, q, system)
        _check_finite(q_new, "joint positions")
        _check_finite(qd_new, "joint velocities")
        self._check_residual(system, state)
        return q_new, qd_new

    def _integrate(self, system, state, control):
        try:
            return integrate(self.model, system, state, control, self.dt, self.settings)
        except RobotModelError as error:  # an internal check met NaN/inf: the step blew up
            raise PBDError(f"PBD simulation diverged ({error}); reduce dt or increase substeps") from error

    def _check_residual(self, system, state):
        if self.residual_tolerance is None or self.on_residual == "ignore":
            return
        with torch.no_grad():
            pos_err, ang_err = constraint_residuals(system, state.pos, state.quat)
            self._report_residual(torch.maximum(pos_err, ang_err).reshape(-1, self.model.nq).max(0).values)

    def _report_residual(self, worst):
        """Warn or raise (``on_residual``) when a joint's residual ``worst`` (n,) exceeds the tolerance."""
        if self.residual_tolerance is None or self.on_residual == "ignore":
            return
        if bool((worst > self.residual_tolerance).any()):
            joint = int(worst.argmax())
            message = (
                f"PBD constraints not converged: residual ~{float(worst.max()):.0e} (m or rad) at joint "
                f"'{self.model.joint_names[joint]}' exceeds {self.residual_tolerance:g}; "
                f"increase substeps/iterations (now {self.settings.substeps}/{self.settings.iterations})"
            )
            if self.on_residual == "raise":
                raise PBDError(message)
            warnings.warn(message, PBDConvergenceWarning, stacklevel=3)


def _broadcast(state, control):
    """State expanded to the common batch shape of the state and the control."""
    batch = torch.broadcast_shapes(state.batch_shape, control.tau.shape[:-1])
    if control.wrench is not None:
        batch = torch.broadcast_shapes(batch, control.wrench.shape[:-2])
    for gain in (control.target, control.stiffness, control.drive_damping):
        if gain is not None:
            batch = torch.broadcast_shapes(batch, gain.shape[:-1])
    if batch == state.batch_shape:
        return state
    return PBDState(*(t.expand(*batch, *t.shape[-2:]) for t in (state.pos, state.quat, state.vel, state.omega)))


def _needs_derivatives(values):
    """Whether a derivative must flow through ``values``: a forward-mode tangent (even under
    no_grad), or a tensor requiring a gradient while grad mode is on."""
    grad_mode = torch.is_grad_enabled()
    for value in values:
        if isinstance(value, torch.Tensor):
            if (grad_mode and value.requires_grad) or fwad.unpack_dual(value).tangent is not None:
                return True
    return False


def _check_finite(value, what):
    if not bool(torch.isfinite(value).all()):
        raise PBDError(f"PBD simulation diverged: non-finite {what}; reduce dt or increase substeps")
