"""Calibration report figure (``report.png``): residuals before/after, convergence, data fit.

Every panel draws what identification returned (:class:`~diffsim_ros.estimation.identification.IdentificationResult`:
per-block RMS, cost history, per-entry errors at the optimizer's start — the nominal values —
and at the estimate); no model is evaluated here again.
"""

import numpy as np

from diffsim_ros.estimation.fit_quality import SLOPE_LIMIT

__all__ = ["calibration_report"]

STATIC_BLOCKS = ("static torques", "static torques (simulator)")  # rigid-body or through the simulator
CAMERA_BLOCK = "camera"


def _bars(ax, results, joint_names):
    width = 0.8 / max(1, 2 * sum(len(r.metrics_before) for r in results))
    offset = -0.4
    x = np.arange(len(joint_names))
    for result in results:
        for block, before in result.metrics_before.items():
            after = result.metrics_after[block]
            columns = len(before)
            labels = joint_names if columns == len(joint_names) else [str(c) for c in range(columns)]
            xs = np.arange(columns)
            ax.bar(xs + offset, before, width, label=f"{block} before", alpha=0.5)
            ax.bar(xs + offset + width, after, width, label=f"{block} after")
            offset += 2 * width
            if columns == len(joint_names):
                ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("residual RMS (block units)")
    ax.set_title("Residuals per joint / component")
    ax.legend(fontsize=6)


def _convergence(ax, results, names):
    for result, name in zip(results, names):
        if result.history:
            ax.semilogy(np.arange(1, len(result.history) + 1), result.history, marker=".", label=name)
    ax.set_xlabel("evaluation")
    ax.set_ylabel("cost (robust, normalized)")
    ax.set_title("Convergence")
    ax.legend(fontsize=7)


def _static_fit(ax, block, before, after, dataset):
    measured = dataset.static.effort.reshape(-1)
    ax.axhline(0.0, color="k", lw=0.5)
    for label, errors, style in (("start", before, {"alpha": 0.4}), ("calibrated", after, {})):
        error = errors[block].reshape(-1)
        ax.scatter(measured, error, s=6, label=f"{label} (RMS {np.sqrt(np.mean(error ** 2)):.3f} N·m)", **style)
    ax.set_xlabel("measured effort at rest [N·m]")
    ax.set_ylabel(f"{block} error [N·m]")
    ax.set_title("Static efforts")
    ax.legend(fontsize=7)


def _torque_agreement(ax, agreements, joint_names):
    """The fit-quality check per joint: slope of measured on predicted torque, failing joints red."""
    if not agreements:
        ax.text(0.5, 0.5, "no torque data to check", ha="center", transform=ax.transAxes)
        return
    ax.axhspan(1 - SLOPE_LIMIT, 1 + SLOPE_LIMIT, color="tab:green", alpha=0.12, label=f"slope 1 +- {SLOPE_LIMIT:g}")
    x = np.arange(len(joint_names))
    shift = np.linspace(-0.2, 0.2, len(agreements)) if len(agreements) > 1 else [0.0]
    for item, dx in zip(agreements, shift):
        failing = np.zeros(len(joint_names), bool)
        failing[item.failing()] = True
        for mask, color, label in ((~failing, "tab:blue", item.block), (failing, "tab:red", f"{item.block}: failing")):
            if mask.any():
                ax.errorbar(x[mask] + dx, item.slope[mask], yerr=item.slope_std[mask], fmt="o", color=color, label=label)
        for j in np.flatnonzero(np.isfinite(item.offset)):
            ax.annotate(f"{item.offset[j]:+.2g}", (x[j] + dx, item.slope[j]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xticks(x, list(joint_names), rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("slope (labels: offset [N·m])")
    ax.set_title("Measured = offset + slope x predicted torque")
    ax.legend(fontsize=7)


def _camera_fit(ax, before, after):
    # columns: position error [m] (3), rotation error [rad] (3)
    errors = {label: 1e3 * np.linalg.norm(e[CAMERA_BLOCK][:, :3], axis=1)
              for label, e in (("initial guess", before), ("calibrated", after))}
    bins = np.linspace(0, max(e.max() for e in errors.values()), 40)
    for label, err in errors.items():
        ax.hist(err, bins=bins, alpha=0.6, label=f"{label} (median {np.median(err):.2f} mm)")
    ax.set_xlabel("tracked-frame position error [mm]")
    ax.set_title("Camera poses")
    ax.legend(fontsize=7)


def calibration_report(path, results, stage_names, dataset, joint_names, title):
    """Write the report figure.

    Args:
        path: PNG file.
        results: IdentificationResults of the stages (errors before: the first stage's, after:
            the last stage's).
        stage_names: Their labels.
        dataset: The Dataset used (the measured efforts of the static panel).
        joint_names: Model joint names (bar labels).
        title: Figure title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    before, after = results[0].errors_before, results[-1].errors_after
    _bars(axes[0, 0], results, list(joint_names))
    _convergence(axes[0, 1], results, stage_names)
    # The torque check takes whichever lower panel its data leave free (motion alone: no rest poses).
    lower = [axes[1, 0], axes[1, 1]]
    static = next((name for name in STATIC_BLOCKS if name in before), None)
    if static is not None and dataset.static is not None:
        _static_fit(lower.pop(0), static, before, after, dataset)
    if CAMERA_BLOCK in before:
        _camera_fit(lower.pop(), before, after)
    if lower:
        _torque_agreement(lower.pop(0), results[-1].agreement, joint_names)
    for ax in lower:
        ax.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
