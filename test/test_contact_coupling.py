"""Robot-object coupling: a robot link (collision proxy) pushes an object through contact.

The robot is any JointSpaceSimulator: the rigid-body reference and the PBD simulator are
both exercised, through the joint-space interface and link Jacobians only.
"""

import pytest
import torch

from diffsim_ros.dynamics import forward_kinematics, frame_jacobian, gravity_torques, spring_torques
from diffsim_ros.model import RobotModel, load_robot_config
from diffsim_ros.sim import PBDSimulator, RigidBodySimulator
from diffsim_ros.sim.contact import Box, ContactWorld, LinkProxy, Plane, RigidObject, Sphere, StaticShape
from diffsim_ros.sim.contact.step import contact_jacobian, velocity_vector
from oracles import BAXTER_LEFT

DTYPE = torch.float64
DT = 0.01
G = 9.81
BOX_MASS, PUSHER_MASS, FRICTION = 0.5, 1.0, 0.3
FD_EPS = 1e-5  # the cone's compliant null directions leave ~1e-11 m of solver noise
FD_ATOL = 1e-6
FD_REL_TOL = 1e-5
REGULARIZED_REL = 1e-5  # the cone solver's compliance
JACOBIAN_FD_TOL = 1e-6  # [m/s] gap rate vs contact Jacobian
PENETRATION_TOL = 1e-3  # [m] hand into box while pressing
PUSH_FORCE = 10.0  # [N]
PUSH_REL_TOL = 0.05
PUSH_STEPS = 6
PBD_SUBSTEPS = 4

PUSHER_URDF = f"""<robot name="pusher">
  <link name="base"/>
  <link name="slider">
    <inertial><origin xyz="0 0 0"/><mass value="{PUSHER_MASS}"/>
      <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.001"/></inertial>
  </link>
  <joint name="slide" type="prismatic">
    <parent link="base"/><child link="slider"/><origin xyz="0 0 0.05"/><axis xyz="1 0 0"/>
    <limit lower="-2" upper="2" effort="100" velocity="10"/>
  </joint>
</robot>"""


def _simulators(model):
    return {
        "rigid": RigidBodySimulator(model, DT),
        "pbd": PBDSimulator(model, DT, substeps=PBD_SUBSTEPS, iterations=1),
    }


def _pusher_world(solver, simulator):
    model = RobotModel.from_urdf(PUSHER_URDF)
    robot = _simulators(model)[simulator]
    box = RigidObject("box", Box((0.05, 0.05, 0.05)), mass=BOX_MASS, friction=FRICTION)
    tip = LinkProxy("tip", "slider", Sphere(0.02))
    # A frictionless tip: with friction the slider (rigid vertically) could carry part of the
    # box's weight, and the split between tip friction and floor would be indeterminate.
    world = ContactWorld.create(
        [box], robot=robot, proxies=[tip], solver=solver, dt=DT, exclude=[("tip", "ground")], pair_friction={("tip", "box"): 0.0}
    )
    # Tip sphere (radius 2 cm) touching the box's -x face at the box's mid-height.
    state = world.initial_state(position=[[0.07, 0.0, 0.05]], q=[0.0], qd=[0.0])
    return world, state


@pytest.mark.parametrize("simulator", ["rigid", "pbd"])
@pytest.mark.parametrize("solver", ["lcp", "cone"])
def test_pushing_below_the_friction_limit_has_zero_gradient(solver, simulator):
    world, state = _pusher_world(solver, simulator)
    limit = FRICTION * BOX_MASS * G

    def velocities(force):
        next_state, _ = world.step(state, tau=force.reshape(1))
        return torch.stack([next_state.linear_velocity[0, 0], next_state.qd[0]])

    force = torch.tensor(0.5 * limit, dtype=DTYPE, requires_grad=True)
    v = velocities(force)
    jac = torch.stack([torch.autograd.grad(v[i], force, retain_graph=True)[0] for i in range(2)])
    sticking_slope = REGULARIZED_REL * DT / BOX_MASS
    assert float(v.detach().abs().max()) < 1e-6
    assert float(jac.abs().max()) < sticking_slope
    # Above the limit, pusher and box slide together: dv/dF = h / (m_pusher + m_box).
    force = torch.tensor(3.0 * limit, dtype=DTYPE, requires_grad=True)
    v = velocities(force)
    together = DT / (PUSHER_MASS + BOX_MASS)
    for i in range(2):
        (grad,) = torch.autograd.grad(v[i], force, retain_graph=True)
        assert float(grad) == pytest.approx(together, rel=1e-4)
    expected = (3.0 * limit - limit) * DT / (PUSHER_MASS + BOX_MASS)
    assert float(v[0]) == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("solver,simulator", [("lcp", "rigid"), ("cone", "rigid"), ("lcp", "pbd")])
def test_push_rollout_gradient_matches_finite_differences(solver, simulator):
    world, state = _pusher_world(solver, simulator)
    limit = FRICTION * BOX_MASS * G

    def box_travel(force, friction):
        model = world.with_parameters({"box.friction": friction})
        tau = force.reshape(1, 1).expand(PUSH_STEPS, 1)
        states, _ = model.rollout(state, PUSH_STEPS, tau=tau)
        return torch.stack([states.position[-1, 0, 0], states.q[-1, 0]])

    args = (torch.tensor(2.5 * limit, dtype=DTYPE, requires_grad=True), torch.tensor(FRICTION, dtype=DTYPE, requires_grad=True))
    assert torch.autograd.gradcheck(box_travel, args, eps=FD_EPS, atol=FD_ATOL, rtol=FD_REL_TOL)


def _baxter_world(simulator, solver="lcp"):
    model = load_robot_config(BAXTER_LEFT).build_model()
    q0 = torch.zeros(7, dtype=DTYPE)
    hand = forward_kinematics(model, q0, "left_hand")[:3, 3]
    radius, half = 0.04, 0.05
    box_center = hand - torch.tensor([0.0, 0.0, radius + half + 0.002], dtype=DTYPE)
    ground = StaticShape("table", Plane(), position=(0.0, 0.0, float(box_center[2]) - half))
    world = ContactWorld.create(
        [RigidObject("box", Box((half, half, half)), mass=1.0, friction=0.5)],
        static=[ground],
        robot=_simulators(model)[simulator],
        proxies=[LinkProxy("hand", "left_hand", Sphere(radius))],
        solver=solver,
        dt=DT,
    )
    return world, world.initial_state(position=box_center[None], q=q0, qd=q0)


def test_robot_contact_jacobian_matches_gap_rates():
    world, state = _baxter_world("rigid")
    qd = torch.tensor([0.3, -0.5, 0.2, 0.4, -0.1, 0.2, 0.3], dtype=DTYPE)
    box_velocity = torch.tensor([[0.05, -0.02, 0.1]], dtype=DTYPE)
    state = type(state)(state.position, state.orientation, box_velocity, torch.zeros_like(box_velocity), state.q, qd)
    contacts = world.detect(state, margin=0.05)
    frames = torch.stack([contacts.normal, contacts.normal, contacts.normal], -2)  # only row 0 is used
    jac = contact_jacobian(world, state, contacts, frames)
    velocity = velocity_vector(world, state, ())
    rate = (jac @ velocity)[0::3]

    def gaps(t):
        moved = type(state)(state.position + t * box_velocity, state.orientation, box_velocity, state.angular_velocity, state.q + t * qd, qd)
        return world.detect(moved, margin=0.05).gap

    fd = (gaps(1e-6) - gaps(-1e-6)) / 2e-6
    active = contacts.active
    hand_slot = active.nonzero()[0]
    torch.testing.assert_close(rate[hand_slot], fd[hand_slot], atol=JACOBIAN_FD_TOL, rtol=0)


@pytest.mark.parametrize("simulator", ["rigid", "pbd"])
def test_baxter_hand_presses_a_box_onto_the_table(simulator):
    world, state = _baxter_world(simulator)
    model = world.robot.model
    # Static compensation (gravity and the shoulder spring) plus a 10 N downward push at the hand.
    push = torch.tensor([0.0, 0.0, -PUSH_FORCE, 0.0, 0.0, 0.0], dtype=DTYPE)
    hold = gravity_torques(model, state.q) - spring_torques(model, state.q)
    tau = hold + frame_jacobian(model, state.q, "left_hand").transpose(-1, -2) @ push
    states, infos = world.rollout(state, 15, tau=tau.expand(15, 7))
    hand = torch.stack([info.impulse[0, 0] for info in infos])  # slot 0: the box-hand pair
    # The hand transmits the push (impulse = force * dt) without sinking in or moving the box.
    assert float(hand[-5:].mean()) == pytest.approx(PUSH_FORCE * DT, rel=PUSH_REL_TOL)
    last = type(state)(*(getattr(states, f)[-1] for f in ("position", "orientation", "linear_velocity", "angular_velocity", "q", "qd")))
    assert float(world.detect(last).gap[0]) > -PENETRATION_TOL
    assert float((last.position[0] - state.position[0]).norm()) < 1e-3
    assert bool(torch.isfinite(states.q).all())
