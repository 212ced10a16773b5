"""Change detection on the prediction errors: a generalized likelihood ratio over the change time.

The newest ``window`` seconds of regression statistics are kept chunk by chunk
(:class:`~diffsim_ros.estimation.information.NormalEquations`). For every chunk boundary k,
the data from k on are tested against the current estimate: the score of the tested
coordinates (the payload's, by default) ``s = J^T (g - H phi)`` and its information
``I = J^T H J``, both with each column weighted by its long-run noise variance (the serially
correlated errors of filtered data), give the linearized likelihood ratio ``T_k = s^T I^-1 s``,
chi-square with as many degrees of freedom as coordinates when nothing changed. The largest
``T_k`` locates the change (the GLR of Lorden / Willsky-Jones).

A change is declared only when

* ``max_k T_k`` exceeds ``threshold`` at ``confirm`` consecutive tests (a persistent change,
  not one chunk's glitch), and
* the tested coordinates, refitted on the data from the change on, explain them: the refit's
  mean squared normalized error is at most ``fit_ratio`` (a collision, a spike, a hand on the
  arm leave large errors that no payload explains; a payload picked up or set down does not);
* the change is material: the refit moves some coordinate by at least its ``min_step`` (the
  payload's mass by ``change_min_mass``). Measured on the MuJoCo plant: over a one-second
  window the payload's first moment is poorly determined, and the ratio reached 134 with a
  first-moment step of 0.25 kg·m but a mass step of 0.017 kg (no change happened).
"""

import collections
from dataclasses import dataclass

import numpy as np

from diffsim_ros.estimation.statistics_fit import gauss_newton

__all__ = ["Change", "ChangeDetector"]


@dataclass(frozen=True)
class Change:
    """A detected change.

    Attributes:
        start_ns: Start [ns] of the first chunk after the change.
        statistic: Its likelihood ratio (chi-square units).
        fit_ratio: Mean squared normalized error of the refit on the data since.
        step: Refit minus current coordinates (P,) (zero where not tested).
        chunks: ``(start_ns, end_ns, NormalEquations)`` of the chunks since the change, oldest first.
    """

    start_ns: int
    statistic: float
    fit_ratio: float
    step: np.ndarray = None
    chunks: tuple = ()


class ChangeDetector:
    """GLR change test on chunk statistics (module docstring).

    Args:
        regression: TorqueRegression.
        tested: Coordinates tested, bool (P,).
        window_ns: Newest data kept [ns].
        threshold: Likelihood ratio of a change (chi-square units).
        confirm: Consecutive tests above the threshold.
        fit_ratio: Largest mean squared normalized error of the refit that counts as explained.
        min_step: Smallest material step of every coordinate (P,) (inf: never material alone).
    """

    def __init__(self, regression, tested, window_ns, threshold, min_step, confirm=2, fit_ratio=3.0):
        self.regression, self.tested = regression, np.asarray(tested, bool)
        self.min_step = np.asarray(min_step, float)
        self.window_ns, self.threshold, self.confirm, self.fit_ratio = int(window_ns), threshold, confirm, fit_ratio
        self.chunks = collections.deque()  # (start_ns, end_ns, NormalEquations)
        self._above = 0
        self.last_statistic = 0.0

    def add(self, start_ns, end_ns, stats):
        """A chunk's statistics (rows computed with the current base of the regression)."""
        self.chunks.append((int(start_ns), int(end_ns), stats))
        while self.chunks and self.chunks[0][1] < end_ns - self.window_ns:
            self.chunks.popleft()

    def transform(self, t):
        """Apply a change of basis of the lifted parameters (see TorqueRegression.rebase)."""
        self.chunks = collections.deque((a, b, s.transformed(t)) for a, b, s in self.chunks)

    def reset(self):
        """Forget every chunk (after a change, or when the estimator restarts)."""
        self.chunks.clear()
        self._above = 0

    def _scan(self, theta, variance):
        """``(T_k, k)`` of the best change time: its statistic and its chunk's index (oldest first).

        All change times at once: the column-weighted statistics of every chunk, summed from the
        newest back (``H_k``, ``g_k`` of the data from chunk k on), then the score, information
        and ``T_k`` of every k as stacked arrays.
        """
        phi, jac = self.regression.phi(theta)
        j = jac[:, self.tested]
        inv = 1.0 / variance
        stats = [c[2] for c in reversed(self.chunks)]  # newest first
        size = phi.size
        hw = np.cumsum(np.stack([inv @ s.h.reshape(inv.size, -1) for s in stats]), axis=0).reshape(-1, size, size)
        gw = np.cumsum(np.stack([inv @ s.g for s in stats]), axis=0)
        score = (gw - hw @ phi) @ j  # (K, T)
        info = j.T @ hw @ j  # (K, T, T)
        values = np.einsum("kt,kts,ks->k", score, np.linalg.pinv(info, rcond=1e-10), score)
        best = int(np.argmax(values))  # the first of equal maxima: the newest change time
        return float(values[best]), len(stats) - 1 - best

    def test(self, theta, variance, inflation):
        """Whether the newest data mean a change of the tested coordinates.

        Args:
            theta: Current estimate (P,).
            variance: Noise variance per column [N²·m²], (n,).
            inflation: Long-run over plain variance per column, (n,).

        Returns:
            Change or None. After a change the detector is reset.
        """
        if not self.chunks:
            return None
        value, first = self._scan(theta, variance * inflation)
        self.last_statistic = value
        self._above = self._above + 1 if value > self.threshold else 0
        if self._above < self.confirm:
            return None
        since = tuple(self.chunks)[first:]
        total = since[-1][2]
        for chunk in reversed(since[:-1]):  # newest first, as the scan summed
            total = total + chunk[2]
        start_ns = since[0][0]
        hw, gw = total.weighted(variance)
        refit, _ = gauss_newton(self.regression, hw, gw, theta, self.tested)
        ratio = float((total.rss(self.regression.phi(refit)[0]) / variance).sum() / max(total.count.sum(), 1.0))
        if ratio > self.fit_ratio or not np.any(np.abs(refit - theta) >= self.min_step):
            return None
        self.reset()
        return Change(start_ns, value, ratio, refit - theta, since)
