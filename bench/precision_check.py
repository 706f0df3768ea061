"""bfloat16 against float32: is a lower-precision network worth it? Speed and rollout accuracy in one run.

Issue 11 asks for the Cartpole neural step at 80 % of its float32 FLOP floor; in float32 this model's small matmuls
keep it below that (docs/results.md). A CPU with AVX512-BF16 (the project's AMD EPYC) or AMX multiplies
bfloat16 matrices several times faster than float32 ones, which leaves precision as the one lever. Each variant of
one checkpoint steps its own ``NeuralEnvironment``:

- ``float32``: the model as trained; the reference, and what every other number of the project uses;
- ``bfloat16``: weights and activations in bfloat16 (tokens rounded on the way in; the output de-normalised in
  float32);
- ``autocast``: ``torch.autocast(bfloat16)``: linear layers in bfloat16; LayerNorm, softmax and the residual stream
  in float32.

Measured:

- speed: the whole neural step (``step_with_joint_act``, zero torques) at ``--timing-envs`` envs, the variants'
  samples alternating with float32 and bfloat16 matmul samples (``--matmul-size`` squares), one torch thread;
- accuracy: passive rollouts against the ground truth under the release's protocol (``eval_passive_motion.py``'s
  defaults: the task's reset states, zero actions), every variant from the same initial states; the mean error
  over steps 1..h and rollouts, per metric, as ``eval_passive_motion.py`` reports it.

Writes ``bench/results/precision_<robot>.json`` and prints a Markdown table.

Example:
    python bench/precision_check.py                     # Cartpole's shipped model, 512 rollouts x 1000 steps
    python bench/precision_check.py --num-rollouts 64 --rollout-horizon 100 --output /tmp/p.json   # a minute
"""

import argparse
import copy
import json
import os
import platform
from pathlib import Path

import torch
from tqdm import tqdm

from nerd.checkpoint import load_checkpoint, shipped_model_path
from nerd.cli import check_output, resolve_device, run_main
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.evaluation import REPORT_HORIZONS, initial_state_sampler, rollout, state_errors
from nerd.features import signature_of_env
from nerd.models.nerd_model import NeRDModel
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.perf import time_alternating
from nerd.run_dir import write_text_atomic

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("float32", "bfloat16", "autocast")


def with_precision(model: NeRDModel, variant: str) -> NeRDModel:
    """``model``, or a copy of it whose per-step prediction (``predict_last``) runs in the ``variant`` precision."""
    if variant == "float32":
        return model
    wrapped = copy.deepcopy(model)
    if variant == "bfloat16":
        low = copy.deepcopy(model).to(torch.bfloat16)

        def predict_last(tokens: torch.Tensor, last: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
            out = low.normalized_last(tokens.to(torch.bfloat16), last, chunk)
            return model.target_norm.denormalize(out.float())
    else:
        def predict_last(tokens: torch.Tensor, last: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
            with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
                out = model.normalized_last(tokens, last, chunk)
            return model.target_norm.denormalize(out.float())
    # An instance attribute shadows the method: the integrator binds ``predict_last`` when it is built.
    wrapped.predict_last = predict_last
    return wrapped


def neural_environments(env_name: str, path: str, num_envs: int, device: str) -> dict[str, NeuralEnvironment]:
    """One neural environment of ``num_envs`` envs per variant, all on the same checkpoint (loaded and checked
    against the robot once)."""
    envs = {variant: make_env(env_name, num_envs, device=device) for variant in VARIANTS}
    model, signature, payload = load_checkpoint(path, device=envs["float32"].torch_device)
    signature.check_compatible(signature_of_env(envs["float32"], joint_limit_inputs=bool(signature.joint_limits),
                                                joint_limit_lookahead=bool(signature.joint_limit_lookahead)))
    return {variant: NeuralEnvironment(env, [with_precision(model, variant)], NEURAL,
                                       history_length=[payload["history_length"]])
            for variant, env in envs.items()}


def step_speeds(envs: dict[str, NeuralEnvironment], seconds: float, repeats: int, device: str,
                matmul_size: int) -> dict[str, dict[str, float]]:
    """env-steps/s of each variant's neural step and FLOP/s of float32 and bfloat16 matmuls, samples alternating."""
    def stepper(nenv: NeuralEnvironment):
        torques = torch.zeros(nenv.num_envs, nenv.env.act_dim, device=nenv.torch_device)
        nenv.reset(generator=torch.Generator().manual_seed(0))
        return lambda: nenv.step_with_joint_act(torques)

    size = matmul_size
    mats = {dtype: [torch.randn(size, size, device=device, dtype=dtype) for _ in range(2)]
            for dtype in (torch.float32, torch.bfloat16)}
    fns = {variant: stepper(nenv) for variant, nenv in envs.items()}
    fns.update({f"matmul {str(dtype).removeprefix('torch.')}": (lambda a=a, b=b: a @ b)
                for dtype, (a, b) in mats.items()})
    seconds_per_call = time_alternating(fns, repeats, seconds, device)
    rates = {}
    for name, s in seconds_per_call.items():
        work = 2.0 * size**3 if name.startswith("matmul") else next(iter(envs.values())).num_envs
        rates[name] = {"best": work / s["best"], "median": work / s["median"]}
    return rates


def rollout_errors(envs: dict[str, NeuralEnvironment], num_rollouts: int, horizon: int, seed: int
                   ) -> dict[str, dict[str, dict[int, float]]]:
    """variant -> metric -> {h: mean error over steps 1..h and rollouts} against the ground truth."""
    reference = envs["float32"]
    env = reference.env
    sample = initial_state_sampler(env, "task")
    generator = torch.Generator().manual_seed(seed)
    horizons = sorted({h for h in REPORT_HORIZONS if h < horizon} | {horizon})
    sums: dict[str, dict[str, torch.Tensor]] = {variant: {} for variant in envs}
    done = 0
    batches = -(-num_rollouts // reference.num_envs)
    bar = tqdm(total=batches * (1 + len(envs)) * horizon, desc="rollouts", unit="step", mininterval=1.0)
    for _ in range(batches):
        initial = sample(reference.num_envs, generator)
        keep = min(reference.num_envs, num_rollouts - done)
        gt = rollout(reference, initial, horizon, GROUND_TRUTH, on_step=bar.update)
        for variant, nenv in envs.items():
            pred = rollout(nenv, initial, horizon, NEURAL, on_step=bar.update)
            for name, value in state_errors(gt[1:, :keep], pred[1:, :keep], env).items():
                if name != "per_dof":
                    sums[variant][name] = sums[variant].get(name, 0) + value.double().sum(dim=1)
        done += keep
    bar.close()
    return {variant: {name: {h: float(per_step[:h].mean()) / done for h in horizons}
                      for name, per_step in metrics.items()}
            for variant, metrics in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-name", default="Cartpole")
    parser.add_argument("--model-path", default=None, help="checkpoint (default: the robot's shipped model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=512, help="envs per rollout batch (default 512)")
    parser.add_argument("--num-rollouts", type=int, default=512, help="rollouts per variant (default 512)")
    parser.add_argument("--rollout-horizon", type=int, default=1000, help="steps per rollout (default 1000)")
    parser.add_argument("--seed", type=int, default=500, help="initial states' seed (default 500, the release's)")
    parser.add_argument("--timing-envs", type=int, default=2048, help="envs of the timed step (default 2048)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per sample (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="samples per measurement (best and median kept)")
    parser.add_argument("--matmul-size", type=int, default=1024, help="side of the timed square matmuls")
    parser.add_argument("--output", default=None, help="results JSON (default: bench/results/precision_<robot>.json)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    args = parser.parse_args()
    if min(args.num_envs, args.num_rollouts, args.rollout_horizon, args.timing_envs) < 1:
        raise UserError("--num-envs, --num-rollouts, --rollout-horizon and --timing-envs must be positive")
    torch.set_num_threads(1)
    device = resolve_device(args.device)
    path = args.model_path or shipped_model_path(args.env_name)
    if path is None:
        raise UserError(f"{args.env_name} has no shipped model; pass --model-path")
    output = check_output(args.output or REPO / "bench" / "results" / f"precision_{args.env_name.lower()}.json",
                          args.overwrite)
    speeds = step_speeds(neural_environments(args.env_name, path, args.timing_envs, device), args.seconds,
                         args.repeats, device, args.matmul_size)
    errors = rollout_errors(neural_environments(args.env_name, path, min(args.num_envs, args.num_rollouts), device),
                            args.num_rollouts, args.rollout_horizon, args.seed)
    results = {"env_name": args.env_name, "model_path": str(path), "device": device, "torch_threads": 1,
               "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "timing_envs": args.timing_envs, "matmul_size": args.matmul_size, "env_steps_per_s_and_flops": speeds,
               "num_rollouts": args.num_rollouts, "rollout_horizon": args.rollout_horizon, "seed": args.seed,
               "initial_states": "task", "mean_errors_by_horizon": errors}
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(results, indent=2))

    names = list(next(iter(errors.values())))
    horizons = list(next(iter(errors.values()))[names[0]])
    print(f"\n{args.env_name}, {path}: {args.timing_envs} envs timed, {args.num_rollouts} rollouts x "
          f"{args.rollout_horizon} steps (seed {args.seed}, task reset states)")
    for dtype in ("float32", "bfloat16"):
        print(f"matmul {args.matmul_size}^2 {dtype}: {speeds[f'matmul {dtype}']['best'] / 1e9:.1f} GFLOP/s")
    columns = ["network", "env-steps/s", "vs float32"] + [f"{n} H={h}" for n in names for h in horizons]
    print("\n| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    base = speeds["float32"]["best"]
    for variant in VARIANTS:
        cells = " | ".join(f"{errors[variant][n][h]:.4g}" for n in names for h in horizons)
        print(f"| {variant} | {speeds[variant]['best']:,.0f} | {speeds[variant]['best'] / base:.2f}x | {cells} |")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    run_main(main)
