"""Spring calibration by curve fitting (the classical scheme Liu et al. compare against).

The spring joint's torque at rest that gravity does not explain, ``g(q) - effort``, is
attributed to the spring and fitted with the spring law by nonlinear least squares. It uses
one joint's torque only and trusts the rest of the model, so an unknown payload biases it;
identification through the differentiable model (:func:`~diffsim_ros.estimation.identification.identify`)
uses every joint and can estimate the payload jointly.
"""

import math

import numpy as np
import torch
from scipy.optimize import curve_fit

from diffsim_ros.dynamics.rnea import gravity_torques

__all__ = ["fit_spring_curve"]


def fit_spring_curve(model, poses, joint):
    """Fit stiffness and offset of the spring on ``joint`` to static poses.

    Args:
        model: RobotModel with a lever spring (Baxter's law) on ``joint`` (its other spring
            values are kept; other spring elements are ignored).
        poses: StaticPoses.
        joint: Spring joint name.

    Returns:
        ``(values, stddev)``: dicts for ``<joint>.spring.stiffness`` and ``<joint>.spring.offset``.
    """
    index = model.joint_index(joint)
    spring = next((s for s in model.springs if s.law == "lever" and s.joint == joint), None)
    if spring is None:
        raise ValueError(f"joint '{joint}' has no spring element of the lever law (the one this fit knows)")
    q = torch.as_tensor(poses.q, dtype=model.dtype, device=model.device)
    with torch.no_grad():
        residual = (gravity_torques(model, q)[:, index]).cpu().numpy() - poses.effort[:, index]
    theta = poses.q[:, index]

    def law(angle, stiffness, offset):
        phi = math.pi - spring.alpha1 - offset + angle
        length = np.sqrt(spring.l1**2 + spring.l2**2 - 2 * spring.l1 * spring.l2 * np.cos(phi))
        return -stiffness * (length - spring.rest_length) * spring.l1 * spring.l2 * np.sin(phi) / length

    estimate, cov = curve_fit(law, theta, residual, p0=(spring.stiffness, spring.offset), sigma=poses.effort_std[:, index])
    std = np.sqrt(np.diag(cov))
    names = (f"{joint}.spring.stiffness", f"{joint}.spring.offset")
    return dict(zip(names, estimate)), dict(zip(names, std))
