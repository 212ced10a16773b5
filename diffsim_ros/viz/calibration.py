"""Calibration report figure (``report.png``): residuals before/after, convergence, data fit.

The residual bars and the convergence are what identification returned. The static-effort and
camera panels still evaluate the nominal and calibrated models on the data themselves (the
result keeps per-block RMS, not per-sample predictions; issue 18 leaves that for the identify
split)."""

import numpy as np
import torch

from diffsim_ros.estimation.residuals import CameraResidual, StaticTorqueResidual

__all__ = ["calibration_report"]


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


def _static_fit(ax, dataset, nominal, calibrated):
    if dataset.static is None:
        ax.text(0.5, 0.5, "no static poses", ha="center", transform=ax.transAxes)
        return
    block = StaticTorqueResidual(dataset.static, nominal)
    measured = dataset.static.effort.reshape(-1)
    with torch.no_grad():
        before = block.predict(nominal).cpu().numpy().reshape(-1)
        after = block.predict(calibrated).cpu().numpy().reshape(-1)
    lim = [measured.min() - 1, measured.max() + 1]
    ax.plot(lim, lim, "k-", lw=0.5)
    ax.scatter(measured, before, s=6, alpha=0.4, label=f"nominal (RMS {np.sqrt(np.mean((before - measured) ** 2)):.3f} N·m)")
    ax.scatter(measured, after, s=6, label=f"calibrated (RMS {np.sqrt(np.mean((after - measured) ** 2)):.3f} N·m)")
    ax.set_xlabel("measured effort at rest [N·m]")
    ax.set_ylabel("model holding torque [N·m]")
    ax.set_title("Static efforts")
    ax.legend(fontsize=7)


def _camera_fit(ax, dataset, nominal, calibrated, guess, camera_pose):
    if dataset.camera is None or camera_pose is None:
        ax.text(0.5, 0.5, "camera not calibrated", ha="center", transform=ax.transAxes)
        return
    block = CameraResidual(dataset.camera, nominal)
    with torch.no_grad():
        errors = {}
        for label, model, pose in (("initial guess", nominal, guess), ("calibrated", calibrated, camera_pose)):
            pose_t = torch.as_tensor(pose, dtype=model.dtype, device=model.device)
            _, position = block.predict(model, pose_t)
            errors[label] = 1e3 * np.linalg.norm(position.cpu().numpy() - dataset.camera.position, axis=1)
    bins = np.linspace(0, max(e.max() for e in errors.values()), 40)
    for label, err in errors.items():
        ax.hist(err, bins=bins, alpha=0.6, label=f"{label} (median {np.median(err):.2f} mm)")
    ax.set_xlabel("tracked-frame position error [mm]")
    ax.set_title("Camera poses")
    ax.legend(fontsize=7)


def calibration_report(path, results, stage_names, dataset, nominal, calibrated, camera_guess=None, camera_pose=None, title=None):
    """Write the report figure.

    Args:
        path: PNG file.
        results: IdentificationResults of the stages.
        stage_names: Their labels.
        dataset: The Dataset used.
        nominal: Nominal model.
        calibrated: Calibrated model.
        camera_guess: Initial camera pose (4, 4) or None.
        camera_pose: Calibrated camera pose (4, 4) or None.
        title: Figure title (default: the robot name).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    _bars(axes[0, 0], results, list(nominal.joint_names))
    _convergence(axes[0, 1], results, stage_names)
    _static_fit(axes[1, 0], dataset, nominal, calibrated)
    _camera_fit(axes[1, 1], dataset, nominal, calibrated, camera_guess, camera_pose)
    fig.suptitle(title or f"diffsim_ros calibration of {nominal.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
