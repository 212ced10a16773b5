"""One time step of a contact world as a list of stages (in the MuJoCo MJX style).

:func:`step` reads the world (a :class:`~diffsim_ros.sim.contact.world.ContactWorld`: objects,
shapes, pair table, parameters and :class:`~diffsim_ros.sim.contact.options.ContactOptions`)
and a :class:`~diffsim_ros.sim.contact.state.WorldState`, and returns the next state. The step
is semi-implicit at the velocity level (Stewart-Trinkle / Nimble style):

1. :func:`~diffsim_ros.sim.contact.broadphase.detect` contacts at the current poses (robot
   links carry collision proxies), out to the speculative margin plus what the fastest point
   covers in the step (:func:`~diffsim_ros.sim.contact.broadphase.speed_bound`);
   a step in which two objects may touch is taken as :func:`impact_substeps` when asked;
2. :func:`contact_jacobian` in the contact frames, columns [robot joints, object twists];
3. :func:`free_velocity`: objects get gravity, applied wrenches and gyroscopic terms; the robot
   is advanced by its own :class:`~diffsim_ros.sim.base.JointSpaceSimulator` (rigid-body or
   PBD, :func:`robot_free_step`);
4. the Delassus matrix ``A = J M⁻¹ Jᵀ`` (:func:`inverse_mass_apply`: robot block its
   simulator's impulse response, object blocks ``diag(m I, I_world)``);
5. :func:`contact_terms`: ``b = J v_free + bias``, the normal bias being ``e v_n`` for a bounce
   (Newton restitution, Le Lidec's Eq. 3), ``gap / h`` for a speculative contact (``gap > 0``:
   it may close but not cross within the step) and ``beta gap / h`` for penetration
   (Baumgarte);
6. :func:`solve`: impulses ``x`` from ``w = A x + b`` by the LCP (Nimble) or the friction-cone
   solver (Le Lidec); ``v+ = v_free + M⁻¹ Jᵀ x``;
7. :func:`bounce_correction`: for contacts that bounce within the step, a position-level
   correction placing the body where the continuous-time bounce would have taken it (its free
   twist until the impact at ``t* = gap / -v_n``, then ``h - t*`` at the rebound twist,
   :func:`impact_twist`). That correction is what makes ``dq_{t+1}/dq_t = -e`` for a ball
   bouncing within a step (Nimble §VI) instead of the
   ``+1`` of plain time stepping; it is computed with the same Delassus matrix, so it is
   differentiable like the rest;
8. :func:`robot_response`: the robot stepped by its simulator with the contact forces;
9. :func:`integrate`: positions move by ``h v+`` plus the correction.

Every stage is a free function of the world and tensors; nothing is cached between steps
except the warm start the caller passes back (:class:`StepInfo`).
"""

import math
from dataclasses import dataclass, fields, replace

import torch

from diffsim_ros.dynamics.kinematics import forward_kinematics, frame_jacobian
from diffsim_ros.dynamics.spatial import matvec, quat_normalize, quat_to_matrix, skew
from diffsim_ros.sim.contact.broadphase import detect, objects_may_touch, speed_bound
from diffsim_ros.sim.contact.cone import ConeSolution, solve_cone
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.frames import contact_frames, integrate_orientation
from diffsim_ros.sim.contact.lcp import LCPSolution, solve_lcp
from diffsim_ros.sim.contact.linsolve import pinv
from diffsim_ros.sim.contact.state import StepInfo, WorldState, stack_time

__all__ = [
    "ContactTerms",
    "step",
    "rollout",
    "impact_substeps",
    "validate_state",
    "check_state",
    "step_batch",
    "object_inertia",
    "contact_jacobian",
    "robot_free_step",
    "inverse_mass_apply",
    "free_velocity",
    "velocity_vector",
    "contact_terms",
    "impact_speed",
    "solve",
    "bounce_correction",
    "impact_twist",
    "robot_response",
    "integrate",
    "check_finite",
]


@dataclass(frozen=True)
class ContactTerms:
    """The contact rows of one step, batch shape ``...`` (the step's), K slots.

    Attributes:
        gap: Signed distances [m], (..., K).
        active: Slots within the margin, bool (..., K).
        approach: Normal velocity at the free velocity [m/s], (..., K).
        mu: Friction coefficient per slot, (..., K).
        bouncing: Slots treated as bounces this step, bool (..., K).
        bias: ``b`` of ``w = A x + b`` [m/s], (..., 3K), rows ``[n, t1, t2]`` per slot.
    """

    gap: torch.Tensor
    active: torch.Tensor
    approach: torch.Tensor
    mu: torch.Tensor
    bouncing: torch.Tensor
    bias: torch.Tensor


# ---------------------------------------------------------------------------- the step
def step(world, state, tau=None, wrench=None, warm=None):
    """Advance a contact world one time step ``world.dt``.

    Args:
        world: ContactWorld.
        state: WorldState (J objects, n robot joints, batch ``...``).
        tau: Robot joint torques [N·m], shape (..., n) (default zero).
        wrench: Applied object wrenches ``[force (N), torque (N·m)]`` in the world,
            shape (..., J, 6) (default zero).
        warm: Previous step's :class:`StepInfo` (warm start by contact slot).

    Returns:
        ``(next_state, info)``: WorldState and :class:`StepInfo`.

    Raises:
        ContactError: Malformed states, or a non-finite result (reported, never returned).
    """
    validate_state(world, state)
    # Two shapes closing at most at twice the fastest point speed may touch within the step.
    contacts = detect(world, state, world.options.margin + 2.0 * world.dt * speed_bound(world, state), skip_apart=True)
    if world.options.impact_substeps > 1 and objects_may_touch(world, contacts):
        return impact_substeps(world, state, tau, wrench, warm)
    batch = step_batch(world, state, contacts)
    inv_inertia, inertia = object_inertia(world, state.orientation, batch)
    jac = contact_jacobian(world, state, contacts, contact_frames(contacts.normal)).expand(*batch, 3 * contacts.count, -1)
    robot_free = None if world.robot is None else robot_free_step(world, state, tau)
    minv_jt = inverse_mass_apply(world, None if robot_free is None else robot_free[2], inv_inertia, jac.transpose(-1, -2))
    delassus = jac @ minv_jt
    v_free = free_velocity(world, state, robot_free, wrench, inv_inertia, inertia)
    v_free = v_free.expand(*batch, v_free.shape[-1])
    terms = contact_terms(world, state, contacts, jac, v_free, batch)
    solution = solve(world, delassus, terms.bias, terms.mu, terms.active, warm)
    impulse = solution.impulse.reshape(*batch, 3 * contacts.count)
    v_next = v_free + matvec(minv_jt, impulse)
    correction = bounce_correction(world, terms, jac, minv_jt, delassus, v_free, v_next, impulse)
    robot_next = robot_response(world, state, tau, jac, impulse, robot_free)
    next_state = integrate(world, state, robot_next, v_next, world.dt * v_next + correction, batch)
    penetration = torch.where(terms.active, -terms.gap, torch.zeros_like(terms.gap)).amax(-1).clamp_min(0.0).detach()
    check_finite(next_state)
    return next_state, StepInfo(contacts, solution.impulse, solution, terms.bouncing, penetration)


def impact_substeps(world, state, tau, wrench, warm, step_fn=None):
    """One step of ``world`` taken as ``world.options.impact_substeps`` substeps.

    Args:
        world: ContactWorld without a robot.
        state, tau, wrench, warm: As in :func:`step` (held over the substeps).
        step_fn: ``step_fn(world, state, tau, wrench, warm)`` taking each substep (default
            :func:`step`).

    Returns:
        ``(next_state, info)`` after ``world.dt``; ``info`` is the last substep's.
    """
    count = world.options.impact_substeps
    fine = replace(world, dt=world.dt / count, options=replace(world.options, impact_substeps=1))
    step_fn = step if step_fn is None else step_fn
    for _ in range(count):
        state, warm = step_fn(fine, state, tau, wrench, warm)
    return state, warm


def rollout(world, state, steps, tau=None, wrench=None, check_start=True, penetration_tolerance=1e-3, step_fn=None):
    """Simulate ``steps`` steps, warm-starting each solve from the previous one.

    Args:
        world: ContactWorld.
        state: Initial WorldState.
        steps: Number of steps T.
        tau: Robot torques [N·m], shape (..., T, n), or None.
        wrench: Object wrenches [N, N·m], shape (..., T, J, 6), or None.
        check_start: Raise on an interpenetrating start state (see :func:`check_state`).
        penetration_tolerance: Allowed start penetration [m].
        step_fn: ``step_fn(world, state, tau, wrench, warm)`` taking each step (default :func:`step`).

    Returns:
        ``(states, infos)``: WorldState with a time dimension before the per-object one
        (e.g. position (..., T, J, 3), q (..., T, n)) and the list of StepInfo.
    """
    if check_start:
        check_state(world, state, penetration_tolerance)
    step_fn = step if step_fn is None else step_fn
    states, infos, info = [], [], None
    for t in range(int(steps)):
        tau_t = None if tau is None else tau[..., t, :]
        wrench_t = None if wrench is None else wrench[..., t, :, :]
        state, info = step_fn(world, state, tau_t, wrench_t, info)
        states.append(state)
        infos.append(info)
    return stack_time(states), infos


# ---------------------------------------------------------------------------- states
def validate_state(world, state):
    """Raise unless ``state`` fits ``world``: shapes (..., J, 3 or 4), dtype, device, finite, q/qd with a robot.

    Raises:
        ContactError: Naming the bad field.
    """
    count = len(world.objects)
    for name, tail in (("position", 3), ("orientation", 4), ("linear_velocity", 3), ("angular_velocity", 3)):
        value = getattr(state, name)
        if value.shape[-2:] != (count, tail):
            raise ContactError(f"state.{name} must have shape (..., {count}, {tail}), got {tuple(value.shape)}")
        if value.dtype != world.dtype or value.device != world.device:
            raise ContactError(f"state.{name} is {value.dtype} on {value.device}; the world uses {world.dtype} on {world.device}")
        if not bool(torch.isfinite(value.detach()).all()):
            raise ContactError(f"state.{name} contains NaN or inf")
    if world.robot is not None and (state.q is None or state.qd is None):
        raise ContactError("the world has a robot: state.q and state.qd are required")


def check_state(world, state, tolerance=1e-3):
    """Raise if shapes interpenetrate by more than ``tolerance`` [m] (a bad start state).

    Raises:
        ContactError: Naming the deepest pair and its penetration.
    """
    validate_state(world, state)
    contacts = detect(world, state)
    gap = torch.where(contacts.active, contacts.gap, torch.full_like(contacts.gap, math.inf)).detach()
    worst = gap.reshape(-1, gap.shape[-1]).amin(0)
    for pair in world.pairs:
        depth = float(worst[pair.start : pair.start + pair.count].min()) if pair.count else math.inf
        if depth < -tolerance:
            raise ContactError(
                f"'{pair.a.name}' and '{pair.b.name}' interpenetrate by {-depth * 1000:.1f} mm "
                f"(tolerance {tolerance * 1000:.1f} mm); move them apart in the start state"
            )


def check_finite(state):
    """Raise unless every tensor of ``state`` (WorldState) is finite.

    Raises:
        ContactError: Naming the first non-finite field.
    """
    for f in fields(state):
        value = getattr(state, f.name)
        if value is not None and not bool(torch.isfinite(value.detach()).all()):
            raise ContactError(f"the step produced a non-finite {f.name}; check masses, inertias and the time step")


# ---------------------------------------------------------------------------- dynamics
def step_batch(world, state, contacts):
    """The step's batch shape: contacts', the robot state's and the parameters' broadcast (torch.Size)."""
    batch = contacts.gap.shape[:-1]
    if world.robot is not None:
        batch = torch.broadcast_shapes(batch, state.q.shape[:-1])
    return torch.broadcast_shapes(batch, *(value.shape[:-1] for value in (*world.params.values(), *world.pair_params.values())))


def object_inertia(world, orientation, batch):
    """World inertias of the objects.

    Args:
        world: ContactWorld (J objects).
        orientation: Object quaternions (w, x, y, z), (..., J, 4) (normalized here).
        batch: The step's batch shape.

    Returns:
        ``(inverse, inertia)``: [1/(kg·m²)] and [kg·m²], each (..., J, 3, 3).
    """
    rot = quat_to_matrix(quat_normalize(orientation))
    principal = world.params["mass"][..., None] * world.unit_inertia
    principal = principal.expand(*batch, *principal.shape[-2:])
    inverse = rot @ torch.diag_embed(1.0 / principal) @ rot.transpose(-1, -2)
    inertia = rot @ torch.diag_embed(principal) @ rot.transpose(-1, -2)
    return inverse, inertia


def contact_jacobian(world, state, contacts, frames):
    """Contact-frame Jacobian: slot velocities ``[n, t1, t2]`` [m/s] from the generalized velocity.

    Args:
        world: ContactWorld (n robot joints, J objects).
        state: WorldState.
        contacts: Contacts (K slots).
        frames: Contact frames, rows ``[n, t1, t2]``, (..., K, 3, 3).

    Returns:
        (..., 3K, nv) with nv = n + 6J, columns [robot joints, object 0 (v, w), ...].
    """
    point = contacts.point
    batch = point.shape[:-2]
    k = point.shape[-2]
    blocks = []
    if world.robot is not None:
        robot_block = torch.zeros(*batch, k, 3, world.robot_dof, dtype=world.dtype, device=world.device)
        for i, proxy in enumerate(world.proxies):
            sign = world.slot_signs("proxy", i)
            if not bool(sign.any()):
                continue
            jac = frame_jacobian(world.robot.model, state.q, proxy.link)
            origin = forward_kinematics(world.robot.model, state.q, proxy.link)[..., :3, 3]
            lever = point - origin[..., None, :]
            point_jac = jac[..., None, :3, :] - skew(lever) @ jac[..., None, 3:, :]
            robot_block = robot_block + sign[:, None, None] * point_jac
        blocks.append(robot_block)
    eye = torch.eye(3, dtype=world.dtype, device=world.device)
    for j in range(len(world.objects)):
        sign = world.slot_signs("object", j)
        lever = point - state.position[..., j, None, :]
        block = torch.cat([eye.expand(*batch, k, 3, 3), -skew(lever)], -1) * sign[:, None, None]
        blocks.append(block)
    jac = torch.cat(blocks, -1)
    return (frames @ jac).reshape(*batch, 3 * k, jac.shape[-1])


def robot_free_step(world, state, tau):
    """The robot's free step and its impulse response ``W = (d qd_next / d tau) / h``.

    ``W`` is the robot's effective inverse inertia *as its own simulator integrates it*
    (``(M + h B)⁻¹`` for implicit damping, PBD's for PBD): using ``M(q)⁻¹`` instead would
    let the contact solve predict velocities the simulator does not produce (a damped
    wrist responds far less than ``M⁻¹`` says), and the hand would sink into what it
    pushes. It comes from one reverse pass vmapped over the joints and is symmetrized.
    It is treated as locally constant for gradients (its derivative with respect to the
    state and parameters would need second derivatives of the simulator).

    Args:
        world: ContactWorld with a robot (n joints).
        state: WorldState.
        tau: Joint torques [N·m], (..., n), or None (zero).

    Returns:
        ``(q_free, qd_free, W)`` with shapes (..., n), (..., n), (..., n, n).
    """
    n = world.robot_dof
    tau = torch.zeros_like(state.q) if tau is None else tau
    with torch.enable_grad():
        probe = torch.zeros(torch.broadcast_shapes(tau.shape, state.q.shape), dtype=world.dtype, device=world.device, requires_grad=True)
        q_free, qd_free = world.robot.joint_step(state.q, state.qd, tau + probe)
        eye = torch.eye(n, dtype=world.dtype, device=world.device)
        (response,) = torch.autograd.grad(
            qd_free, probe, eye.reshape(n, *([1] * (probe.ndim - 1)), n).expand(n, *probe.shape),
            is_grads_batched=True, retain_graph=torch.is_grad_enabled(),
        )
    response = response.movedim(0, -2).detach() / world.dt
    mobility = 0.5 * (response + response.transpose(-1, -2))
    if not torch.is_grad_enabled():
        q_free, qd_free = q_free.detach(), qd_free.detach()
    return q_free, qd_free, mobility


def inverse_mass_apply(world, mobility, inv_inertia, mat):
    """``M⁻¹`` applied to the columns of ``mat``: robot block ``mobility``, objects exact.

    Args:
        world: ContactWorld (n robot joints, J objects).
        mobility: Robot impulse response (..., n, n), or None without a robot.
        inv_inertia: World inverse inertias (..., J, 3, 3).
        mat: (..., nv, c) with nv = n + 6J.

    Returns:
        (..., nv, c).
    """
    parts = []
    n = world.robot_dof
    if world.robot is not None:
        parts.append(mobility @ mat[..., :n, :])
    mass = world.params["mass"]
    for j in range(len(world.objects)):
        lin = mat[..., n + 6 * j : n + 6 * j + 3, :]
        ang = mat[..., n + 6 * j + 3 : n + 6 * j + 6, :]
        parts.append(lin / mass[..., j, None, None])
        parts.append(inv_inertia[..., j, :, :] @ ang)
    return torch.cat(parts, -2)


def free_velocity(world, state, robot_free, wrench, inv_inertia, inertia):
    """Velocities after the step without contact.

    Args:
        world: ContactWorld.
        state: WorldState.
        robot_free: :func:`robot_free_step`'s result, or None without a robot.
        wrench: Object wrenches ``[force (N), torque (N·m)]``, (..., J, 6), or None.
        inv_inertia, inertia: :func:`object_inertia`'s result, (..., J, 3, 3) each.

    Returns:
        (..., nv): [robot qd, object 0 (v [m/s], w [rad/s]), ...].
    """
    h = world.dt
    parts = []
    if robot_free is not None:
        parts.append(robot_free[1])
    shape = inv_inertia.shape[:-1]  # (..., J, 3) with the full batch
    v, w = state.linear_velocity.expand(shape), state.angular_velocity.expand(shape)
    force = torch.zeros_like(v) if wrench is None else wrench[..., :3]
    torque = torch.zeros_like(w) if wrench is None else wrench[..., 3:]
    mass = world.params["mass"][..., None]
    v_free = v + h * (world.gravity + force / mass)
    gyro = torch.cross(w, matvec(inertia, w), dim=-1)
    w_free = w + h * matvec(inv_inertia, torque - gyro)
    obj = torch.cat([v_free, w_free], -1)
    parts.append(obj.reshape(*obj.shape[:-2], -1))
    batch = torch.broadcast_shapes(*(p.shape[:-1] for p in parts))
    return torch.cat([p.expand(*batch, p.shape[-1]) for p in parts], -1)


def velocity_vector(world, state, batch):
    """The state's generalized velocity (..., nv): [robot qd, object 0 (v [m/s], w [rad/s]), ...]."""
    parts = []
    if world.robot is not None:
        parts.append(state.qd.expand(*batch, world.robot_dof))
    obj = torch.cat([state.linear_velocity, state.angular_velocity], -1)
    obj = obj.expand(*batch, *obj.shape[-2:])
    parts.append(obj.reshape(*batch, -1))
    return torch.cat(parts, -1)


# ---------------------------------------------------------------------------- contact solve
def contact_terms(world, state, contacts, jac, v_free, batch):
    """The contact rows: which slots bounce, and the bias ``b`` of ``w = A x + b``.

    A bouncing slot (active, restitution > 0, closing within the step faster than the bounce
    threshold, :func:`impact_speed`) targets ``e v_n``; others ``gap / h`` when apart
    (speculative) and ``beta gap / h`` when penetrating (Baumgarte).

    Args:
        world: ContactWorld.
        state: WorldState.
        contacts: Contacts (K slots).
        jac: Contact Jacobian (..., 3K, nv).
        v_free: Free velocity (..., nv).
        batch: The step's batch shape.

    Returns:
        :class:`ContactTerms`.
    """
    h = world.dt
    k = contacts.count
    free_contact = matvec(jac, v_free)
    approach = free_contact[..., 0::3]
    gap = contacts.gap.expand(*batch, k)
    active = contacts.active.expand(*batch, k)
    restitution = world.slot_values("restitution", batch)
    mu = world.slot_values("friction", batch)
    bouncing = active & (restitution > 0) & (gap + h * approach < 0)
    bouncing = bouncing & (impact_speed(world, state, jac, gap, approach, batch) < -world.options.bounce_threshold)
    stabilize = torch.where(gap > 0, gap, world.options.baumgarte * gap) / h
    normal_bias = torch.where(bouncing, restitution * approach, stabilize)
    bias = free_contact + torch.stack([normal_bias, torch.zeros_like(gap), torch.zeros_like(gap)], -1).reshape(*batch, 3 * k)
    return ContactTerms(gap, active, approach, mu, bouncing, bias)


def impact_speed(world, state, jac, gap, approach, batch):
    """Normal velocity at the impact [m/s], (..., K), for the bounce threshold (no gradient).

    The free velocity ``approach`` carries a whole step of gravity (``h g`` ~ 0.1 m/s at
    10 ms, the default threshold itself): tested against it, a resting stack settling at
    a few cm/s bounced, rose and landed at the speed it bounced with, hopping forever.
    A contact touching at the start of the step hits with its current velocity; one
    closing within the step at ``t* = gap / -approach``, with the velocity interpolated
    to ``t*``.

    Args:
        world: ContactWorld.
        state: WorldState.
        jac: Contact Jacobian (..., 3K, nv).
        gap: Gaps [m], (..., K).
        approach: Free normal velocities [m/s], (..., K).
        batch: The step's batch shape.
    """
    with torch.no_grad():
        current = matvec(jac[..., 0::3, :], velocity_vector(world, state, batch))
        closing = (-approach).clamp_min(torch.finfo(gap.dtype).tiny)
        fraction = (gap / closing).clamp(0.0, world.dt) / world.dt
        return current + fraction * (approach - current)


def _empty_solution(world, batch, k):
    """The solver's solution type (``world.options.solver``) with zero impulses on K slots, batch ``batch``."""
    ones = torch.ones(batch, dtype=torch.bool, device=world.device)
    zeros = torch.zeros(batch, dtype=torch.bool, device=world.device)
    if world.options.solver == "lcp":
        return LCPSolution(torch.zeros(*batch, k, 3, dtype=world.dtype, device=world.device),
                           torch.zeros(*batch, k, 3, dtype=torch.int8, device=world.device), ones, ones, zeros)
    return ConeSolution(torch.zeros(*batch, k, 3, dtype=world.dtype, device=world.device),
                        torch.zeros(*batch, k, dtype=world.dtype, device=world.device),
                        torch.zeros(*batch, k, dtype=torch.int8, device=world.device), ones, ones, zeros)


def solve(world, delassus, bias, mu, active, warm):
    """Contact impulses for the slots active anywhere in the batch (the others get zero).

    Compacting to the active slots keeps the solves small (a box on a plane has 8 corner
    slots of which 4 touch); results are scattered back to every slot, so warm starts and
    diagnostics stay indexed by slot.

    Args:
        world: ContactWorld (``options.solver``, ``complementarity_aware``, ``cone_method``).
        delassus: ``A = J M⁻¹ Jᵀ`` [1/kg] (velocity per impulse), (..., 3K, 3K).
        bias: ``b`` [m/s], (..., 3K).
        mu: Friction coefficients, (..., K).
        active: Active slots, bool (..., K).
        warm: Previous :class:`StepInfo` or None.

    Returns:
        LCPSolution or ConeSolution with impulses [N·s], (..., K, 3).
    """
    k = active.shape[-1]
    keep = active.reshape(-1, k).any(0).nonzero().flatten()
    rows = (3 * keep[:, None] + torch.arange(3, device=keep.device)).flatten()
    batch = bias.shape[:-1]
    empty = _empty_solution(world, batch, k)
    if keep.numel() == 0:
        return empty
    sub_a = delassus[..., rows, :][..., :, rows]
    sub_b, sub_mu, sub_active = bias[..., rows], mu[..., keep], active[..., keep]
    prior = None if warm is None else warm.solution
    if world.options.solver == "lcp":
        codes = None if prior is None else prior.codes[..., keep, :]
        sub = solve_lcp(sub_a, sub_b, sub_mu, sub_active, warm_codes=codes, complementarity_aware=world.options.complementarity_aware)
        codes = empty.codes.index_copy(-2, keep, sub.codes.expand(*batch, keep.numel(), 3))
        return LCPSolution(empty.impulse.index_copy(-2, keep, sub.impulse), codes, sub.warm_hit, sub.converged, sub.fallback)
    if prior is not None:
        prior = ConeSolution(prior.impulse[..., keep, :], prior.multiplier[..., keep], prior.modes[..., keep],
                             prior.warm_hit, prior.converged, prior.fallback)
    sub = solve_cone(sub_a, sub_b, sub_mu, sub_active, warm=prior, method=world.options.cone_method,
                     regularization=world.options.regularization)
    return ConeSolution(
        empty.impulse.index_copy(-2, keep, sub.impulse),
        empty.multiplier.index_copy(-1, keep, sub.multiplier.expand(*batch, keep.numel())),
        empty.modes.index_copy(-1, keep, sub.modes.expand(*batch, keep.numel())),
        sub.warm_hit, sub.converged, sub.fallback,
    )


def bounce_correction(world, terms, jac, minv_jt, delassus, v_free, v_next, impulse):
    """Position correction so that bounces within the step follow the continuous-time path.

    A contact closing at ``approach`` < 0 from ``gap`` > 0 hits at ``t* = gap / -approach``.
    In continuous time each body it touches moves at its free velocity until ``t*`` and at
    its post-step velocity after, ending at ``t* v_free + (h - t*) v_next`` rather than
    ``h v_next``: the missing ``t* (v_free - v_next)`` of the whole twist is added (a body
    touched by several bouncing contacts takes the first impact). Without it the hit's
    tangential velocity and spin were integrated from the step's start, and as the impact
    time crossed a (sub)step boundary the pose jumped by ``h`` times the velocity change
    (up to spin x substep in yaw): issue 19's collision fits stopped at such jumps of the
    cost, short of its minimum. The normal displacement is then made exact in the
    mass-weighted least-squares sense through the Delassus matrix: a bouncing contact ends
    at ``v_n (h - t*)``, and every other loaded contact (positive normal impulse this step)
    keeps its normal displacement at zero; a correction free to rotate a box resting on the
    ground (a hit above its centre) tilted it by 0.3 deg at 10 ms, and the sliding box then
    lost its spin twice as fast as MuJoCo's.

    Args:
        world: ContactWorld.
        terms: The step's :class:`ContactTerms`.
        jac: Contact Jacobian (..., 3K, nv).
        minv_jt: ``M⁻¹ Jᵀ``, (..., nv, 3K).
        delassus: ``J M⁻¹ Jᵀ`` [1/kg], (..., 3K, 3K).
        v_free: Velocity without contact impulses, (..., nv).
        v_next: Velocity after the contact impulses, (..., nv).
        impulse: Contact impulses [N·s], (..., 3K).

    Returns:
        Generalized displacement [m, rad] to add to ``h v_next``, (..., nv); zeros without bounces.
    """
    if not bool(terms.bouncing.any()):
        return torch.zeros_like(v_next)
    gap, approach, active = terms.gap, terms.approach, terms.active
    normal_rows = slice(0, None, 3)
    moving = terms.bouncing & (gap > 0)
    v_normal = matvec(jac[..., normal_rows, :], v_next)
    impact = (gap / (-approach).clamp_min(torch.finfo(gap.dtype).tiny)).clamp(0.0, world.dt)
    target = torch.where(moving, -gap - v_normal * impact, torch.zeros_like(gap))
    late = impact_twist(world, moving, impact, v_free - v_next)
    with torch.no_grad():
        pressed = impulse[..., normal_rows]
        loaded = active & (pressed > torch.finfo(gap.dtype).eps ** 0.5 * pressed.abs().amax(-1, keepdim=True))
    mask = (moving | loaded).to(gap.dtype)
    goal = (target - matvec(jac[..., normal_rows, :], late)) * mask
    a_nn = delassus[..., normal_rows, normal_rows]
    reduced = a_nn * mask[..., :, None] * mask[..., None, :] + torch.diag_embed(1.0 - mask)
    multipliers = matvec(pinv(reduced), goal) * mask
    return late + matvec(minv_jt[..., :, normal_rows], multipliers)


def impact_twist(world, moving, impact, change):
    """``t*_j (v_free - v_next)`` on each object j touched by a bouncing contact, (..., nv).

    Args:
        world: ContactWorld (n robot joints, J objects; the robot's columns stay zero).
        moving: Bouncing slots closing within the step, bool (..., K).
        impact: Their impact times ``t*`` [s], (..., K).
        change: ``v_free - v_next``, (..., nv).

    Returns:
        The displacement [m, rad] the bodies miss by moving at ``v_next`` before their first impact.
    """
    n = world.robot_dof
    parts = [torch.zeros_like(change[..., :n])]
    for j in range(len(world.objects)):
        touched = moving & (world.slot_signs("object", j) != 0)
        first = torch.where(touched, impact, torch.full_like(impact, math.inf)).amin(-1)
        first = torch.where(touched.any(-1), first, torch.zeros_like(first))
        parts.append(first[..., None] * change[..., n + 6 * j:n + 6 * j + 6])
    return torch.cat(parts, -1)


# ---------------------------------------------------------------------------- after the solve
def robot_response(world, state, tau, jac, impulse, robot_free):
    """Robot (q, qd) after the step, by its own simulator with the contact forces as torques.

    The contact solve sees the robot through its linearized impulse response; the robot is
    then advanced by its JointSpaceSimulator with ``tau + Jᵀ x / h``, so its dynamics (PBD
    substeps, implicit damping, nonlinearity) stay its own. Without robot contact impulses
    the free step is reused.

    Args:
        world: ContactWorld.
        state: WorldState.
        tau: Joint torques [N·m], (..., n), or None.
        jac: Contact Jacobian (..., 3K, nv).
        impulse: Contact impulses [N·s], (..., 3K).
        robot_free: :func:`robot_free_step`'s result, or None.

    Returns:
        ``(q, qd)``, each (..., n), or None without a robot.
    """
    if world.robot is None:
        return None
    n = world.robot_dof
    generalized = matvec(jac.transpose(-1, -2)[..., :n, :], impulse)
    if not bool((generalized != 0).any()):
        return robot_free[0], robot_free[1]
    tau = torch.zeros_like(state.q) if tau is None else tau
    return world.robot.joint_step(state.q, state.qd, tau + generalized / world.dt)


def integrate(world, state, robot_next, v_next, displacement, batch):
    """The next WorldState.

    Args:
        world: ContactWorld (n robot joints, J objects).
        state: WorldState at the start of the step.
        robot_next: :func:`robot_response`'s ``(q, qd)`` or None.
        v_next: Generalized velocity after the step, (..., nv).
        displacement: Generalized displacement over the step [m, rad], (..., nv)
            (``h v_next`` plus the bounce correction).
        batch: The step's batch shape.

    Returns:
        WorldState.
    """
    n = world.robot_dof
    count = len(world.objects)
    q = qd = None
    if robot_next is not None:
        # Bounce corrections (displacement beyond h v) also move the robot.
        q = robot_next[0] + (displacement[..., :n] - world.dt * v_next[..., :n])
        qd = robot_next[1]
    obj_v = v_next[..., n:].reshape(*batch, count, 6)
    obj_d = displacement[..., n:].reshape(*batch, count, 6)
    position = state.position + obj_d[..., :3]
    orientation = integrate_orientation(state.orientation.expand(*batch, count, 4), obj_d[..., 3:])
    return WorldState(position, orientation, obj_v[..., :3], obj_v[..., 3:], q, qd)
