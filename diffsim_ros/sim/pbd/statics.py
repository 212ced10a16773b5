"""Holding torques through a simulator (the paper's static-torque experiment, Section V-C).

The torques that keep a robot at rest are found by differentiating through one simulator
step, without any analytic gravity model: the simulator is the model.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor

__all__ = ["static_torques"]


def _rest_residual(simulator, q, tau):
    """Motion after one step from rest, scaled to an acceleration [rad/s²], shape (..., n)."""
    q_next, qd_next = simulator.joint_step(q, torch.zeros_like(q), tau)
    return (q_next - q) * (2.0 / simulator.dt**2) + qd_next / simulator.dt


def static_torques(simulator, q, iterations=3, tau=None):
    """Joint torques that hold the robot at rest at ``q`` in ``simulator`` (Gauss-Newton).

    Minimizes the motion of one step from rest, ``(q1 - q) 2/dt^2 + qd1/dt`` (an
    acceleration, ~ ``M^-1 (tau - g(q) + springs)``), by Newton steps with the 7x7
    Jacobian from autograd (n backward passes, batched over poses, which are independent).

    Args:
        simulator: Any JointSpaceSimulator (PBDSimulator, RigidBodySimulator, ...).
        q: Joint positions [rad or m], shape (..., n).
        iterations: Newton iterations (the map is nearly affine: 2-3 suffice).
        tau: Initial guess [N·m], shape (..., n); zeros when None.

    Returns:
        ``(tau, residual)``: torques [N·m or N] and the final residual norm per pose
        [rad/s²], shapes (..., n) and (...), both detached.
    """
    model = simulator.model
    q = joint_tensor(model, "q", q).detach()
    tau = torch.zeros_like(q) if tau is None else joint_tensor(model, "tau", tau).detach().clone()
    for _ in range(iterations):
        with torch.enable_grad():
            guess = tau.clone().requires_grad_(True)
            residual = _rest_residual(simulator, q, guess)
            rows = [
                torch.autograd.grad(residual[..., j].sum(), guess, retain_graph=j + 1 < model.nq)[0]
                for j in range(model.nq)
            ]
        jacobian = torch.stack(rows, dim=-2)  # d residual_j / d tau_k per pose
        tau = tau - torch.linalg.solve(jacobian, residual.detach().unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        residual = _rest_residual(simulator, q, tau)
    return tau, torch.linalg.vector_norm(residual, dim=-1)
