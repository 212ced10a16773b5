"""Kinetic and gravitational potential energy (springs: ``spring_potential_energy``)."""

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.crba import mass_matrix
from diffsim_ros.dynamics.kinematics import body_placements
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.dynamics.spatial import matvec

__all__ = ["kinetic_energy", "potential_energy"]


def kinetic_energy(model, q, qd):
    """Kinetic energy ``0.5 qd^T M(q) qd`` [J], shape (...)."""
    qd = joint_tensor(model, "qd", qd)
    return 0.5 * (qd * matvec(mass_matrix(model, q), qd)).sum(-1)


def potential_energy(model, q):
    """Gravitational potential energy ``-sum_k m_k g . c_k`` [J] (zero at the base origin), shape (...)."""
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    mass, h, _ = body_inertials(model)
    first_moment = mass[:, None] * pos + matvec(rot, h)
    return -(first_moment.sum(-2) * model.gravity).sum(-1)
