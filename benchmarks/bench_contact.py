"""Contact: step and gradient cost of the LCP and cone solvers, warm starts, object estimation (issue #7).

Each part writes its own section of RESULTS.md (``contact-<part>``):

* ``gradients``: per-step forward time and the Jacobian of the next state with respect to
  (state, object parameters) by autograd against central finite differences of the same
  step (time ratio and error, as Nimble reports), for the LCP and the cone solver on a box
  sliding on a plane, a box pushed by a robot and several boxes;
* ``warmstart``: how often the previous step's contact classification is right on the first
  try over rollouts (Nimble reports > 95 %);
* ``estimation``: Le Lidec's identification cases on MuJoCo data (the cases and settings of
  ``test/test_contact_estimation.py``): friction error per initial guess, the sliding
  direction table (cone vs pyramid), the collision case and mass without a collision, with
  their run times.

Run: ``.venv/bin/python -m benchmarks.bench_contact [--parts gradients,warmstart,estimation]``.
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

from benchmarks.common import machine_line, markdown_table, median, time_call, write_section
from diffsim_ros.model import RobotModel
from diffsim_ros.sim.base import RigidBodySimulator
from diffsim_ros.sim.contact import Box, ContactWorld, LinkProxy, RigidObject, Sphere
from diffsim_ros.sim.contact.world import WorldState

PARTS = ("gradients", "warmstart", "estimation")
SOLVERS = ("lcp", "cone")
DT = 0.01
HALF = 0.05  # box half size [m]
FD_EPS = 1e-6
PUSH_FORCE = 10.0  # [N] on the pusher's slider
ROLLOUT_STEPS = 100
RESTITUTION = 0.2
# Touching contacts sit at the kink between speculative (gap / dt) and Baumgarte
# (0.2 gap / dt) stabilization; a full correction removes it, so that central differences
# compare gradients at a smooth point (as Nimble's checks, away from mode switches).
GRADIENT_BAUMGARTE = 1.0


def _header(title, command):
    load = os.getloadavg()[0]
    return (
        f"## {title}\n\nMeasured {machine_line()}, load average {load:.1f} during the run (2 shared cores). "
        f"`{command}`.\n"
    )


# ---------------------------------------------------------------- scenes


def _box(name, mass=0.5, friction=0.3):
    # Restitution inside (0, 1) so that central differences stay in its valid range.
    return RigidObject(name, Box((HALF, HALF, HALF)), mass=mass, friction=friction, restitution=RESTITUTION)


def _sliding_box(solver, **options):
    world = ContactWorld.create([_box("box")], solver=solver, dt=DT, **options)
    return world, world.initial_state(position=[[0.0, 0.0, HALF]], linear_velocity=[[1.0, 0.3, 0.0]]), None


def _pushed_box(solver, **options):
    from test_contact_coupling import PUSHER_URDF

    robot = RigidBodySimulator(RobotModel.from_urdf(PUSHER_URDF), DT)
    world = ContactWorld.create(
        [_box("box")], robot=robot, proxies=[LinkProxy("tip", "slider", Sphere(0.02))], solver=solver, dt=DT,
        exclude=[("tip", "ground")], pair_friction={("tip", "box"): 0.0},
        pair_restitution={("tip", "box"): 0.0},  # a push, not a bounce (the tip approaches at ~ the bounce threshold)
        **options,
    )
    state = world.initial_state(position=[[0.07, 0.0, HALF]], q=[0.0], qd=[0.0])
    return world, state, torch.tensor([PUSH_FORCE], dtype=world.dtype)


def _several_boxes(solver, **options):
    # A two-box stack and a third box sliding into its bottom box.
    boxes = [_box("slider", 0.6, 0.3), _box("bottom", 0.5, 0.4), _box("top", 0.3, 0.4)]
    world = ContactWorld.create(boxes, solver=solver, dt=DT, **options)
    state = world.initial_state(
        position=[[0.0, 0.0, HALF], [0.25, 0.0, HALF], [0.25, 0.0, 3 * HALF]], linear_velocity=[[1.5, 0.0, 0.0], [0, 0, 0], [0, 0, 0]]
    )
    return world, world.settle(state), None


SCENES = {"box sliding on a plane": _sliding_box, "box pushed by a robot": _pushed_box, "three boxes (stack + slider)": _several_boxes}


# ---------------------------------------------------------------- gradients


def _flatten(state):
    """``[positions (3J), orientations (4J), linear (3J), angular (3J) velocities, q, qd]``, (D,)."""
    parts = [state.position, state.orientation, state.linear_velocity, state.angular_velocity]
    flat = torch.cat([p.flatten(-2) for p in parts], -1)
    if state.q is not None:
        flat = torch.cat([flat, state.q, state.qd], -1)
    return flat


def _step_function(world, tau):
    """next flat state = f(flat state, flat parameters) for one world step."""
    count, names = len(world.objects), world.parameter_names()

    def step(flat, params):
        state = _from_flat(flat, count, world.robot_dof)
        values = {name: params[..., i] for i, name in enumerate(names)}
        next_state, _ = world.with_parameters(values).step(state, tau=tau)
        return _flatten(next_state)

    return step


def _from_flat(flat, count, dof):
    """Inverse of :func:`_flatten`."""
    offsets = [0, 3 * count, 7 * count, 10 * count, 13 * count]
    p, q, v, w = (flat[..., offsets[i] : offsets[i + 1]] for i in range(4))
    robot_q = robot_qd = None
    if dof:
        robot_q, robot_qd = flat[..., 13 * count : 13 * count + dof], flat[..., 13 * count + dof :]
    shape = flat.shape[:-1]
    return WorldState(p.reshape(*shape, count, 3), q.reshape(*shape, count, 4), v.reshape(*shape, count, 3), w.reshape(*shape, count, 3), robot_q, robot_qd)


def _autograd_jacobian(step, flat, params):
    x = flat.detach().requires_grad_(True)
    p = params.detach().requires_grad_(True)
    out = step(x, p)
    eye = torch.eye(out.numel(), dtype=out.dtype)
    dx, dp = torch.autograd.grad(out, (x, p), eye, is_grads_batched=True)
    return torch.cat([dx, dp], -1)


def _central_jacobian(step, flat, params):
    inputs = torch.cat([flat, params])
    n = flat.numel()
    columns = []
    with torch.no_grad():
        for i in range(inputs.numel()):
            delta = torch.zeros_like(inputs)
            delta[i] = FD_EPS
            plus, minus = inputs + delta, inputs - delta
            columns.append((step(plus[:n], plus[n:]) - step(minus[:n], minus[n:])) / (2 * FD_EPS))
    return torch.stack(columns, -1)


def _mid_rollout_state(world, state, tau, steps=5):
    """A state a few steps in (contacts established, warm starts meaningful)."""
    with torch.no_grad():
        info = None
        for _ in range(steps):
            state, info = world.step(state, tau=tau, warm=info)
    return state


def gradients():
    rows, ratios = [], {}
    for scene, make in SCENES.items():
        for solver in SOLVERS:
            world, state, tau = make(solver, baumgarte=GRADIENT_BAUMGARTE)
            state = _mid_rollout_state(world, state, tau)
            flat = _flatten(state)
            params = torch.stack([world.get_parameter(n) for n in world.parameter_names()])
            step = _step_function(world, tau)
            with torch.no_grad():
                forward = median(time_call(lambda: step(flat, params), repeats=30, warmup=3))
            exact = _autograd_jacobian(step, flat, params)
            grad = median(time_call(lambda: _autograd_jacobian(step, flat, params), repeats=15, warmup=2))
            fd = _central_jacobian(step, flat, params)
            fd_time = median(time_call(lambda: _central_jacobian(step, flat, params), repeats=3, warmup=1))
            error = float((fd - exact).abs().max())
            ratios[(scene, solver)] = fd_time / grad
            rows.append(
                [scene, solver, f"{exact.shape[0]} x {exact.shape[1]}", f"{forward * 1e3:.2f} ms", f"{grad * 1e3:.1f} ms",
                 f"{grad / forward:.1f}x", f"{fd_time * 1e3:.0f} ms", f"**{fd_time / grad:.1f}x**", f"{error:.1e}"]
            )
            print(rows[-1], flush=True)
    cone_cost = [float(r[3].split()[0]) for r in rows if r[1] == "cone"]
    lcp_cost = [float(r[3].split()[0]) for r in rows if r[1] == "lcp"]
    return "\n".join(
        [
            _header("Contact step: forward and Jacobian, LCP vs cone, autograd vs finite differences", "python -m benchmarks.bench_contact --parts gradients"),
            "One world step (dt = 10 ms, float64, single thread), at a state 5 steps into the scene (contacts "
            "established), with full penetration correction (baumgarte 1: no kink at touching contacts). Jacobian of the next state (13 per object, + q, qd of the robot) with respect to the state "
            "and every object parameter (mass, friction, restitution), by one reverse pass vmapped over the outputs "
            "(LCP: clamping-set gradients; cone: implicit differentiation), and by central differences of the same "
            f"step (eps {FD_EPS:g}, 2 steps per input). Median wall times; error = max |J_fd - J_autograd|.\n",
            markdown_table(["scene", "solver", "Jacobian", "forward step", "Jacobian (autograd)", "autograd / forward",
                            "Jacobian (central FD)", "FD / autograd", "max error"], rows),
            "",
            f"- Cone / LCP forward cost: {', '.join(f'{c / l:.1f}x' for c, l in zip(cone_cost, lcp_cost))} (scenes in table order).",
            "- Nimble reports its analytic Jacobians 87x faster than finite differences on Atlas (C++); here the "
            "step is Python/torch-bound, so the ratio mostly counts inputs: central differences need 2 steps per "
            "input, the reverse pass costs a few steps in all. Errors up to ~1e-5 are the finite differences' "
            "(solver tolerances and the cone's 1e-6 compliance).",
            "- Three boxes: the LCP's active-set search ends with friction tied at a bound without slip (two "
            "corners of the sliding box at opposite t2 bounds, ±mu x_n of internal stress; the stack likewise). "
            "Such a classification satisfies complementarity, but its linear model lets those corners slip, so its "
            "Jacobian was wrong (error 30 in d(slider angular velocity)/d(slider orientation) while finite "
            "differences were ~0 at every step size). The solver now reclassifies tied friction as clamped when "
            "that also solves (the strictly complementary classification); test: "
            "`test_stacked_boxes_step_jacobian_matches_finite_differences`.",
        ]
    )


# ---------------------------------------------------------------- warm starts


def warmstart():
    rows = []
    for scene, make in SCENES.items():
        for solver in SOLVERS:
            world, state, tau = make(solver)
            hits = tries = 0
            info = None
            with torch.no_grad():
                start = time.perf_counter()
                for _ in range(ROLLOUT_STEPS):
                    state, next_info = world.step(state, tau=tau, warm=info)
                    if info is not None and bool(next_info.contacts.active.any()):
                        tries += 1
                        hits += int(bool(next_info.solution.warm_hit.all()))
                    info = next_info
                elapsed = time.perf_counter() - start
            rows.append([scene, solver, str(tries), f"**{100 * hits / max(tries, 1):.1f} %**", f"{elapsed / ROLLOUT_STEPS * 1e3:.2f} ms"])
            print(rows[-1], flush=True)
    return "\n".join(
        [
            _header("Contact warm starts over rollouts", "python -m benchmarks.bench_contact --parts warmstart"),
            f"{ROLLOUT_STEPS}-step rollouts (1 s; the sliding boxes stop, the pushed box keeps moving). A hit: the previous "
            "step's classification (LCP: clamping / upper / lower / separating per row; cone: sticking / sliding / "
            "separating per contact) solved the step on the first try, without the fallback. Steps with contacts "
            "after the first count as tries. Nimble reports > 95 %. Three boxes: the misses are the slider's "
            "collision with the stack and the rocking and sliding it starts (real mode changes every step until the "
            "boxes settle); afterwards every step hits. (Before the bounce threshold was tested at the impact speed "
            "instead of the free velocity, which includes a step of gravity, the resting stack hopped every other "
            "step forever: 12 % with both solvers.)\n",
            markdown_table(["scene", "solver", "tries", "warm-start hit rate", "mean step time"], rows),
        ]
    )


# ---------------------------------------------------------------- estimation


def estimation():
    import test_contact_estimation as cases

    lines = [
        _header("Object parameter estimation from MuJoCo camera poses (Le Lidec et al.)", "python -m benchmarks.bench_contact --parts estimation"),
        f"Cases of `test/test_contact_estimation.py`: MuJoCo data ({cases.MUJOCO_STEP * 1e3:g} ms step, elliptic cones) "
        f"sampled at {1 / cases.CAMERA_PERIOD:g} Hz with {cases.POSITION_NOISE * 1e3:g} mm / {cases.ORIENTATION_NOISE * 1e3:g} mrad noise; "
        f"our model at {cases.DT * 1e3:g} ms. Cube (10 cm, {cases.SLIDE_MASS} kg, mu = {cases.SLIDE_MU}) sliding at "
        f"{cases.SLIDE_SPEED} m/s for {cases.SLIDE_DURATION} s. Scipy trust-region least squares, Jacobians by forward "
        "sensitivities through torch; initial pose and twist estimated as nuisances.\n",
    ]
    rows = []
    for mu0 in (0.05, 0.3, 1.0):
        start = time.perf_counter()
        est = cases.slide_fit("cone", 0, mu0)
        mu = est.values["cube.friction"]
        rows.append([f"{mu0:g}", f"{mu:.4f}", f"{100 * (mu / cases.SLIDE_MU - 1):+.2f} %", f"{est.std['cube.friction']:.4f}", str(est.evaluations), f"{time.perf_counter() - start:.1f} s"])
        print(rows[-1], flush=True)
    lines += ["### Friction from any initial guess (cone model, target: within 2 %)\n",
              markdown_table(["initial mu", "estimate", "error", "std", "evaluations", "time"], rows), ""]
    rows = []
    cases.slide_fit.cache_clear()  # time every fit below afresh
    for theta in (0, 30, 45):
        row = [f"{theta} deg"]
        for solver in SOLVERS[::-1]:
            start = time.perf_counter()
            est = cases.slide_fit(solver, theta, cases.SLIDE_MU)
            mu = est.values["cube.friction"]
            row += [f"{mu:.4f} ({100 * (mu / cases.SLIDE_MU - 1):+.1f} %, rms {est.rms * 1e3:.2f} mm, {time.perf_counter() - start:.1f} s)"]
        rows.append(row)
        print(row, flush=True)
    lines += [
        "### Sliding direction: Coulomb cone vs 4-sided pyramid (LCP)\n",
        f"mu/sqrt(2) = {cases.SLIDE_MU / math.sqrt(2):.4f}. The cube is yawed with its sliding direction (always face "
        "first); the pyramid's facets are fixed in the world.\n",
        markdown_table(["direction", "cone estimate", "pyramid estimate"], rows),
        "",
    ]
    start = time.perf_counter()
    world, _ = cases.slide_world("cone")
    est = cases.estimate_object_parameters(
        world.with_parameters({"cube.mass": 2.0}), cases.slide_observations(0), ["cube.mass", "cube.friction"], initial={"cube.friction": 0.5}
    )
    no_collision = time.perf_counter() - start
    start = time.perf_counter()
    coll, restitution = cases.collision_fit()
    collision = time.perf_counter() - start
    truth = {"cube.mass": cases.COLLISION_MASS, "cube.friction": cases.COLLISION_MU, "cube.restitution": restitution}
    rows = [
        [name, f"{truth[name]:.3f}" + (" (measured)" if name.endswith("restitution") else ""), f"{coll.values[name]:.4f}",
         f"{100 * (coll.values[name] / truth[name] - 1):+.1f} %", f"{coll.std[name]:.4f}", str(coll.identifiable[name])]
        for name in cases.COLLISION_PARAMETERS
    ]
    rows += [
        [f"{name} (no collision)", f"{cases.SLIDE_MASS if name.endswith('mass') else cases.SLIDE_MU:.3f}", f"{est.values[name]:.4f}", "",
         f"{est.std[name]:.3g}", str(est.identifiable[name])]
        for name in ("cube.mass", "cube.friction")
    ]
    print(rows, flush=True)
    sigmas = ", ".join(
        f"{name.split('.')[1]} {(coll.values[name] - truth[name]) / coll.std[name]:+.1f}" for name in cases.COLLISION_PARAMETERS
    )
    lines += [
        "### Mass, friction and restitution from a collision with a known cube\n",
        f"A {cases.COLLISION_MASS} kg cube (mu {cases.COLLISION_MU}) at {cases.COLLISION_SPEED} m/s hits a known {cases.TARGET_MASS} kg "
        f"cube at rest; MuJoCo at {cases.COLLISION_MUJOCO_STEP * 1e3:g} ms, collision solref {cases.COLLISION_SOLREF}; the true "
        "restitution is measured from MuJoCo's velocities (it has no coefficient). Staged fit (friction before the hit, "
        f"mass + restitution, all three) from {cases.COLLISION_START}: {collision:.0f} s, final rms {coll.rms * 1e3:.2f} mm. "
        f"Without a collision (the sliding data, mass started at 2 kg): {no_collision:.0f} s.\n",
        markdown_table(["parameter", "truth", "estimate", "error", "std", "identifiable"], rows),
        "",
        "- The true restitution is the relative velocity just after / just before the contact, from MuJoCo's "
        "noise-free velocities (until 2026-11 from line fits around the hit, which the target's hop below biased: "
        "0.448 instead of 0.436, the old -2.6 % restitution error).",
        f"- Errors in standard deviations: {sigmas}. The larger ones are a model difference, not noise; our box-box collision is exact "
        "(momentum conserved, e exact head on: test_contact_world). Two MuJoCo effects, measured with the staged fit "
        "(mass / friction / restitution errors): the collision's length, +9.2 % / +6.7 % / -0.0 % at a 5 ms solref "
        "time constant (0.5 ms step, 4.5 ms contact), +4.3 % / +1.0 % / +2.6 % at 1 ms (0.1 ms step, 0.9 ms "
        "contact, used since 2026-11); and the target's hop: MuJoCo's convex contact (Anitescu's relaxation: a "
        "sliding contact separates at a rate ~ mu x slip) pushes the suddenly sliding target off the ground (81 N "
        "ground normal force for its 4.9 N weight during the hit, 0.3-0.4 mm lift, ~10 ms airborne without "
        "friction) at every stiffness tried, so it travels further than on our rigid ground and the fit raises the "
        "mass; with target friction 0.05 (hop 0.04 mm) the mass error at 5 ms is +4.9 % instead of +9.2 %.",
    ]
    lines += ["", _std_calibration(cases)]
    return "\n".join(lines)


def _std_calibration(cases, seeds=16):
    """Reported friction std of the sliding fit against its spread over camera-noise seeds."""
    from diffsim_ros.sim.contact.mujoco_reference import simulate_mujoco

    values, stds = [], []
    start = time.perf_counter()
    for seed in range(seeds):
        world, state = cases.slide_world("cone")
        observations, _ = simulate_mujoco(
            world, state, duration=cases.SLIDE_DURATION, timestep=cases.MUJOCO_STEP, sample_period=cases.CAMERA_PERIOD,
            skip=cases.SKIP, position_noise=cases.POSITION_NOISE, orientation_noise=cases.ORIENTATION_NOISE, seed=seed,
        )
        series = {name: cases.PoseSeries(**fields) for name, fields in observations.items()}
        est = cases.estimate_object_parameters(world, series, ["cube.friction"], initial={"cube.friction": cases.SLIDE_MU})
        values.append(est.values["cube.friction"])
        stds.append(est.std["cube.friction"])
    spread = float(np.std(values, ddof=1))
    row = [f"{seeds}", f"{np.mean(values):.4f}", f"{spread:.5f}", f"{np.mean(stds):.5f}", f"{np.mean(stds) / spread:.2f}"]
    print(row, flush=True)
    return "\n".join(
        [
            "### Reported standard deviation against the spread over noise seeds\n",
            f"The sliding fit (cone, from mu = {cases.SLIDE_MU}) repeated on MuJoCo data with camera-noise seeds 0..{seeds - 1} "
            f"({time.perf_counter() - start:.0f} s). The std is the sandwich covariance of the fit with position and "
            "orientation noise estimated separately (`parameter_uncertainty`); the spread of a sample of "
            f"{seeds} has ~{100 / math.sqrt(2 * (seeds - 1)):.0f} % sampling error.\n",
            markdown_table(["seeds", "mean estimate", "spread (sd) of estimates", "mean reported std", "ratio"], [row]),
        ]
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(1)  # shared, oversubscribed cores; small tensors
    for part in args.parts.split(","):
        if part not in PARTS:
            raise SystemExit(f"unknown part '{part}'; choose from {PARTS}")
        start = time.perf_counter()
        write_section(f"contact-{part}", globals()[part]())
        print(f"contact-{part}: written in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
