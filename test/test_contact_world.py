"""The contact world: Nimble's unit cases, bounces, rollout gradients, batching, bad input.

Both contact models run every case ("lcp": Nimble's boxed LCP, "cone": Le Lidec's Coulomb
cone). Gradients are compared with central finite differences of the same simulation, at
states away from mode switches (contacts that stay sticking, sliding or separated).
"""

import math

import pytest
import torch

from diffsim_ros.dynamics.spatial import quat_to_matrix
from diffsim_ros.sim.contact import Box, Capsule, ContactError, ContactWorld, Plane, RigidObject, Sphere, StaticShape, WorldState

SOLVERS = ("lcp", "cone")
DTYPE = torch.float64
G = 9.81
DT = 0.01
IMPULSE_TOL = 1e-9  # [N·s]
REGULARIZED_REL = 1e-5  # relative effect of the cone solver's 1e-6 compliance
REST_VELOCITY_TOL = 1e-6  # [m/s] creep of a resting body under the cone's compliance
ROUNDOFF = 1e-12
FD_EPS = 1e-6
FD_REL_TOL = 1e-5
BOUNCE_APEX_REL_TOL = 0.03  # discrete-time apex vs e² h0
STEP_JACOBIAN_ATOL = {"lcp": 1e-7, "cone": 1e-4}  # one-step Jacobian vs central FD; the cone's 1e-6 compliance
SKIP_SEED, SKIP_CASES, SKIP_MARGIN = 3, 60, 0.02  # random box pairs around the broad phase's boundary [m]


def _cube_world(solver, mass=0.5, friction=0.3, restitution=0.0, **kwargs):
    cube = RigidObject("cube", Box((0.05, 0.05, 0.05)), mass=mass, friction=friction, restitution=restitution)
    return ContactWorld.create([cube], solver=solver, dt=DT, **kwargs)


def _resting_cube(world, **velocities):
    return world.initial_state(position=[[0.0, 0.0, 0.05]], **velocities)


def _central_difference(fn, x, eps=FD_EPS):
    return (fn(x + eps) - fn(x - eps)) / (2 * eps)


@pytest.mark.parametrize("solver", SOLVERS)
def test_resting_box_splits_its_weight_equally_over_four_corners(solver):
    world = _cube_world(solver)
    state, info = world.step(_resting_cube(world))
    normal = info.impulse[..., 0][info.contacts.active]
    assert normal.numel() == 4
    expected = 0.5 * G * DT / 4
    torch.testing.assert_close(normal, torch.full_like(normal, expected), atol=expected * REGULARIZED_REL, rtol=0)
    assert float(state.linear_velocity.abs().max()) < REST_VELOCITY_TOL
    assert float((state.position[..., 2] - 0.05).abs().max()) < REST_VELOCITY_TOL * DT


@pytest.mark.parametrize("solver", SOLVERS)
def test_sphere_on_two_coincident_planes_splits_equally(solver):
    # Overlapping static geometry gives two identical contacts: A_CC is rank deficient.
    ball = RigidObject("ball", Sphere(0.1), mass=2.0, friction=0.5)
    static = [StaticShape("floor", Plane()), StaticShape("rug", Plane())]
    world = ContactWorld.create([ball], static=static, solver=solver, dt=DT)
    _, info = world.step(world.initial_state(position=[[0.0, 0.0, 0.1]]))
    normal = info.impulse[..., 0][info.contacts.active]
    assert normal.numel() == 2
    torch.testing.assert_close(normal[0], normal[1], atol=IMPULSE_TOL, rtol=0)
    expected = torch.tensor(2.0 * G * DT / 2, dtype=DTYPE)
    torch.testing.assert_close(normal[0], expected, atol=float(expected) * REGULARIZED_REL, rtol=0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_pushed_resting_box_has_zero_velocity_gradient_while_clamped(solver):
    world = _cube_world(solver)
    state = _resting_cube(world)
    limit = 0.3 * 0.5 * G  # static friction [N]

    def velocity_x(force):
        wrench = torch.zeros(1, 6, dtype=DTYPE)
        wrench = wrench + torch.nn.functional.one_hot(torch.tensor(0), 6).to(DTYPE) * force
        return world.step(state, wrench=wrench)[0].linear_velocity[0, 0]

    push = torch.tensor(0.5 * limit, dtype=DTYPE, requires_grad=True)
    v = velocity_x(push)
    (grad,) = torch.autograd.grad(v, push)
    sticking_slope = REGULARIZED_REL * DT / 0.5  # zero up to the cone solver's compliance
    assert abs(float(v)) < REST_VELOCITY_TOL and abs(float(grad)) < sticking_slope
    assert abs(float(_central_difference(velocity_x, push.detach()))) < sticking_slope
    # Beyond the friction limit it slides: dv/dF = h / m.
    push = torch.tensor(2.0 * limit, dtype=DTYPE, requires_grad=True)
    (grad,) = torch.autograd.grad(velocity_x(push), push)
    assert float(grad) == pytest.approx(DT / 0.5, rel=1e-6)
    assert float(_central_difference(velocity_x, push.detach())) == pytest.approx(DT / 0.5, rel=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_separating_contact_has_zero_impulse_and_gradient(solver):
    world = ContactWorld.create([RigidObject("ball", Sphere(0.1), mass=1.0, friction=0.5)], solver=solver, dt=DT, margin=0.05)
    height = torch.tensor(0.101, dtype=DTYPE, requires_grad=True)
    speed = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)
    zero = torch.zeros((), dtype=DTYPE)
    state = world.initial_state(
        position=torch.stack([zero, zero, height])[None], linear_velocity=torch.stack([zero, zero, speed])[None]
    )
    _, info = world.step(state)
    assert bool(info.contacts.active.any())  # within the margin, but moving away
    impulse = info.impulse[info.contacts.active]
    assert float(impulse.detach().abs().max()) == 0.0
    grads = torch.autograd.grad(impulse.sum(), (height, speed), allow_unused=True)
    assert all(g is None or float(g) == 0.0 for g in grads)


@pytest.mark.parametrize("solver", SOLVERS)
def test_ball_bouncing_within_a_step_has_minus_sigma_gradient(solver):
    sigma = 0.8
    world = ContactWorld.create(
        [RigidObject("ball", Sphere(0.1), mass=1.0, friction=0.5, restitution=sigma)], solver=solver, dt=DT
    )

    def next_height(z, v):
        zero = torch.zeros_like(z)
        state = world.initial_state(position=torch.stack([zero, zero, z])[None], linear_velocity=torch.stack([zero, zero, v])[None])
        next_state, info = world.step(state)
        assert bool(info.bouncing.any())
        return next_state.position[0, 2]

    z = torch.tensor(0.12, dtype=DTYPE, requires_grad=True)  # 2 cm gap, closing at 3 m/s: hits mid-step
    v = torch.tensor(-3.0, dtype=DTYPE, requires_grad=True)
    dz, dv = torch.autograd.grad(next_height(z, v), (z, v))
    assert float(dz) == pytest.approx(-sigma, rel=REGULARIZED_REL)
    assert float(dv) == pytest.approx(-sigma * DT, rel=REGULARIZED_REL)
    assert float(_central_difference(lambda x: next_height(x, v.detach()), z.detach())) == pytest.approx(-sigma, rel=FD_REL_TOL)
    assert float(_central_difference(lambda x: next_height(z.detach(), x), v.detach())) == pytest.approx(-sigma * DT, rel=FD_REL_TOL)
    # Continuous-time position: impact after 2/3.0981 of the step, then rebound at sigma * 3.0981 m/s.
    approach = 3.0 + G * DT
    expected = 0.1 + sigma * approach * (DT - 0.02 / approach)
    assert float(next_height(z, v)) == pytest.approx(expected, rel=REGULARIZED_REL)


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_bounce_within_a_step_moves_the_whole_twist_as_in_continuous_time(solver):
    # A ball landing with forward speed and no spin: the hit's friction slows it and spins it up.
    # In continuous time it moves at its free velocity until the impact and at the new one after;
    # integrating the new velocity over the whole step misplaced it by t* (v_free - v_next).
    world = ContactWorld.create([RigidObject("ball", Sphere(0.1), mass=1.0, friction=0.5, restitution=0.8)], solver=solver, dt=DT)
    state = world.initial_state(position=[[0.0, 0.0, 0.12]], linear_velocity=[[1.0, 0.0, -3.0]])
    next_state, info = world.step(state)
    assert bool(info.bouncing.any())
    impact = 0.02 / (3.0 + G * DT)  # the model's impact time: gap over the free approach speed
    v_x, spin = float(next_state.linear_velocity[0, 0]), float(next_state.angular_velocity[0, 1])
    assert v_x < 0.8 and spin > 2.0  # the friction impulse acted (sticking: v_x = 5/7, spin = v_x / r)
    assert float(next_state.position[0, 0]) == pytest.approx(1.0 * impact + v_x * (DT - impact), rel=REGULARIZED_REL)
    w, _, y, _ = next_state.orientation[0].unbind()
    assert float(2.0 * torch.atan2(y, w)) == pytest.approx(spin * (DT - impact), rel=REGULARIZED_REL)
    assert float(next_state.position[0, 2]) == pytest.approx(0.1 + 0.8 * (3.0 + G * DT) * (DT - impact), rel=REGULARIZED_REL)


@pytest.mark.parametrize("solver", SOLVERS)
def test_dropped_ball_rebounds_to_restitution_squared_height(solver):
    restitution, drop = 0.7, 0.3
    world = ContactWorld.create(
        [RigidObject("ball", Sphere(0.05), mass=0.2, friction=0.5, restitution=restitution)], solver=solver, dt=0.004
    )
    states, _ = world.rollout(world.initial_state(position=[[0.0, 0.0, 0.05 + drop]]), 250)
    height = states.position[:, 0, 2] - 0.05
    first_impact = int((states.linear_velocity[:, 0, 2] > 0).nonzero()[0])  # rebounding
    apex = float(height[first_impact:].max())
    assert apex == pytest.approx(restitution**2 * drop, rel=BOUNCE_APEX_REL_TOL)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("offset", [0.0, 0.01])
def test_box_box_collision_conserves_momentum_with_newton_restitution(solver, offset):
    # Frictionless, no gravity, four face contacts: the per-contact Newton law must act as one
    # collision of coefficient e (head on) and never create momentum (off-centre, it also spins).
    restitution, speed = 0.45, 2.0
    masses = (0.8, 0.5)
    cubes = [RigidObject(n, Box((0.05, 0.05, 0.05)), mass=m, friction=0.0, restitution=restitution) for n, m in zip("ab", masses)]
    world = ContactWorld.create(cubes, static=(), solver=solver, dt=DT, gravity=(0.0, 0.0, 0.0))
    state = world.initial_state(position=[[0.0, 0.0, 0.0], [0.2, offset, 0.0]], linear_velocity=[[speed, 0.0, 0.0], [0.0, 0.0, 0.0]])
    states, infos = world.rollout(state, 12)
    assert any(bool(info.bouncing.any()) for info in infos)
    mass = torch.tensor(masses, dtype=DTYPE)

    def momenta_and_energy(s):
        rot = quat_to_matrix(s.orientation)
        inertia = rot @ torch.diag_embed(mass[:, None] * world.unit_inertia) @ rot.transpose(-1, -2)
        linear = mass[:, None] * s.linear_velocity
        spin = (inertia @ s.angular_velocity[..., None])[..., 0]
        energy = 0.5 * ((linear * s.linear_velocity).sum() + (spin * s.angular_velocity).sum())
        return linear.sum(0), (torch.cross(s.position, linear, dim=-1) + spin).sum(0), energy

    (p0, l0, e0), (p1, l1, e1) = momenta_and_energy(state), momenta_and_energy(states.map(lambda t: t[-1]))
    torch.testing.assert_close(p1, p0, atol=ROUNDOFF, rtol=0)
    torch.testing.assert_close(l1, l0, atol=ROUNDOFF, rtol=0)
    assert float(e1) < float(e0)
    v = states.linear_velocity[-1, :, 0]
    if offset == 0.0:
        assert float(-(v[0] - v[1]) / speed) == pytest.approx(restitution, rel=REGULARIZED_REL)
        assert float(states.angular_velocity[-1].abs().max()) < ROUNDOFF


@pytest.mark.parametrize("solver", SOLVERS)
def test_pair_coefficients_are_parameters_of_their_own(solver):
    """A box's restitution against another box is not its restitution against the ground:
    ``a/b.restitution`` sets only that pair, differentiably, and the max rule stays elsewhere."""
    cubes = [RigidObject(n, Box((0.05, 0.05, 0.05)), mass=m, friction=0.0) for n, m in zip("ab", (0.8, 0.5))]
    world = ContactWorld.create(cubes, static=(), solver=solver, dt=DT, gravity=(0.0, 0.0, 0.0))
    assert "a/b.restitution" in world.pair_parameter_names()
    state = world.initial_state(position=[[0.0, 0.0, 0.0], [0.2, 0.0, 0.0]], linear_velocity=[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    e = torch.tensor(0.45, dtype=DTYPE, requires_grad=True)
    bouncy = world.with_parameters({"b/a.restitution": e})  # either order names the pair
    assert float(bouncy.get_parameter("a/b.restitution")) == pytest.approx(0.45)
    assert float(world.get_parameter("a/b.restitution")) == 0.0  # the max rule of the objects' values
    states, _ = bouncy.rollout(state, 12)
    v = states.linear_velocity[-1, :, 0]
    assert float(-(v[0] - v[1]) / 2.0) == pytest.approx(0.45, rel=REGULARIZED_REL)
    (grad,) = torch.autograd.grad(v[1], e)
    assert float(grad) == pytest.approx(2.0 * 0.8 / 1.3, rel=REGULARIZED_REL)  # d v_b / d e = m_a v0 / (m_a + m_b)
    # A ground pair keeps the object's own coefficients (no restitution leaks from the box pair).
    grounded = ContactWorld.create(cubes, solver=solver, dt=DT, pair_restitution={("a", "b"): 0.9})
    assert float(grounded.get_parameter("a/ground.restitution")) == 0.0
    assert float(grounded.get_parameter("a/b.restitution")) == pytest.approx(0.9)
    with pytest.raises(ContactError, match="unknown object parameter 'a/c.friction'"):
        world.with_parameters({"a/c.friction": 0.1})
    with pytest.raises(ContactError, match="must be in \\[0, 1\\]"):
        world.with_parameters({"a/b.restitution": 1.5})
    with pytest.raises(ContactError, match="may not contain '/'"):
        ContactWorld.create([RigidObject("a/b", Sphere(0.1), mass=1.0)])


@pytest.mark.parametrize("solver", SOLVERS)
def test_slow_landing_stack_comes_to_rest_without_hopping(solver):
    # Touching at 3 cm/s, far below the bounce threshold: the free velocity adds h g ~ 0.1 m/s,
    # and a bounce tested against it rebounded at the landing speed, hopping forever.
    boxes = [RigidObject(name, Box((0.05, 0.05, 0.05)), mass=0.5, friction=0.4, restitution=0.5) for name in ("bottom", "top")]
    world = ContactWorld.create(boxes, solver=solver, dt=DT)
    state = world.initial_state(position=[[0.0, 0.0, 0.05], [0.0, 0.0, 0.15]], linear_velocity=[[0.0, 0.0, -0.03]] * 2)
    states, infos = world.rollout(state, 20)
    assert not any(bool(info.bouncing.any()) for info in infos)
    assert float(states.linear_velocity[1:].abs().max()) < REST_VELOCITY_TOL
    assert all(bool(info.solution.warm_hit.all()) for info in infos[2:])


@pytest.mark.parametrize("solver", SOLVERS)
def test_rollout_gradients_match_finite_differences(solver):
    # A tilted-yaw box sliding diagonally with spin: friction, rotation and contact switches
    # of the corners' tangential directions, 15 steps, all smooth in the parameters.
    world = _cube_world(solver)
    yaw = 0.3
    orientation = [[math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]]

    def final_pose(friction, mass, vx, spin):
        model = world.with_parameters({"cube.friction": friction, "cube.mass": mass})
        zero = torch.zeros_like(vx)
        state = model.initial_state(
            position=[[0.0, 0.0, 0.05]],
            orientation=orientation,
            linear_velocity=torch.stack([vx, 0.6 * vx, zero])[None],
            angular_velocity=torch.stack([zero, zero, spin])[None],
        )
        states, _ = model.rollout(state, 15)
        return torch.cat([states.position[-1, 0, :2], states.orientation[-1, 0]])

    args = [torch.tensor(v, dtype=DTYPE, requires_grad=True) for v in (0.3, 0.5, 1.5, 2.0)]
    assert torch.autograd.gradcheck(final_pose, args, eps=FD_EPS, atol=1e-6, rtol=FD_REL_TOL)


def _stack_and_slider(solver):
    """A two-box stack and a third box sliding towards it, 5 steps in (all contacts established)."""
    boxes = [
        RigidObject(name, Box((0.05, 0.05, 0.05)), mass=mass, friction=mu, restitution=0.2)
        for name, mass, mu in (("slider", 0.6, 0.3), ("bottom", 0.5, 0.4), ("top", 0.3, 0.4))
    ]
    # Full penetration correction: no kink between speculative and Baumgarte bias at touching contacts.
    world = ContactWorld.create(boxes, solver=solver, dt=DT, baumgarte=1.0)
    state = world.settle(world.initial_state(
        position=[[0.0, 0.0, 0.05], [0.25, 0.0, 0.05], [0.25, 0.0, 0.15]], linear_velocity=[[1.5, 0.0, 0.0], [0, 0, 0], [0, 0, 0]]
    ))
    with torch.no_grad():
        states, _ = world.rollout(state, 5)
    return world, states.map(lambda t: t[..., -1, :, :])


@pytest.mark.parametrize("solver", SOLVERS)
def test_stacked_boxes_step_jacobian_matches_finite_differences(solver):
    # Stacked and sliding boxes have friction tied at a bound without slip (two corners at
    # opposite bounds, internal stress); the LCP's Jacobian must not let them slide.
    world, state = _stack_and_slider(solver)
    names = world.parameter_names()
    fields = ("position", "orientation", "linear_velocity", "angular_velocity")
    sizes = [getattr(state, f).numel() for f in fields]

    def step(inputs):
        parts = inputs[: sum(sizes)].split(sizes)
        current = WorldState(*(p.reshape(getattr(state, f).shape) for p, f in zip(parts, fields)))
        values = dict(zip(names, inputs[sum(sizes) :]))
        following, _ = world.with_parameters(values).step(current)
        return torch.cat([getattr(following, f).flatten() for f in fields])

    inputs = torch.cat([getattr(state, f).flatten() for f in fields] + [torch.stack([world.get_parameter(n) for n in names])])
    probe = inputs.clone().requires_grad_(True)
    out = step(probe)
    (exact,) = torch.autograd.grad(out, probe, torch.eye(out.numel(), dtype=DTYPE), is_grads_batched=True)
    with torch.no_grad():
        columns = [_central_difference(lambda e, i=i: step(inputs + e * torch.eye(inputs.numel(), dtype=DTYPE)[i]), 0.0) for i in range(inputs.numel())]
    torch.testing.assert_close(exact, torch.stack(columns, -1), atol=STEP_JACOBIAN_ATOL[solver], rtol=FD_REL_TOL)


@pytest.mark.parametrize("solver", SOLVERS)
def test_batched_parameters_match_individual_runs(solver):
    world = _cube_world(solver)
    frictions = torch.tensor([0.1, 0.3, 0.6], dtype=DTYPE)
    batched = world.with_parameters({"cube.friction": frictions})
    state = world.initial_state(position=[[0.0, 0.0, 0.05]], linear_velocity=[[1.0, 0.0, 0.0]])
    states, _ = batched.rollout(state, 15)
    assert states.position.shape == (3, 15, 1, 3)
    for i, mu in enumerate(frictions):
        single, _ = world.with_parameters({"cube.friction": mu}).rollout(state, 15)
        torch.testing.assert_close(states.position[i], single.position, atol=1e-12, rtol=0)
    # Friction slows sliding: travelled distance decreases with mu.
    travel = states.position[:, -1, 0, 0]
    assert bool((travel[1:] < travel[:-1]).all())


def test_float32_world_follows_its_dtype():
    world = ContactWorld.create([RigidObject("cube", Box((0.05, 0.05, 0.05)), mass=0.5)], dtype=torch.float32)
    state = world.initial_state(position=[[0.0, 0.0, 0.05]], linear_velocity=[[1.0, 0.0, 0.0]])
    states, _ = world.rollout(state, 5)
    assert states.position.dtype == torch.float32
    assert bool(torch.isfinite(states.position).all())


def test_interpenetrating_start_state_is_refused():
    world = _cube_world("lcp")
    with pytest.raises(ContactError, match="'cube' and 'ground' interpenetrate by 20.0 mm"):
        world.rollout(world.initial_state(position=[[0.0, 0.0, 0.03]]), 3)
    # A small, tolerated penetration is pushed out without NaN.
    states, infos = world.rollout(world.initial_state(position=[[0.0, 0.0, 0.0495]]), 20)
    assert float(infos[0].max_penetration) == pytest.approx(5e-4)
    assert float(states.position[-1, 0, 2]) == pytest.approx(0.05, abs=1e-4)


def test_bad_objects_and_parameters_are_refused():
    with pytest.raises(ContactError, match="mass"):
        RigidObject("cube", Box((0.05, 0.05, 0.05)), mass=0.0)
    with pytest.raises(ContactError, match="restitution"):
        RigidObject("cube", Box((0.05, 0.05, 0.05)), mass=1.0, restitution=1.5)
    with pytest.raises(ContactError, match="inertia"):
        RigidObject("cube", Box((0.05, 0.05, 0.05)), mass=1.0, inertia=(1.0, 0.0, 1.0))
    world = _cube_world("cone")
    with pytest.raises(ContactError, match="zero-mass"):
        world.with_parameters({"cube.mass": torch.tensor([0.5, 0.0], dtype=DTYPE)})
    with pytest.raises(ContactError, match="unknown object parameter"):
        world.with_parameters({"box.mass": 1.0})
    with pytest.raises(ContactError, match="not finite"):
        world.with_parameters({"cube.friction": float("nan")})
    with pytest.raises(ContactError, match="duplicate"):
        ContactWorld.create([RigidObject("ground", Sphere(0.1), mass=1.0)])
    with pytest.raises(ContactError, match="solver"):
        ContactWorld.create([RigidObject("ball", Sphere(0.1), mass=1.0)], solver="pgs")
    for bad in (-1e-3, 2.0, float("nan")):
        with pytest.raises(ContactError, match="regularization must be finite and >= 0.0 and <= 1.0"):
            world.with_regularization(bad)
    with pytest.raises(ContactError, match="link proxies need a robot"):
        from diffsim_ros.sim.contact import LinkProxy

        ContactWorld.create([], proxies=[LinkProxy("hand", "left_hand", Capsule(0.03, 0.05))])


def test_placed_shapes_keep_their_positional_fields_and_checks():
    from diffsim_ros.sim.contact import LinkProxy

    tilted = (1.0, 0.0, 0.0, 1.0)  # normalized on creation
    ramp = StaticShape("ramp", Plane(), (0.1, 0.0, 0.0), tilted, 0.4, 0.2)
    assert (ramp.name, ramp.position, ramp.friction, ramp.restitution) == ("ramp", (0.1, 0.0, 0.0), 0.4, 0.2)
    assert ramp.orientation == pytest.approx((math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5)))
    tip = LinkProxy("tip", "hand", Sphere(0.02), (0.0, 0.0, 0.1), tilted, 0.3, 0.1)
    assert (tip.name, tip.link, tip.position, tip.friction, tip.restitution) == ("tip", "hand", (0.0, 0.0, 0.1), 0.3, 0.1)
    assert tip.orientation == ramp.orientation
    with pytest.raises(ContactError, match="proxy 'tip': shape must be a Box, Sphere or Capsule, got Plane"):
        LinkProxy("tip", "hand", Plane())
    with pytest.raises(ContactError, match="static 'ramp' restitution"):
        StaticShape("ramp", Plane(), restitution=2.0)


def test_bad_states_are_refused_and_results_stay_finite():
    world = _cube_world("lcp")
    state = _resting_cube(world)
    nan_state = WorldState(state.position * float("nan"), state.orientation, state.linear_velocity, state.angular_velocity)
    with pytest.raises(ContactError, match="NaN"):
        world.step(nan_state)
    with pytest.raises(ContactError, match="float32"):
        world.step(state.map(lambda t: t.float()))
    with pytest.raises(ContactError, match="shape"):
        world.step(WorldState(state.position[..., :2], state.orientation, state.linear_velocity, state.angular_velocity))
    # Violent but valid: 50 m/s into the ground, spinning.
    fast = world.initial_state(position=[[0.0, 0.0, 0.1]], linear_velocity=[[3.0, 0.0, -50.0]], angular_velocity=[[20.0, 5.0, 0.0]])
    for solver in SOLVERS:
        states, _ = _cube_world(solver).rollout(fast, 20)
        assert bool(torch.isfinite(states.position).all() & torch.isfinite(states.linear_velocity).all())


def test_skipped_narrow_phase_never_changes_which_slots_are_active():
    """The step skips box pairs whose bounding spheres or a face axis separate them by more than
    the margin: on random poses near that boundary, the activity of every slot is the full
    detection's (the step uses nothing else of an inactive slot)."""
    boxes = [RigidObject(n, Box(h), mass=1.0) for n, h in (("a", (0.08, 0.04, 0.03)), ("b", (0.05, 0.05, 0.03)))]
    world = ContactWorld.create(boxes, solver="cone", dt=DT)
    generator = torch.Generator().manual_seed(SKIP_SEED)
    skipped = 0
    for _ in range(SKIP_CASES):
        offset = (2.0 * torch.rand(3, generator=generator, dtype=DTYPE) - 1.0) * torch.tensor([0.2, 0.2, 0.05], dtype=DTYPE)
        quats = torch.nn.functional.normalize(torch.randn(2, 4, generator=generator, dtype=DTYPE), dim=-1)
        centre = torch.tensor([0.0, 0.0, 0.1], dtype=DTYPE)
        state = world.initial_state(position=torch.stack([centre, centre + offset]), orientation=quats)
        full, fast = world.detect(state, SKIP_MARGIN), world.detect(state, SKIP_MARGIN, skip_apart=True)
        assert torch.equal(full.active, fast.active)
        skipped += int(not torch.equal(full.gap, fast.gap))
    assert 0 < skipped < SKIP_CASES  # both branches ran


def test_impact_substeps_split_only_the_steps_in_which_objects_may_touch():
    restitution, speed, substeps = 0.45, 2.0, 5
    cubes = [RigidObject(n, Box((0.05, 0.05, 0.05)), mass=m, friction=0.2, restitution=restitution) for n, m in zip("ab", (0.8, 0.5))]
    coarse = ContactWorld.create(cubes, solver="cone", dt=DT)
    world, fine = coarse.with_impact_substeps(substeps), ContactWorld.create(cubes, solver="cone", dt=DT / substeps)
    state = world.initial_state(position=[[0.0, 0.0, 0.05], [0.3, 0.0, 0.05]], linear_velocity=[[speed, 0.0, 0.0], [0.0, 0.0, 0.0]])
    split = 0
    for _ in range(12):
        nxt, _ = world.step(state)
        plain, _ = coarse.step(state)
        if not torch.equal(nxt.position, plain.position):  # else apart: the coarse step itself
            split += 1
            expected = state
            for _ in range(substeps):
                expected, _ = fine.step(expected)
            torch.testing.assert_close(nxt.position, expected.position, atol=ROUNDOFF, rtol=0)
        state = nxt
    assert split > 0
    assert float(state.linear_velocity[1, 0]) > 0.5  # the hit happened
    with pytest.raises(ContactError, match="positive integer"):
        coarse.with_impact_substeps(0)
