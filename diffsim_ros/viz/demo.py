"""The demo's ``report.png``: online estimates vs truth, their validation, control before vs after."""

import numpy as np

__all__ = ["demo_report"]


def demo_report(path, result):
    """report.png: online estimates vs truth, their validation, and the control tests before vs after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    _estimates_panel(axes[0, 0], result)
    _validation_panel(axes[0, 1], result)
    tests = (("impedance", "impedance tracking"), ("gravity", "gravity compensation drift after release"))
    for ax, (test, label) in zip(axes[1], tests):
        for phase, style in (("before", "C3"), ("after", "C2")):
            t, err = result.traces[test][phase]
            ax.semilogy(t, np.maximum(err, 1e-5), style, label=f"{phase} calibration")
        ax.set_xlabel("time in test [s]")
        ax.set_ylabel("largest joint error [rad]")
        ax.set_title(label)
        ax.legend(fontsize=8)
    fig.suptitle("diffsim-ros demo: online calibration of a simulated Baxter (MuJoCo)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _estimates_panel(ax, result):
    """Error of every scalar estimate [% of the true value] over time; t = 0: the nominal model."""
    ax.axhline(0.0, color="k", lw=1)
    change = result.payload_change
    for name, true in result.truth.items():
        if np.ndim(true) or not true:
            continue
        points = [(0.0, float(result.nominal[name]))]
        points += [(t, values[name]) for t, values, _ in result.history if name in values]
        t, value = np.array(points, dtype=float).T
        if name == "payload.mass" and change is not None:
            true = np.where(t < change[0], change[1], change[2])  # the truth in force at each time
        ax.plot(t, 100.0 * (value / true - 1.0), "o-", ms=3, label=name)
    if change is not None:
        ax.axvline(change[0], color="0.5", ls="--", lw=1, label=f"payload {change[1]:g} -> {change[2]:g} kg")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("simulated time [s] (0: nominal model)")
    ax.set_ylabel("estimate error [% of the true value]")
    ax.set_title("online estimates (accepted updates)")
    ax.legend(fontsize=8)


def _validation_panel(ax, result):
    """Held-back static-torque RMS of the current model and of each candidate update."""
    if result.update_log:
        t, before, after, accepted = np.array(result.update_log, dtype=float).T
        ax.semilogy(t, before, "s-", color="C3", ms=4, label="current model")
        ax.semilogy(t, after, "o", color="C0", ms=4, label="candidate (filled: accepted)", mfc="none")
        ax.semilogy(t[accepted > 0], after[accepted > 0], "o", color="C0", ms=4)
    ax.set_xlabel("simulated time [s]")
    ax.set_ylabel("held-back static torque RMS [N·m]")
    ax.set_title("estimator updates, validated on the newest held-back data")
    ax.legend(fontsize=8)
