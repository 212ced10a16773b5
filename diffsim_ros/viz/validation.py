"""The validation figure: torque-prediction RMSE per joint, one bar per model."""

import numpy as np

__all__ = ["validation_figure"]


def validation_figure(path, joints, rmse, title):
    """Write a bar chart of ``rmse`` (label -> per-joint RMSE [N·m], shape (n,)) over ``joints`` to PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 0.9 * len(joints) + 2.0), 4.0))
    ax = fig.subplots()
    x, width = np.arange(len(joints)), 0.8 / max(1, len(rmse))
    for k, (label, values) in enumerate(rmse.items()):
        overall = float(np.sqrt(np.mean(np.square(values))))
        ax.bar(x + (k - (len(rmse) - 1) / 2) * width, values, width, label=f"{label} (all joints {overall:.3g} N·m)")
    ax.set_xticks(x, list(joints), rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")  # a calibrated model's errors are often 10-100x below the nominal's
    ax.set_ylabel("torque prediction RMSE [N·m]")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.9)
    fig.savefig(path, dpi=100)
    return path
