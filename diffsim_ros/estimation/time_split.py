"""Do the data before and after their middle agree on the parameters? One calibration for one robot.

A recording in which the robot changed (a payload picked up halfway, a cable that starts to
drag) is fitted by a blend: ``make demo``'s bag, 1.3 kg then 2.0 kg, gave a payload of
1.65 kg with slopes all near 1, which the torque-agreement check cannot see, since every
parameter bends to split the difference. Under one model, the data before and after their
middle estimate the same parameters; :func:`time_split` compares the two linearized
estimates at the joint solution
(:func:`~diffsim_ros.estimation.consistency.split_consistency`: no extra fit, sandwich
covariances for the filtered motion's correlated errors). Motion samples count at their
stamps, rest poses at their interval's middle; camera rows (and rest poses of unknown times)
have none and inform both halves.

A difference counts when it is both beyond the noise (the split's chi-square below
``CONSISTENCY_P_VALUE``, the parameter itself beyond :data:`SPLIT_SIGMAS`) and large enough
to matter (:data:`SPLIT_RELEVANCE` of the value or the resolution of its kind): with 10 000
samples of motion, a model error of a percent is significant yet not worth refusing a
calibration for.
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE, split_consistency
from diffsim_ros.estimation.identifiability import named_delta_method
from diffsim_ros.model.plausibility import parameter_kind

__all__ = ["SPLIT_RELEVANCE", "SPLIT_SIGMAS", "TimeSplit", "time_parts", "time_split"]

SPLIT_RELEVANCE = 0.05
"""Relative difference of the halves' estimates that matters (or the kind's resolution): a payload
changed by 10 % halfway leaves a blend 5 % off either (on the independent MuJoCo arm, steps
of 10 % and 20 % gave halves 0.100 and 0.200 kg apart, each +- 0.008-0.016 kg)."""
SPLIT_SIGMAS = 3.3
"""Difference of one parameter, in its std, beyond the noise (two-sided p ~ 1e-3)."""
SHARED = 2
UNTIMED_KINDS = ("camera.pose",)
"""Kinds only rows without times inform (shared by both halves: never named)."""


@dataclass(frozen=True)
class TimeSplit:
    """Result of :func:`time_split`.

    Attributes:
        middle_ns: Stamp [ns] dividing the timed samples in halves (the recording's time
            base: from a bag's first joint state).
        p_value: The split test's p-value (1 when nothing is tested).
        dof: Its degrees of freedom.
        before, after: Parameter name -> each half's linearized estimate (numpy).
        before_std, after_std: Their standard deviations.
        differ: Names whose halves differ beyond the noise and by a relevant amount.
    """

    middle_ns: int
    p_value: float
    dof: int
    before: dict
    after: dict
    before_std: dict
    after_std: dict
    differ: tuple

    def verdict(self):
        """None when the halves agree, else a message naming the parameters and both values."""
        if not self.differ:
            return None
        parts = [f"{name} {_fmt(self.before[name])} +- {_fmt(self.before_std[name])} before, "
                 f"{_fmt(self.after[name])} +- {_fmt(self.after_std[name])} after" for name in self.differ]
        return (f"poor fit: the data before and after their middle disagree (split p = {self.p_value:.2g}): "
                + "; ".join(parts) + ". The robot changed during the recording (a payload picked up or set down, a "
                "cable, a tool) or the model misses an effect that changes over time; one calibration does not "
                "describe these data: calibrate each segment on its own")


def _fmt(value):
    return ", ".join(f"{v:.4g}" for v in np.atleast_1d(np.asarray(value, float)))


def time_parts(blocks):
    """Half of every stacked residual row: 0 before the median stamp of the timed samples, 1
    after it, :data:`SHARED` for rows without times. Returns ``(parts (R,), middle_ns)``, or
    ``(None, None)`` without timed rows."""
    stamps = [b.sample_ns for b in blocks if b.sample_ns is not None]
    if not stamps:
        return None, None
    middle = int(np.median(np.concatenate(stamps)))
    parts = []
    for block in blocks:
        size = block.scale.numel()
        if block.sample_ns is None:
            parts.append(np.full(size, SHARED))
        else:
            parts.append(np.repeat((block.sample_ns > middle).astype(int), size // len(block.sample_ns)))
    return np.concatenate(parts), middle


def _differs(name, before, after, spread, value, resolution):
    if parameter_kind(name) in UNTIMED_KINDS:
        return False
    difference = np.atleast_1d(after - before)
    with np.errstate(divide="ignore", invalid="ignore"):
        beyond_noise = np.any(np.abs(difference) > SPLIT_SIGMAS * np.atleast_1d(spread))
    relevant = max(SPLIT_RELEVANCE * float(np.linalg.norm(value)), resolution.get(parameter_kind(name) or "", 0.0))
    return bool(beyond_noise and np.linalg.norm(difference) > relevant)


def time_split(jac, psi, variance, blocks, serial, physical, resolution):
    """Whether the data before and after their middle agree on the parameters.

    Args:
        jac: Normalized residual Jacobian at the solution over the free coordinates, (R, P).
        psi: Influence of every normalized residual, (R,).
        variance: Residual variance of the independent rows.
        blocks: The residual blocks, in row order (their ``sample_ns``).
        serial: :class:`~diffsim_ros.estimation.identifiability.SerialRows` of the rows.
        physical: ``(value (Q,), jacobian (Q, P), layout)``: the physical parameters at the
            solution, their Jacobian over the coordinates and ``[(name, shape)]``.
        resolution: Parameter kind -> the smallest difference that matters.

    Returns:
        TimeSplit, or None without timed data in both halves.
    """
    parts, middle = time_parts(blocks)
    if parts is None or not (parts == 0).any() or not (parts == 1).any():
        return None
    test = split_consistency(jac, psi, variance, parts, serial, shared=SHARED)
    value, jp, layout = physical
    (before, before_std), (after, after_std) = (named_delta_method(value + jp @ step, jp, layout, cov)
                                                for step, cov in zip(test.steps, test.covariances))
    joint, spread = named_delta_method(value, jp, layout, test.covariances[0] + test.covariances[1])
    differ = ()
    if not test.agrees(CONSISTENCY_P_VALUE):
        differ = tuple(n for n in joint if _differs(n, before[n], after[n], spread[n], joint[n], resolution))
    return TimeSplit(middle, test.p_value, test.dof, before, after, before_std, after_std, differ)
