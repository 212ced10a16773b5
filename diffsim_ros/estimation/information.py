"""Accumulated least-squares statistics of a linear regression, with exponential forgetting.

Rows ``r = A phi - b`` (per sample, one row per joint) enter per joint column as the normal
equations ``H_c = sum w A_c^T A_c``, ``g_c = sum w A_c^T b_c``, ``c_c = sum w b_c^2``: the
exact weighted cost of any ``phi`` is ``phi^T H_c phi - 2 g_c^T phi + c_c`` without the rows.
Older data are forgotten by scaling everything by ``exp(-age / tau)``; the same rows
accumulated with the squared weights (``H2``) give the covariance of an exponentially weighted
fit honestly (a forgotten row does not count as information, nor as independent).

:class:`SerialCorrelation` accumulates the autocovariance of normalized prediction errors up
to the lag window of :func:`~diffsim_ros.estimation.identifiability.parzen_weights`: the
ratio of the long-run variance to the variance of each column, by which filtered data's
correlated errors inflate the covariance (the batch estimator's
:func:`~diffsim_ros.estimation.identifiability.serial_covariance` for a regressor smooth
over the filter's span).
"""

from dataclasses import dataclass, replace

import numpy as np

from diffsim_ros.estimation.identifiability import parzen_weights

__all__ = ["NormalEquations", "SerialCorrelation"]


@dataclass(frozen=True)
class NormalEquations:
    """Per-column normal equations (module docstring), numpy.

    Attributes:
        h: ``sum w A_c^T A_c``, shape (n, P, P).
        h2: The same with the squared weights, (n, P, P).
        g: ``sum w A_c^T b_c``, (n, P).
        c: ``sum w b_c^2`` [N²·m²], (n,).
        count: ``sum w`` per column, (n,).
        count2: ``sum w^2`` per column, (n,).
    """

    h: np.ndarray
    h2: np.ndarray
    g: np.ndarray
    c: np.ndarray
    count: np.ndarray
    count2: np.ndarray

    @classmethod
    def zeros(cls, columns, size):
        """Empty statistics of ``columns`` joints and ``size`` lifted parameters."""
        return cls(np.zeros((columns, size, size)), np.zeros((columns, size, size)), np.zeros((columns, size)),
                   np.zeros(columns), np.zeros(columns), np.zeros(columns))

    @classmethod
    def of_rows(cls, a, b, w):
        """Statistics of rows ``a`` (N, n, P), ``b`` (N, n) with weights ``w`` (N, n) in [0, 1]."""
        aw = a * w[..., None]
        h = np.einsum("tnp,tnq->npq", aw, a)
        return cls(h, np.einsum("tnp,tnq->npq", aw * w[..., None], a), np.einsum("tnp,tn->np", aw, b),
                   np.einsum("tn,tn->n", w * b, b), w.sum(0), (w * w).sum(0))

    def __add__(self, other):
        return NormalEquations(*(x + y for x, y in zip(self._fields(), other._fields())))

    def _fields(self):
        return self.h, self.h2, self.g, self.c, self.count, self.count2

    def decayed(self, factor):
        """The statistics with every row's weight multiplied by ``factor`` in [0, 1]."""
        f2 = factor * factor
        return NormalEquations(self.h * factor, self.h2 * f2, self.g * factor, self.c * factor, self.count * factor,
                               self.count2 * f2)

    def transformed(self, t):
        """The statistics of ``phi_new`` where ``phi_old = t @ phi_new`` (t (P, P)): rows ``A t``."""
        return replace(self, h=np.einsum("pi,npq,qj->nij", t, self.h, t), h2=np.einsum("pi,npq,qj->nij", t, self.h2, t),
                       g=self.g @ t)

    def rss(self, phi):
        """Weighted residual sum of squares per column at ``phi`` [N²·m²], (n,)."""
        return np.einsum("p,npq,q->n", phi, self.h, phi) - 2 * self.g @ phi + self.c

    def weighted(self, variance):
        """``(H, g)`` summed over columns weighted by ``1 / variance`` (n,): (P, P), (P,)."""
        inv = 1.0 / variance
        return np.einsum("n,npq->pq", inv, self.h), inv @ self.g

    def score_covariance(self, variance, inflation):
        """Covariance of the weighted score ``sum_c A_c^T w r_c / variance_c``: ``sum_c kappa_c H2_c / variance_c``, (P, P)."""
        return np.einsum("n,npq->pq", inflation / variance, self.h2)

    def effective_count(self):
        """``(sum w)^2 / sum w^2`` over all entries: independent rows the weights are worth."""
        total, total2 = self.count.sum(), self.count2.sum()
        return float(total * total / total2) if total2 > 0 else 0.0


class SerialCorrelation:
    """Forgetting autocovariance of normalized errors per column over the Parzen lag window.

    Args:
        columns: Number of columns (joints).
        reach: Largest lag [samples] at which errors share raw data (twice the filter span).
    """

    def __init__(self, columns, reach):
        self.weights = parzen_weights(int(reach))
        self.lags = np.zeros((len(self.weights), columns))
        self._tail = None  # (index (L,), errors (L, n)) of the newest samples

    def add(self, index, errors, factor=1.0):
        """Errors (K, n) of consecutive grid samples ``index`` (K,) (NaN: left out), after forgetting by ``factor``."""
        self.lags *= factor
        old = 0 if self._tail is None else len(self._tail[0])
        if old:
            index, errors = np.concatenate([self._tail[0], index]), np.concatenate([self._tail[1], errors])
        start = int(index[0])
        dense = np.full((int(index[-1]) - start + 1, errors.shape[1]), np.nan)
        dense[index - start] = errors
        lags = len(self.weights)
        padded = np.concatenate([np.full((lags - 1, dense.shape[1]), np.nan), dense])  # row t + lags - 1: sample t
        rows = index[old:] - start  # the new samples
        windows = np.lib.stride_tricks.sliding_window_view(padded, lags, axis=0)[rows]  # (K, n, lags): t - lags + 1 .. t
        products = np.nan_to_num(dense[rows][:, :, None] * windows[:, :, ::-1])  # lag l at [..., l]
        self.lags += products.sum(0).T
        keep = len(self.weights)
        self._tail = (index[-keep:], errors[-keep:])

    def inflation(self):
        """Long-run over plain variance per column, (n,) (1 without data or correlation)."""
        lag0 = self.lags[0]
        longrun = lag0 + 2 * (self.weights[1:, None] * self.lags[1:]).sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(lag0 > 0, longrun / lag0, 1.0)
        return np.maximum(ratio, 1.0)

    def reset(self):
        """Forget every product and the tail."""
        self.lags[:] = 0.0
        self._tail = None
