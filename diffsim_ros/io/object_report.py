"""Object estimation results as files: the ``objects.yaml`` document and the ``summary.txt`` table.

:func:`diffsim_ros.pipelines.objects.write_object_outputs` writes them with the figure
(:func:`diffsim_ros.viz.objects.trajectory_figure`).

``objects.yaml``::

    status: ok                  # ok | undetermined | poor_fit (see estimation.object_fit)
    message: fit within 1.08x the camera noise
    estimates:                  # determined unknowns only: value and standard deviation
      box.mass: {value: 0.741, std: 0.006}
    unidentifiable:             # fitted but not determined (never written as values)
      box/ground.restitution: "..."
    not_estimated:              # unknowns the data cannot involve, with the reason
    known: {target.mass: 0.6, ...}
    notes: ["box.mass is measured against the declared target.mass = 0.6 kg: ..."]
    quality: {noise: {...}, fit_ratio: {box: {position: 1.05, orientation: 1.01}, ...}, drift: {box: {...}, ...},
              consistency: {before/after: {chi_square: 0.7, dof: 1, p_value: 0.39, estimates: {before: {...}, after: {...}}}, ...}}
    events: [{pair: [box, target], time: 0.2, last_apart: 0.167}]
    stages: [{name: ..., parameters: [...], seconds: 3.1, ...}]
    data: {box: {poses: 25, start: 0.0, end: 0.8}, ...}
"""

import math


__all__ = ["estimates_document", "mass_notes", "summary_table"]


def _float(value):
    return float(value) if math.isfinite(float(value)) else str(value)


def _std_parts(fit, name):
    """The two stds ``std`` is the larger of, when the bootstrap ran (else nothing)."""
    if not fit.std_bootstrap:
        return {}
    return {"std_linear": _float(fit.std_linear[name]), "std_bootstrap": _float(fit.std_bootstrap[name])}


def mass_notes(fit, scene):
    """What each estimated mass is measured against: the declared masses of the objects it hit.

    Gravity and Coulomb friction move a body alike whatever its mass, so camera poses hold
    the ratio of two colliding masses only: an error in the declared mass scales the estimate
    by the same factor, and no fit quality can show it.
    """
    notes = []
    for name in fit.identifiable:
        owner, _, kind = name.rpartition(".")
        if kind != "mass" or "/" in owner:
            continue
        partners = sorted({b if a == owner else a for e in fit.events for a, b in [e.pair] if owner in (a, b)})
        known = [(p, scene.known[f"{p}.mass"]) for p in partners if f"{p}.mass" in scene.known]
        if known:
            against = " and ".join(f"{p}.mass = {value:.6g} kg" for p, value in known)
            notes.append(f"{name} is measured against the declared {against}: the poses hold only the ratio of colliding "
                         "masses, so an error in a declared mass scales this estimate by the same factor")
    return notes


def estimates_document(fit, scene, data):
    """The ``objects.yaml`` mapping of an ObjectFit (``data``: object -> {poses, start, end})."""
    determined = fit.status != "poor_fit"
    estimates = {n: {"value": _float(fit.values[n]), "std": _float(fit.std[n]), **_std_parts(fit, n)}
                 for n in fit.identifiable if determined and fit.identifiable[n]}
    reason = fit.message if not determined else "not determined by the data (relative std above the limit or unobservable)"
    unidentifiable = {n: reason for n in fit.identifiable if not (determined and fit.identifiable[n])}
    return {
        "status": fit.status,
        "message": fit.message,
        "estimates": estimates,
        "unidentifiable": unidentifiable,
        "not_estimated": dict(fit.not_estimated),
        "known": {k: _float(v) for k, v in scene.known.items()},
        "notes": mass_notes(fit, scene),
        "quality": {
            "noise": {"position_m": fit.noise.position, "orientation_rad": fit.noise.orientation, "windows": fit.noise.windows},
            "fit_ratio": {k: {c: round(float(v), 4) for c, v in r.items()} for k, r in fit.fit_ratio.items()},
            "drift": {k: {c: round(float(v), 4) for c, v in r.items()} for k, r in fit.drift.items()},
            "consistency": {split: {"chi_square": round(c.statistic, 4), "dof": c.dof, "p_value": float(f"{c.p_value:.4g}"),
                                    "estimates": {side: {n: float(v) for n, v in values.items()} for side, values in c.by_channel.items()},
                                    "std": {side: {n: _float(v) for n, v in values.items()} for side, values in c.std_by_channel.items()}}
                            for split, c in fit.estimate.consistency.items()},
        },
        "events": [{"pair": list(e.pair), "time": round(e.time, 6), "last_apart": round(e.last_apart, 6)} for e in fit.events],
        "at_rest": list(fit.at_rest),
        "stages": [
            {"name": s.name, "parameters": list(s.parameters), "end": _float(s.end), "cost": s.cost, "evaluations": s.evaluations,
             "seconds": round(s.seconds, 2), "values": {k: float(v) for k, v in s.values.items()}}
            for s in fit.stages
        ],
        "data": data,
    }


def summary_table(fit, scene):
    """Plain-text table: parameter, estimate, std, status."""
    rows = [("parameter", "estimate", "std", "status")]
    determined = fit.status != "poor_fit"
    for name in fit.identifiable:
        value, std = fit.values[name], fit.std[name]
        if determined and fit.identifiable[name]:
            rows.append((name, f"{value:.6g}", f"{std:.3g}", "estimated"))
        else:
            rows.append((name, "-", "-", "poor fit" if not determined else "not identifiable"))
    for name, reason in fit.not_estimated.items():
        rows.append((name, "-", "-", f"not estimated: {reason.split(':')[0]}"))
    for name, value in scene.known.items():
        rows.append((name, f"{value:.6g}", "", "known"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ratios = ", ".join(f"{k} {max(r.values()):.2f}x" for k, r in fit.fit_ratio.items())
    lines += ["", f"status: {fit.status}: {fit.message}",
              f"camera noise from the data: {fit.noise.position * 1e3:.2f} mm, {math.degrees(fit.noise.orientation):.3f} deg; "
              f"fit rms / noise: {ratios}; residual drift: "
              f"{', '.join(f'{k} {max(r.values()):.2f}x' for k, r in fit.drift.items()) or 'not checked (too few poses)'}",
              "data splits agree on the parameters: " + (", ".join(f"{split} p = {c.p_value:.2g}" for split, c in fit.estimate.consistency.items())
                                                          or "not checked")]
    lines += [f"note: {note}" for note in mass_notes(fit, scene)]
    if fit.std_bootstrap:
        lines.append("std: the larger of the fit's linear std and the spread of its bootstrap refits (linear / bootstrap: "
                     + ", ".join(f"{n} {fit.std_linear[n]:.3g} / {fit.std_bootstrap[n]:.3g}" for n in fit.std_bootstrap) + ")")
    return "\n".join(lines)
