"""Do the data before and after a cut agree on the parameters? One calibration for one robot.

A recording in which the robot changed (a payload picked up halfway, a cable that starts to
drag) is fitted by a blend: ``make demo``'s bag, 1.3 kg then 2.0 kg, gave a payload of
1.65 kg with slopes all near 1, which the torque-agreement check cannot see, since every
parameter bends to split the difference. Under one model, the data before and after a cut
estimate the same parameters; :func:`time_split` compares the two linearized estimates at
the joint solution (:func:`~diffsim_ros.estimation.consistency.split_consistency`: no extra
fit, sandwich covariances for the filtered motion's correlated errors), cutting at the
middle and at the quartiles of the timed samples (:data:`SPLIT_FRACTIONS`). Motion samples
count at their stamps, rest poses at their interval's middle; camera rows (and rest poses of
unknown times) have none: they inform both sides of the middle cut and neither side of a
quartile cut, where they would weigh unequally against the timed data on the two sides.

A difference counts when it is both beyond the noise (the split's chi-square, corrected for
the number of cuts, below ``CONSISTENCY_P_VALUE``; the parameter itself beyond
:data:`SPLIT_SIGMAS`) and large enough to matter (:data:`SPLIT_RELEVANCE` of the value or the
resolution of its kind): with 10 000 samples of motion, a model error of a percent is
significant yet not worth refusing a calibration for.
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE, split_consistency
from diffsim_ros.estimation.identifiability import named_delta_method
from diffsim_ros.model.plausibility import parameter_kind

__all__ = ["SPLIT_FRACTIONS", "SPLIT_RELEVANCE", "SPLIT_SIGMAS", "TimeSplit", "time_parts", "time_split"]

SPLIT_FRACTIONS = (0.5, 0.25, 0.75)
"""Where the data are cut: shares of the timed samples before the cut. The middle sees a change
halfway best. A change near either end leaves the halves close, and one that went back (A B A
B by quarters) leaves them alike; the quartile cuts see both (independent MuJoCo arm, 1.0 ->
1.2 kg a fifth of the way in: the halves passed a 1.174 kg blend, the first quartile's sides
read 1.09 / 1.20 kg). A change within the first or last tenth stays unseen. The middle comes
first, so it is the one reported when cuts tie."""
SPLIT_RELEVANCE = 0.05
"""Relative difference of the parts' estimates that matters (or the kind's resolution): a payload
changed by 10 % halfway leaves a blend 5 % off either (on the independent MuJoCo arm, steps
of 10 % and 20 % gave halves 0.100 and 0.200 kg apart, each +- 0.008-0.016 kg)."""
SPLIT_SIGMAS = 3.3
"""Difference of one parameter, in its std, beyond the noise (two-sided p ~ 1e-3)."""
SHARED = 2  # label of rows both sides use
UNUSED = 3  # label of rows neither side uses
UNTIMED_KINDS = ("camera.pose",)
"""Kinds only rows without times inform (shared by both parts: never named)."""


@dataclass(frozen=True)
class TimeSplit:
    """Result of :func:`time_split`: the cut reported (the one whose parts differ, with the
    smallest p-value; else the smallest p-value).

    Attributes:
        at_ns: Stamp [ns] of the cut (the recording's time base: from a bag's first joint state).
        fraction: Share of the timed samples before the cut (one of :data:`SPLIT_FRACTIONS`).
        p_value: The cut's p-value times the number of cuts tested (Bonferroni; at most 1; 1
            when nothing is tested).
        dof: Its degrees of freedom.
        before, after: Parameter name -> each part's linearized estimate (numpy).
        before_std, after_std: Their standard deviations.
        differ: Names whose parts differ beyond the noise and by a relevant amount.
    """

    at_ns: int
    fraction: float
    p_value: float
    dof: int
    before: dict
    after: dict
    before_std: dict
    after_std: dict
    differ: tuple

    @property
    def where(self):
        """The cut in words: ``their middle``, or the share of the samples before it."""
        return "their middle" if self.fraction == 0.5 else f"{100 * self.fraction:.0f} % of their samples"

    def verdict(self):
        """None when the parts agree, else a message naming the parameters and both values."""
        if not self.differ:
            return None
        parts = [f"{name} {_fmt(self.before[name])} +- {_fmt(self.before_std[name])} before, "
                 f"{_fmt(self.after[name])} +- {_fmt(self.after_std[name])} after" for name in self.differ]
        return (f"poor fit: the data before and after {self.where} disagree (split p = {self.p_value:.2g}): "
                + "; ".join(parts) + ". The robot changed during the recording (a payload picked up or set down, a "
                "cable, a tool) or the model misses an effect that changes over time; one calibration does not "
                "describe these data: calibrate each segment on its own")


def _fmt(value):
    return ", ".join(f"{v:.4g}" for v in np.atleast_1d(np.asarray(value, float)))


def time_parts(blocks, fraction=0.5, untimed=SHARED):
    """Part of every stacked residual row: 0 up to the cut (the ``fraction`` quantile of the
    timed samples' stamps), 1 after it, ``untimed`` (:data:`SHARED` or :data:`UNUSED`) for rows
    without times, :data:`SHARED` for the rows of blocks that say the same of every part (a
    prior). Returns ``(parts (R,), cut_ns)``, or ``(None, None)`` without timed rows."""
    stamps = [b.sample_ns for b in blocks if b.sample_ns is not None]
    if not stamps:
        return None, None
    cut = int(np.quantile(np.concatenate(stamps), fraction))
    parts = []
    for block in blocks:
        size = block.scale.numel()
        if getattr(block, "shared", False):
            parts.append(np.full(size, SHARED))
        elif block.sample_ns is None:
            parts.append(np.full(size, untimed))
        else:
            parts.append(np.repeat((block.sample_ns > cut).astype(int), size // len(block.sample_ns)))
    return np.concatenate(parts), cut


def _differs(name, before, after, spread, value, resolution):
    if parameter_kind(name) in UNTIMED_KINDS:
        return False
    difference = np.atleast_1d(after - before)
    with np.errstate(divide="ignore", invalid="ignore"):
        beyond_noise = np.any(np.abs(difference) > SPLIT_SIGMAS * np.atleast_1d(spread))
    relevant = max(SPLIT_RELEVANCE * float(np.linalg.norm(value)), resolution.get(parameter_kind(name) or "", 0.0))
    return bool(beyond_noise and np.linalg.norm(difference) > relevant)


def _judged(fraction, cut, test, cuts, physical, resolution):
    """TimeSplit of one cut's test, its p-value corrected for ``cuts`` cuts."""
    value, jp, layout = physical
    (before, before_std), (after, after_std) = (named_delta_method(value + jp @ step, jp, layout, cov)
                                                for step, cov in zip(test.steps, test.covariances))
    joint, spread = named_delta_method(value, jp, layout, test.covariances[0] + test.covariances[1])
    p_value = min(1.0, cuts * test.p_value)
    differ = ()
    if test.dof > 0 and p_value < CONSISTENCY_P_VALUE:
        differ = tuple(n for n in joint if _differs(n, before[n], after[n], spread[n], joint[n], resolution))
    return TimeSplit(cut, fraction, p_value, test.dof, before, after, before_std, after_std, differ)


def time_split(jac, psi, variance, blocks, serial, physical, resolution):
    """Whether the data before and after each cut of :data:`SPLIT_FRACTIONS` agree on the parameters.

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
        TimeSplit of the cut reported, or None without timed data on both sides of any cut.
    """
    tests = []
    for fraction in SPLIT_FRACTIONS:
        # Off the middle, rows without times would weigh unequally against the timed ones on
        # either side: rests that disagree with the motion (online) would read as a change.
        parts, cut = time_parts(blocks, fraction, SHARED if fraction == 0.5 else UNUSED)
        if parts is not None and (parts == 0).any() and (parts == 1).any():
            tests.append((fraction, cut, split_consistency(jac, psi, variance, parts, serial, shared=SHARED)))
    if not tests:
        return None
    judged = [_judged(fraction, cut, test, len(tests), physical, resolution) for fraction, cut, test in tests]
    differing = [split for split in judged if split.differ]
    return min(differing or judged, key=lambda split: split.p_value)
