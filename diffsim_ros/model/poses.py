"""Joint configurations drawn inside a model's limits."""

import numpy as np

__all__ = ["random_poses"]


def random_poses(model, count, rng, margin=0.25):
    """``count`` joint configurations uniformly inside the limits shrunk by ``margin`` [rad]."""
    lower = model.lower.detach().cpu().numpy()
    upper = model.upper.detach().cpu().numpy()
    lower = np.where(np.isfinite(lower), lower + margin, -np.pi)
    upper = np.where(np.isfinite(upper), upper - margin, np.pi)
    return rng.uniform(lower, upper, size=(count, len(lower)))
