"""The compiled cone contact step (sim/contact/fast.py) against the torch ContactWorld step.

Scenes cover the three contact modes (sliding, sticking, separated corners of a tilted box),
spheres and capsules, a tilted second plane and an applied wrench. Values and Jacobians
(state and wrench, float64) are held to the torch step and its autograd (implicit
differentiation of the same converged cone solution), and the Jacobians to central
differences of the compiled step.
"""

import math

import numpy as np
import pytest
import torch

from diffsim_ros.sim.contact import Box, Capsule, ContactError, ContactWorld, Plane, RigidObject, Sphere, StaticShape
from diffsim_ros.sim.contact.cone import SEPARATED, SLIDING, STICKING
from diffsim_ros.sim.contact.fast import BOUNCE_CORRECTION, OK, FastContactStep, fast_support
from diffsim_ros.sim.contact.world import WorldState

VALUE_TOL = 1e-9  # next state, compiled vs torch, both solvers converged [m, -, m/s, rad/s]
JACOBIAN_TOL = 1e-9  # relative to max(1, max |J|): compiled vs torch autograd
FD_EPS = 1e-6  # central-difference step
FD_TOL = 1e-5  # relative: compiled Jacobian vs its central differences (solver round-off / eps)
DT = 0.01
HALF = 0.05


def _box(name="box", friction=0.3, restitution=0.0, mass=0.5):
    return RigidObject(name, Box((HALF, HALF, 0.8 * HALF)), mass=mass, friction=friction, restitution=restitution)


def _advance(world, state, steps, wrench=None):
    info = None
    with torch.no_grad():
        for _ in range(steps):
            state, info = world.step(state, wrench=wrench, warm=info)
    return state


def _sliding():
    world = ContactWorld.create([_box()], solver="cone", dt=DT, baumgarte=1.0)
    state = world.initial_state(position=[[0.0, 0.0, 0.8 * HALF]], linear_velocity=[[1.0, 0.3, 0.0]])
    return world, _advance(world, state, 5), None


def _resting_pushed():
    world = ContactWorld.create([_box(friction=0.8)], solver="cone", dt=DT)
    wrench = torch.tensor([[0.4, -0.2, 0.0, 0.0, 0.0, 0.01]], dtype=torch.float64)
    state = world.initial_state(position=[[0.1, 0.0, 0.8 * HALF]])
    return world, _advance(world, state, 4, wrench), wrench


def _tilted_landing():
    world = ContactWorld.create([_box(friction=0.5)], solver="cone", dt=DT)
    angle = 0.3
    quat = [math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0]
    low = HALF * math.sin(angle) + 0.8 * HALF * math.cos(angle)  # lowest edge height above the centre
    state = world.initial_state(position=[[0.0, 0.0, low + 1e-3]], orientation=[quat],
                                linear_velocity=[[0.4, 0.0, -0.3]], angular_velocity=[[0.5, 1.0, 0.2]])
    return world, _advance(world, state, 2), None


def _round_objects():
    wall = StaticShape("ramp", Plane(), position=(0.3, 0.0, 0.0), orientation=(math.cos(0.6), 0.0, -math.sin(0.6), 0.0))
    objects = [RigidObject("ball", Sphere(0.04), mass=0.3, friction=0.4),
               RigidObject("rod", Capsule(0.02, 0.08), mass=0.2, friction=0.2)]
    world = ContactWorld.create(objects, static=[StaticShape("ground", Plane()), wall], solver="cone", dt=DT,
                                exclude=[("ball", "rod")])
    rod = [math.cos(math.pi / 4), 0.0, math.sin(math.pi / 4), 0.0]  # lying along x
    # The ball rolls without slipping (sticking); the rod slides on the ground into the ramp.
    state = world.initial_state(position=[[-0.3, 0.0, 0.04], [0.2, 0.1, 0.02]], orientation=[[1, 0, 0, 0], rod],
                                linear_velocity=[[1.2, 0.0, 0.0], [0.3, -0.5, 0.0]], angular_velocity=[[0, 30.0, 0], [0, 0, 2.0]])
    return world, _advance(world, state, 3), None


def _flying():
    # No contact: gravity, the applied wrench and the gyroscopic torque of a tumbling box.
    world = ContactWorld.create([_box()], solver="cone", dt=DT)
    state = world.initial_state(position=[[0.0, 0.0, 1.0]], orientation=[[0.9, 0.1, -0.3, 0.2]],
                                linear_velocity=[[0.2, 0.0, 1.0]], angular_velocity=[[3.0, -1.0, 7.0]])
    return world, state, torch.tensor([[1.0, 0.5, -2.0, 0.01, 0.02, -0.03]], dtype=torch.float64)


SCENES = {"flying": _flying, "sliding": _sliding, "resting_pushed": _resting_pushed, "tilted_landing": _tilted_landing,
          "round_objects": _round_objects}


def _flat(state):
    return torch.cat([state.position.flatten(), state.orientation.flatten(), state.linear_velocity.flatten(),
                      state.angular_velocity.flatten()])


def _state(flat, count):
    cut = np.cumsum([0, 3 * count, 4 * count, 3 * count, 3 * count])
    shapes = [(count, 3), (count, 4), (count, 3), (count, 3)]
    return WorldState(*(flat[cut[i] : cut[i + 1]].reshape(shapes[i]) for i in range(4)))


@pytest.fixture(scope="module", params=list(SCENES))
def scene(request):
    world, state, wrench = SCENES[request.param]()
    count = len(world.objects)
    wrench = torch.zeros(count, 6, dtype=torch.float64) if wrench is None else wrench
    next_state, info = world.step(state, wrench=wrench)
    assert bool(info.solution.converged.all())

    names = world.parameter_names()

    def torch_step(flat, w, params):
        moved = world.with_parameters({name: params[i] for i, name in enumerate(names)})
        return _flat(moved.step(_state(flat, count), wrench=w)[0])

    params = torch.stack([world.get_parameter(name) for name in names])
    jac_state, jac_wrench, jac_params = torch.autograd.functional.jacobian(torch_step, (_flat(state), wrench, params))
    return dict(name=request.param, world=world, state=state, wrench=wrench, next=next_state, info=info,
                jac_state=jac_state.numpy(), jac_wrench=jac_wrench.reshape(13 * count, 6 * count).numpy(),
                jac_params=jac_params.numpy())


def _fields(state):
    return [state.position, state.orientation, state.linear_velocity, state.angular_velocity]


def test_step_matches_torch(scene):
    fast = FastContactStep(scene["world"])
    out = fast.step(*_fields(scene["state"]), wrench=scene["wrench"])
    assert fast.status == OK
    for ours, ref in zip(out, _fields(scene["next"])):
        np.testing.assert_allclose(ours, ref.numpy(), rtol=0, atol=VALUE_TOL)
    active = scene["info"].contacts.active.numpy()
    np.testing.assert_array_equal(fast.modes[active], scene["info"].solution.modes.numpy()[active])


def test_modes_cover_sliding_sticking_and_separated(scene):
    fast = FastContactStep(scene["world"])
    fast.step(*_fields(scene["state"]), wrench=scene["wrench"])
    expected = {"flying": set(), "sliding": {SLIDING}, "resting_pushed": {STICKING}, "tilted_landing": {SEPARATED, SLIDING},
                "round_objects": {SLIDING, STICKING}}[scene["name"]]
    active = scene["info"].contacts.active.numpy()
    assert expected <= set(fast.modes[active].tolist())


def test_jacobians_match_autograd(scene):
    fast = FastContactStep(scene["world"])
    _, d_state, d_wrench, d_params = fast.jacobians(*_fields(scene["state"]), wrench=scene["wrench"])
    assert fast.status == OK
    for ours, ref in ((d_state, scene["jac_state"]), (d_wrench, scene["jac_wrench"]), (d_params, scene["jac_params"])):
        scale = max(1.0, np.abs(ref).max())
        assert np.abs(ours - ref).max() <= JACOBIAN_TOL * scale


@pytest.mark.parametrize("name", ["sliding", "tilted_landing"])
def test_jacobians_match_central_differences(name):
    world, state, wrench = SCENES[name]()
    scene = dict(world=world, state=state, wrench=torch.zeros(len(world.objects), 6, dtype=torch.float64))
    fast = FastContactStep(scene["world"])
    fields = [f.numpy().copy() for f in _fields(scene["state"])]
    wrench = scene["wrench"].numpy().copy()
    _, d_state, d_wrench, _ = fast.jacobians(*fields, wrench=wrench)
    flat = np.concatenate([f.ravel() for f in fields] + [wrench.ravel()])
    count = len(scene["world"].objects)
    cut = np.cumsum([0, 3 * count, 4 * count, 3 * count, 3 * count, 6 * count])

    def run(vector):
        parts = [vector[cut[i] : cut[i + 1]] for i in range(5)]
        return np.concatenate([v.ravel() for v in fast.step(*parts[:4], wrench=parts[4])])

    columns = []
    for i in range(flat.size):
        delta = np.zeros_like(flat)
        delta[i] = FD_EPS
        columns.append((run(flat + delta) - run(flat - delta)) / (2 * FD_EPS))
    numeric = np.stack(columns, 1)
    analytic = np.concatenate([d_state, d_wrench], 1)
    assert np.abs(numeric - analytic).max() <= FD_TOL * max(1.0, np.abs(analytic).max())


def test_warm_started_rollout_matches_torch():
    world, state, _ = _sliding()
    fast = FastContactStep(world)
    ours, info, hits = state, None, 0
    with torch.no_grad():
        for _ in range(20):  # the box slides, then stops and sticks
            state, info = world.step(state, warm=info)
            ours = fast.step_state(ours, warm=fast.modes)
            hits += fast.warm_hit
            for a, b in zip(_fields(ours), _fields(state)):
                torch.testing.assert_close(a, b, rtol=0, atol=VALUE_TOL)
    assert hits >= 18


def test_uncovered_worlds_are_refused():
    lcp = ContactWorld.create([_box()], solver="lcp", dt=DT)
    assert "solver" in fast_support(lcp)
    boxes = ContactWorld.create([_box("a"), _box("b")], solver="cone", dt=DT)
    assert "a/b" in fast_support(boxes)
    with pytest.raises(ContactError, match="no compiled contact step"):
        FastContactStep(lcp)


def test_bounce_within_the_step_is_reported():
    world = ContactWorld.create([_box(restitution=0.5)], solver="cone", dt=DT)
    state = world.initial_state(position=[[0.0, 0.0, 0.8 * HALF + 0.005]], linear_velocity=[[0.0, 0.0, -2.0]])
    fast = FastContactStep(world)
    fast.step(*_fields(state))
    assert fast.status == BOUNCE_CORRECTION
    with pytest.raises(ContactError, match="bounces"):
        fast.step_state(state)
