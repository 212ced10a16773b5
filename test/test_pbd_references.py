"""Independent references for the PBD tests (MuJoCo from the same URDF; small URDF chains).

The helpers here are imported by the other ``test_pbd_*`` modules; the tests check the
references themselves (MuJoCo with the spring element and damping equals the exact
rigid-body integrator of diffsim_ros, so either can serve as ground truth).
"""

import numpy as np
import torch

from diffsim_ros.model import load_robot_config
from diffsim_ros.sim.rigid import RigidBodySimulator
from oracles import BAXTER_LEFT, BAXTER_URDF, mujoco_model

REFERENCE_TOL = 1e-9  # MuJoCo RK4 at 1e-4 s vs diffsim_ros RK4 at 1e-4 s [rad]
MUJOCO_TIMESTEP = 1e-4  # [s]; RK4 at this step is converged to ~1e-12 rad for Baxter


def baxter():
    """Baxter left arm (7 joints, shoulder spring, damping 0.7)."""
    return load_robot_config(BAXTER_LEFT).build_model()


def random_state(model, seed, speed=0.5, spread=1.0):
    """Deterministic joint positions/velocities [rad, rad/s] inside the limits."""
    rng = np.random.default_rng(seed)
    mid = 0.5 * (model.lower + model.upper)
    half = 0.5 * (model.upper - model.lower) * 0.6 * spread
    q = mid + half * torch.as_tensor(rng.uniform(-1, 1, model.nq), dtype=model.dtype)
    qd = torch.as_tensor(rng.uniform(-speed, speed, model.nq), dtype=model.dtype)
    return q, qd


def _spring_callback(model, dofs):
    """MuJoCo passive-force callback adding the Baxter spring element (its own numpy formula)."""
    p = model.params
    index = [dofs[j] for j in model.spring_joints]
    k, offset, alpha1, l1, l2, rest = (
        getattr(p, name).detach().numpy()
        for name in ("spring_stiffness", "spring_offset", "spring_alpha1", "spring_l1", "spring_l2", "spring_rest_length")
    )

    def callback(mj_model, data):
        phi = np.pi - alpha1 - offset + data.qpos[index]
        length = np.sqrt(l1**2 + l2**2 - 2 * l1 * l2 * np.cos(phi))
        data.qfrc_passive[index] += -k * (length - rest) * l1 * l2 * np.sin(phi) / length

    return callback


def mujoco_rollout(model, q0, qd0, tau_seq, dt, urdf=BAXTER_URDF, timestep=MUJOCO_TIMESTEP):
    """Joint trajectory of the same URDF in MuJoCo (RK4, limits off, model damping, armature and springs).

    Args:
        model: RobotModel (joint names, damping, springs; no friction or payload).
        q0, qd0: Initial joint state, shape (n,).
        tau_seq: Torques, shape (T, n), held for ``dt`` each.
        dt: Control period [s].

    Returns:
        ``(q, qd)`` numpy arrays, shape (T, n): the state after every control period.
    """
    import mujoco

    mj = mujoco_model(urdf)
    mj.opt.timestep = timestep
    mj.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    mj.jnt_limited[:] = 0
    dofs = np.array([mj.jnt_dofadr[mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in model.joint_names])
    mj.dof_damping[dofs] = model.params.damping.detach().numpy()
    mj.dof_armature[dofs] = model.params.armature.detach().numpy()
    data = mujoco.MjData(mj)
    data.qpos[dofs] = np.asarray(q0)
    data.qvel[dofs] = np.asarray(qd0)
    substeps = int(round(dt / timestep))
    qs, qds = [], []
    mujoco.set_mjcb_passive(_spring_callback(model, dofs) if model.spring_joints else None)
    try:
        for tau in np.asarray(tau_seq):
            data.qfrc_applied[dofs] = tau
            for _ in range(substeps):
                mujoco.mj_step(mj, data)
            qs.append(data.qpos[dofs].copy())
            qds.append(data.qvel[dofs].copy())
    finally:
        mujoco.set_mjcb_passive(None)
    return np.array(qs), np.array(qds)


def chain_urdf(lengths, masses, axes=None, kinds=None, radius=0.03):
    """URDF of a serial chain of uniform rods along x (a pendulum when axes are y).

    Args:
        lengths: Link lengths [m]; joint i sits at the end of link i - 1.
        masses: Link masses [kg].
        axes: Joint axes (3-tuples), default all y.
        kinds: Joint types ("revolute" or "prismatic"), default all revolute.
        radius: Rod radius [m] (inertia about the rod axis).
    """
    axes = axes or [(0, 1, 0)] * len(lengths)
    kinds = kinds or ["revolute"] * len(lengths)
    links, joints, parent, offset = ['<link name="base"/>'], [], "base", 0.0
    for i, (length, mass, axis, kind) in enumerate(zip(lengths, masses, axes, kinds)):
        across = mass * (3 * radius**2 + length**2) / 12
        along = mass * radius**2 / 2
        links.append(
            f'<link name="link{i + 1}"><inertial><origin xyz="{length / 2} 0 0"/><mass value="{mass}"/>'
            f'<inertia ixx="{along}" ixy="0" ixz="0" iyy="{across}" iyz="0" izz="{across}"/></inertial></link>'
        )
        joints.append(
            f'<joint name="j{i + 1}" type="{kind}"><parent link="{parent}"/><child link="link{i + 1}"/>'
            f'<origin xyz="{offset} 0 0"/><axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>'
            f'<limit lower="-10" upper="10" effort="100" velocity="100"/></joint>'
        )
        parent, offset = f"link{i + 1}", length
    return '<robot name="chain">' + "".join(links) + "".join(joints) + "</robot>"


def test_mujoco_reference_equals_exact_rigid_body_integration():
    """The MuJoCo reference (spring callback, damping) is the exact dynamics of our model."""
    model = baxter()
    q0, qd0 = random_state(model, 0)
    tau = torch.zeros(3, model.nq, dtype=model.dtype)
    mj_q, mj_qd = mujoco_rollout(model, q0.numpy(), qd0.numpy(), tau.numpy(), 0.002)
    with torch.no_grad():
        q, qd = RigidBodySimulator(model, 0.002, substeps=20, integrator="rk4").rollout(q0, qd0, tau)
    np.testing.assert_allclose(q.numpy(), mj_q, atol=REFERENCE_TOL, rtol=0)
    np.testing.assert_allclose(qd.numpy(), mj_qd, atol=1e3 * REFERENCE_TOL, rtol=0)
