"""Torque-map figure (PNG, matplotlib's Agg backend): heat maps per joint."""

from pathlib import Path

import numpy as np

from diffsim_ros.outputs import atomic_file

__all__ = ["plot_torque_map"]


def plot_torque_map(tmap, path, context=None):
    """Heat maps of every joint's net-minus-holding torque over (dtheta, omega), like the paper's Fig. 12.

    Args:
        tmap: TorqueMap.
        path: Output PNG path.
        context: Inertia context index to show (default: the middle one).

    Returns:
        Path of the written PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(tmap.joint_names)
    k = tmap.grid.inertia_contexts // 2 if context is None else int(context)
    cols = min(4, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    angles, velocities = tmap.angle_axis * 1e3, tmap.velocity_axis
    extent = (velocities[0], velocities[-1], angles[0], angles[-1])
    for j, ax in enumerate(axes.flat):
        if j >= n:
            ax.axis("off")
            continue
        image = ax.imshow(tmap.residual[j, k], origin="lower", aspect="auto", extent=extent, cmap="coolwarm")
        fig.colorbar(image, ax=ax, label="torque - h(q) [N·m]")
        ax.set_title(f"{tmap.joint_names[j]} (M_jj = {tmap.inertia_axis[j, k]:.3g} kg·m²)", fontsize=9)
        ax.set_xlabel("angular velocity ω [rad/s]")
        ax.set_ylabel("angle step Δθ [mrad]")
    fig.suptitle(f"Torque map of {tmap.robot}: dt = {tmap.dt} s, {tmap.simulator}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_file(path, "wb") as handle:  # never a half-written PNG (Ctrl-C, full disk)
            fig.savefig(handle, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path
