"""Object estimation figure (``trajectories.png``): observed vs fitted poses per object."""

import math

import numpy as np
import torch

from diffsim_ros.dynamics.spatial import quat_conjugate, quat_log, quat_multiply

__all__ = ["trajectory_figure"]


def _angle_error(observed, fitted):
    rotation = quat_log(quat_multiply(quat_conjugate(torch.as_tensor(observed.orientation)), torch.as_tensor(fitted.orientation)))
    return np.degrees(np.linalg.norm(rotation.numpy(), axis=1))


def trajectory_figure(path, fit, observations, title="object estimation"):
    """Observed (dots) and fitted (lines) positions per object, and the orientation error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(fit.fitted)
    fig, axes = plt.subplots(len(names), 2, figsize=(12, 3.6 * len(names)), squeeze=False)
    for row, name in zip(axes, names):
        obs, fitted = observations[name], fit.fitted[name]
        for axis, color in zip(range(3), ("tab:red", "tab:green", "tab:blue")):
            row[0].plot(obs.times, obs.position[:, axis], ".", color=color, ms=4, label=f"observed {'xyz'[axis]}")
            row[0].plot(fitted.times, fitted.position[:, axis], "-", color=color, lw=1, label=f"fitted {'xyz'[axis]}")
        for event in fit.events:
            if name in event.pair:
                row[0].axvline(event.time, color="k", lw=0.5, ls="--")
        row[0].set_ylabel(f"{name} position [m]")
        row[0].legend(fontsize=6, ncol=2)
        error = np.linalg.norm(fitted.position - obs.position, axis=1) * 1e3
        row[1].plot(obs.times, error, ".-", label="position error [mm]")
        row[1].plot(obs.times, _angle_error(obs, fitted), ".-", label="orientation error [deg]")
        row[1].axhline(fit.noise.position * 1e3 * math.sqrt(3), color="tab:blue", lw=0.5, ls=":", label="noise (rms of 3 axes) [mm]")
        row[1].set_ylabel(f"{name} fit error")
        row[1].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("time [s]")
    fig.suptitle(f"{title}: {fit.status}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
