"""Gradient checks of the differentiable rollouts (nerd/diffsim.py) against central finite differences.

For each case: a loss L = sum(w * states) with fixed random weights w over an H-frame rollout of N = 2 envs, its
gradient by the tape (ground truth) or autograd (NeRD) against central differences of L, entry by entry; the error
is ||g - g_fd|| / ||g_fd|| over all entries of one input. The ground truth is float32 (Newton's kernels), so its
differences take a step of 1e-2 (relative to values above 1; 1 N or N·m for torques); NeRD runs in float64 (step 1e-6
on the Cartpole; 1e-4 on the pendulum, whose forward kinematics are Warp's float32).

    python bench/diffsim_gradcheck.py            # the table in docs/neuralsim.md (about a minute on one core)
"""

from __future__ import annotations

import argparse
import time

import torch

from nerd.diffsim import GroundTruthRollout, rollout_neural
from nerd.envs import make_env
from nerd.features import signature_of_env
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.models.transformer import TransformerConfig

TINY = ModelConfig(type="transformer",
                   transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, head_hidden=[16]))


def finite_difference(loss, x: torch.Tensor, step: float) -> torch.Tensor:
    """Central differences of the scalar ``loss(x)`` for every entry of ``x``."""
    grad = torch.zeros_like(x, dtype=torch.float64)
    flat = x.detach().reshape(-1)
    for i in range(flat.numel()):
        h = step * max(1.0, abs(float(flat[i]))) if step > 0 else -step
        up, down = flat.clone(), flat.clone()
        up[i] += h
        down[i] -= h
        grad.view(-1)[i] = (loss(up.view_as(x)) - loss(down.view_as(x))) / (2 * h)
    return grad


def rel_error(g: torch.Tensor, g_fd: torch.Tensor) -> float:
    return float((g.double() - g_fd).norm() / g_fd.norm().clamp_min(1e-30))


def start(name: str, n: int, generator: torch.Generator, contact_config: int | None = None):
    env = make_env(name, n, contact_config=contact_config, use_graph=False)
    return env, env.sample_reset_states(n, generator)


def ground_truth_case(name: str, frames: int, contact_config: int | None, params: dict[str, tuple],
                      initial: torch.Tensor | None = None, step: float = 1e-2) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    env, s0 = start(name, 2, g, contact_config)
    if initial is not None:
        s0 = initial.clone()
    tq = 20.0 * torch.randn(2, frames, env.act_dim, generator=g)
    sim = GroundTruthRollout(env)
    values = {k: sim.parameter(k) for k in params}
    w = torch.randn(2, frames, env.state_dim, generator=g, dtype=torch.float64)

    def loss(s, t, vals):
        return (sim(s, t, vals).double() * w).sum()

    inputs = {"initial state": s0, "torques": tq, **{f"param {k}{list(idx)}": values[k] for k, idx in params.items()}}
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    vals = {k: leaves[f"param {k}{list(idx)}"] for k, idx in params.items()}
    loss(leaves["initial state"], leaves["torques"], vals).backward()
    out = {}
    with torch.no_grad():
        for key, x in inputs.items():
            def f(v, key=key):
                args = {k: v if k == key else inputs[k] for k in inputs}
                pv = {k: args[f"param {k}{list(idx)}"] for k, idx in params.items()}
                return float(loss(args["initial state"], args["torques"], pv))
            grad = leaves[key].grad
            if key.startswith("param"):
                # Only the chosen entries: the others (e.g. fixed world bodies) are checked through them.
                pname = key.split()[1].split("[")[0]
                idx = params[pname]
                mask = torch.zeros_like(x, dtype=torch.bool)
                mask[idx] = True
                fd = torch.zeros_like(x, dtype=torch.float64)
                for i in mask.reshape(-1).nonzero().flatten().tolist():
                    base = x.reshape(-1)
                    h = step * max(1.0, abs(float(base[i])))
                    up, down = base.clone(), base.clone()
                    up[i] += h
                    down[i] -= h
                    fd.view(-1)[i] = (f(up.view_as(x)) - f(down.view_as(x))) / (2 * h)
                out[key] = rel_error(grad[mask], fd[mask])
            else:
                # Torques of 20 N·m barely move the pendulum's 35 kg links: a step of 1 N·m lifts the float32 noise.
                out[key] = rel_error(grad, finite_difference(f, x, -1.0 if key == "torques" else step))
    return out


def neural_case(name: str, frames: int, dtype: torch.dtype, step: float) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    env, s0 = start(name, 2, g, 0 if name == "PendulumWithContact" else None)
    sig = signature_of_env(env)
    model = NeRDModel(sig.input_groups, sig.target_dim, TINY).to(dtype)
    s0, tq = s0.to(dtype), (0.5 * torch.randn(2, frames, env.act_dim, generator=g)).to(dtype)
    w = torch.randn(2, frames, env.state_dim, generator=g, dtype=dtype)

    def loss(s, t):
        return (rollout_neural(model, env, s, t, history_length=4) * w).sum()

    leaves = [s0.clone().requires_grad_(), tq.clone().requires_grad_()]
    loss(*leaves).backward()
    weight = next(p for n, p in model.named_parameters() if p.dim() == 2)
    out = {}
    with torch.no_grad():
        out["initial state"] = rel_error(leaves[0].grad, finite_difference(lambda s: float(loss(s, tq)), s0, step))
        out["torques"] = rel_error(leaves[1].grad, finite_difference(lambda t: float(loss(s0, t)), tq, step))
    weight.grad = None
    with torch.enable_grad():
        loss(s0, tq).backward()
    wg = weight.grad[:2].clone()
    fd = torch.zeros_like(wg, dtype=torch.float64)
    with torch.no_grad():
        for i in range(wg.numel()):
            r, c = divmod(i, wg.shape[1])
            old = float(weight[r, c])
            h = step * max(1.0, abs(old))
            weight[r, c] = old + h
            up = float(loss(s0, tq))
            weight[r, c] = old - h
            down = float(loss(s0, tq))
            weight[r, c] = old
            fd.view(-1)[i] = (up - down) / (2 * h)
    out["weights (2 rows of the first matrix)"] = rel_error(wg, fd)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=10)
    args = parser.parse_args()
    h = args.frames
    # Pendulum body 0/1 masses, joint 1's pivot x (link 0's length), the armatures; Cartpole cart and pole masses.
    pend = {"body_mass": (slice(0, 2),), "joint_X_p": (1, 0), "joint_armature": (slice(0, 2),)}
    cases = {
        f"ground truth, Cartpole, {h} frames": lambda: ground_truth_case(
            "Cartpole", h, None, {"body_mass": (slice(0, 2),), "joint_armature": (slice(0, 2),)}),
        f"ground truth, pendulum contact-free (config 0), {h} frames": lambda: ground_truth_case(
            "PendulumWithContact", h, 0, pend),
        # Config 1: the ground at z = 0, 2 m below the pivot; link 0 hanging down with its tip 0.1 m above it... the
        # second link folded down: both tips reach the ground within the horizon.
        f"ground truth, pendulum in contact (config 1), {h} frames": lambda: ground_truth_case(
            "PendulumWithContact", h, 1, {"shape_material_ke": (slice(0, 2),)},
            initial=torch.tensor([[1.2, 0.0, 0.0, 0.0], [1.3, 0.3, 0.5, 0.0]])),
        f"NeRD (tiny, untrained), Cartpole, float64, {h} frames": lambda: neural_case(
            "Cartpole", h, torch.float64, 1e-6),
        f"NeRD (tiny, untrained), pendulum, float32 FK, {h} frames": lambda: neural_case(
            "PendulumWithContact", h, torch.float64, 1e-4),
    }
    for title, run in cases.items():
        t0 = time.perf_counter()
        errors = run()
        print(f"{title} ({time.perf_counter() - t0:.1f} s)")
        for key, err in errors.items():
            print(f"  {key:45s} relative error {err:.2e}")


if __name__ == "__main__":
    main()
