"""Whether a fitted robot model explains the measured torques: the arm's fit-quality check.

A least-squares fit always returns numbers, even when the model cannot describe the data
(efforts of the opposite sign, a joint's effort under another joint's name, a damping the
robot does not have). Parameters then absorb what they can and the rest is left in the
residual, with standard deviations computed from that residual as if it were noise.

The check regresses each joint's measured torque ``d`` on the torque the fitted model
predicts for it, ``m = d + e`` (``e`` the fit's error): ``d ~ offset + slope * m``. A model
that explains the data has slope 1 whatever the noise, and a small offset (an effort
sensor's bias); the failures above give slopes of -1 or 0, or offsets of the size of the
arm's torques. Unlike comparing the residual with a noise level, the slope needs no
estimate of the torque noise (whose colour on a real robot is unknown) and does not flag a
joint whose torque is mostly noise: there the slope is undetermined and its std is large.

A joint fails when its slope is off by more than :data:`SLOPE_LIMIT` and :data:`SLOPE_SIGMAS`
of its std with a material residual (:data:`MATERIAL_FRACTION`), or when its offset is
larger than any sensor bias (:data:`OFFSET_FRACTION`). The slope's std is the regression's,
from the scatter about the fitted line, counting one independent sample per filter window
of the data (filtered motion is correlated over that span), so it is conservative. Sizes are
fractions of the block's largest rms measured torque over the joints: the torque scale of the
arm, whatever its size (not the spread about the mean: one rest pose has none).
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["SLOPE_LIMIT", "SLOPE_SIGMAS", "MATERIAL_FRACTION", "OFFSET_FRACTION", "TorqueAgreement", "torque_agreement", "agreement_verdict"]

SLOPE_LIMIT = 0.5
"""Largest |slope - 1| of a joint's measured-on-predicted torque regression in a good fit.
Measured (``python -m benchmarks.bench_identification --parts quality``, and an independent
generator): every joint of a consistent model within 0.06 of 1 (100 and 10 Hz, rigid and
PBD, with and without Coulomb friction); negated efforts -0.4 to -1.8; a nominal damping of
0.7 N·m·s/rad the data do not contain 0.0-0.4 on the fastest wrist joint."""

SLOPE_SIGMAS = 4.0
"""And by more than this many of the slope's standard deviations (significance)."""

MATERIAL_FRACTION = 0.02
"""And its residual is above this fraction of the block's torque scale (its largest rms
measured torque over the joints): a wrist joint that the model misses by 0.05 N·m (a cable, an
unconverged payload centre of mass) on an arm whose shoulder torques vary by 10 N·m is no
reason to call the whole fit poor. Measured on an independent generator (6 and 20 s at
100 Hz): a consistent model leaves 0.1-0.5 %; a nominal damping of 0.7 N·m·s/rad the robot
does not have, 6 % on the fastest wrist joint."""

OFFSET_FRACTION = 0.1
"""Largest |mean of measured minus predicted torque| of a joint in a good fit, as a fraction
of the torque scale: a sensor's bias, not a shoulder's torque under an elbow's name (the
swapped joint of the benchmark is off by 33 N·m on a scale of 7.7 N·m)."""

SHOWN = 3
"""Failing joints a message names per block (the worst)."""


@dataclass(frozen=True)
class TorqueAgreement:
    """How the measured torques of one residual block compare with the model's, per joint.

    Attributes:
        block: Residual block name (e.g. ``"inverse dynamics"``).
        slope: Regression slope of measured on predicted torque, shape (n,); NaN where the
            model predicts no torque or no entry counts.
        slope_std: Its standard deviation, shape (n,).
        offset: Mean of measured minus predicted torque [N·m], shape (n,).
        residual_rms: RMS fit error [N·m], shape (n,).
        measured_rms: RMS measured torque [N·m], shape (n,).
    """

    block: str
    slope: np.ndarray
    slope_std: np.ndarray
    offset: np.ndarray
    residual_rms: np.ndarray
    measured_rms: np.ndarray

    @property
    def scale(self):
        """The block's torque scale: its largest per-joint rms measured torque [N·m]."""
        return float(np.max(np.nan_to_num(self.measured_rms), initial=0.0))

    def failing(self, limit=SLOPE_LIMIT, sigmas=SLOPE_SIGMAS, material=MATERIAL_FRACTION, offset=OFFSET_FRACTION):
        """Indices of the failing joints (see the module's docstring), numpy int array."""
        off = np.abs(self.slope - 1.0)
        with np.errstate(invalid="ignore"):
            slope = (off > limit) & (off > sigmas * self.slope_std) & (self.residual_rms > material * self.scale)
            shifted = np.abs(self.offset) > offset * self.scale
        return np.flatnonzero(np.nan_to_num(slope) | np.nan_to_num(shifted))


def torque_agreement(block, measured, error, weight=None, span=0):
    """Per-joint agreement of measured torques with a fitted model's.

    Args:
        block: Residual block name.
        measured: Measured torques [N·m], shape (N, n).
        error: Model minus measured [N·m] at the fit, shape (N, n).
        weight: 1 for entries that count, 0 for left-out ones, shape (N, n), or None.
        span: Samples on each side that a filtered entry depends on (0: independent rows).

    Returns:
        TorqueAgreement.
    """
    measured, error = np.asarray(measured, float), np.asarray(error, float)
    weight = np.ones_like(measured) if weight is None else np.asarray(weight, float)
    predicted = measured + error
    count = weight.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        # About the means: a constant effort offset (a sensor's bias) is not a slope.
        d = measured - (weight * measured).sum(0) / count
        m = predicted - (weight * predicted).sum(0) / count
        power = (weight * m**2).sum(0)
        slope = np.where(power > 0, (weight * m * d).sum(0) / power, np.nan)
        scatter = (weight * (d - slope * m) ** 2).sum(0) / count
        slope_std = np.sqrt((2 * int(span) + 1) * scatter / power)
        residual = np.sqrt((weight * error**2).sum(0) / count)
        rms = np.sqrt((weight * measured**2).sum(0) / count)
        offset = -(weight * error).sum(0) / count
    empty = count == 0
    slope[empty] = np.nan
    return TorqueAgreement(block, slope, np.where(empty, np.nan, slope_std), offset, residual, rms)


def agreement_verdict(agreements, joint_names):
    """None when every block's torques agree with the model, else a message naming the joints.

    Args:
        agreements: Sequence of :class:`TorqueAgreement`.
        joint_names: Names of the columns, length n.
    """
    parts = []
    for item in agreements:
        bad = item.failing()
        worst = bad[np.argsort(-item.residual_rms[bad])][:SHOWN]
        joints = [f"{joint_names[j]} slope {item.slope[j]:.2f} offset {item.offset[j]:+.3g} N·m (residual "
                  f"{item.residual_rms[j]:.3g} N·m rms vs {item.measured_rms[j]:.3g} measured)" for j in worst]
        if bad.size > SHOWN:
            joints.append(f"and {bad.size - SHOWN} more")
        if joints:
            parts.append(f"{item.block}: {', '.join(joints)}")
    if not parts:
        return None
    return ("poor fit: the measured torques are not what the fitted model predicts (measured = offset + slope x "
            f"predicted: a model that explains them has slope 1 +- {SLOPE_LIMIT:g} and an offset within "
            f"{100 * OFFSET_FRACTION:g} % of the arm's largest rms torque): "
            + "; ".join(parts) + ". Check the effort sign and units, the joint names of the robot config and the torque "
            "source; an offset alone is an effort sensor's bias (estimate the effort_bias group); "
            "unmodelled damping or friction also do this (estimate those groups)")
