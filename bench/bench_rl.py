"""RL environment throughput: env-steps/s of NeRDVecEnv.step in neural and ground-truth mode.

One env-step = one frame of one env, including what an RL step does besides physics: the task's reward,
termination and observation, and the resets of finished envs. Policy inference is excluded (actions are random
and drawn beforehand). Ground truth is Featherstone with the captured frame graph and no NeRD model attached;
neural mode uses an untrained NeRD model of a given size (throughput does not depend on the weights), or a
trained Cartpole checkpoint with ``--cartpole-model``.

Writes ``bench/results/rl.json`` (``rl_quick.json`` with ``--quick``) and prints a Markdown table.

Example:
    python bench/bench_rl.py            # Cartpole N = 64, 512, 2048; Ant N = 16, 64, 256; Anymal N = 1, 64, 512
    python bench/bench_rl.py --quick    # small sizes and tiny models, about a minute
    python bench/bench_rl.py --robots Anymal --output bench/results/rl_anymal.json   # one robot
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from nerd.cli import resolve_device, run_main
from nerd.config import load_config
from nerd.envs import make_env
from nerd.features import signature_of_env
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.models.transformer import TransformerConfig
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.rl.tasks import make_task
from nerd.rl.vec_env import NeRDVecEnv
from nerd.run_dir import write_text_atomic
from nerd.training import TrainConfig

REPO = Path(__file__).resolve().parents[1]
# Untrained NeRD models timed in neural mode: the project's CPU-sized Cartpole model (cfg/train/Cartpole/cpu.yaml)
# and the release's Ant size (spec §7: 6 layers, 12 heads, n_embd 384, block 32).
FULL_MODELS = {
    "Cartpole": lambda: load_config(REPO / "cfg/train/Cartpole/cpu.yaml", TrainConfig).model,
    "Ant": lambda: ModelConfig(transformer=TransformerConfig(n_layer=6, n_head=12, n_embd=384, block_size=32)),
    # The release's ANYmal model has the same transformer size as its Ant's.
    "Anymal": lambda: ModelConfig(transformer=TransformerConfig(n_layer=6, n_head=12, n_embd=384, block_size=32)),
}
TINY_MODEL = ModelConfig(transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, head_hidden=[16]))
TASKS = {"Cartpole": "swingup", "Ant": "run", "Anymal": "forward_walk"}


def build_vec_env(robot: str, num_envs: int, mode: str, model_cfg: ModelConfig | None, model_path: str | None,
                  device: str) -> NeRDVecEnv:
    """A vec env of the robot's benchmark task in ``mode``."""
    env = make_env(robot, num_envs, device=device)
    if mode == GROUND_TRUTH:
        nenv = NeuralEnvironment(env, None, GROUND_TRUTH)
    elif model_path:
        nenv = NeuralEnvironment.from_checkpoint(env, model_path, NEURAL)
    else:
        sig = signature_of_env(env)
        nenv = NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, model_cfg), NEURAL)
    return NeRDVecEnv(nenv, make_task(robot, TASKS[robot], num_envs, nenv.torch_device), seed=0)


@torch.no_grad()
def env_steps_per_second(vec_env: NeRDVecEnv, min_seconds: float) -> float:
    """Env-steps/s of ``vec_env.step`` with pre-drawn random actions (after 2 warm-up steps)."""
    gen = torch.Generator().manual_seed(0)
    actions = [2 * torch.rand(vec_env.num_envs, vec_env.action_space.shape[0], generator=gen) - 1 for _ in range(64)]
    actions = [a.to(vec_env.device) for a in actions]
    vec_env.reset()
    for a in actions[:2]:
        vec_env.step(a)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds:
        vec_env.step(actions[steps % len(actions)])
        steps += 1
    vec_env.nenv.env.synchronize()
    return steps * vec_env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="small env counts and tiny models")
    parser.add_argument("--cartpole-model", default=None, help="time a trained Cartpole NeRD checkpoint instead")
    parser.add_argument("--robots", nargs="+", choices=tuple(TASKS), default=list(TASKS), help="robots to time")
    parser.add_argument("--output", default=None, help="results JSON (default: bench/results/rl.json)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    sizes = {"Cartpole": (16, 64), "Ant": (4, 16), "Anymal": (1, 16)}
    if not args.quick:
        sizes = {"Cartpole": (64, 512, 2048), "Ant": (16, 64, 256), "Anymal": (1, 64, 512)}
    sizes = {robot: sizes[robot] for robot in args.robots}
    min_seconds = 0.5 if args.quick else 3.0
    output = Path(args.output or REPO / "bench" / "results" / ("rl_quick.json" if args.quick else "rl.json"))
    results = {"device": device, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "torch_threads": torch.get_num_threads(), "quick": args.quick, "policy_inference": "excluded",
               "rows": []}
    for robot, counts in sizes.items():
        model_cfg = TINY_MODEL if args.quick else FULL_MODELS[robot]()
        model_path = args.cartpole_model if robot == "Cartpole" else None
        model_desc = (f"checkpoint {model_path}" if model_path else
                      f"untrained transformer {model_cfg.transformer.n_layer}x{model_cfg.transformer.n_embd}")
        for n in counts:
            row = {"robot": robot, "task": TASKS[robot], "num_envs": n, "neural_model": model_desc}
            for mode in (GROUND_TRUTH, NEURAL):
                vec_env = build_vec_env(robot, n, mode, model_cfg, model_path, device)
                row[mode] = env_steps_per_second(vec_env, min_seconds)
            results["rows"].append(row)
            print(f"{robot:<9} N={n:<5} ground truth {row[GROUND_TRUTH]:>11,.0f}  neural {row[NEURAL]:>11,.0f} "
                  f"env-steps/s", flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(results, indent=2))
    print(f"\nRL env-steps/s on {results['machine']} ({device}, {results['torch_threads']} torch threads), "
          "policy inference excluded\n")
    print("| robot / task | N | ground truth | neural | neural / GT | neural model |\n|---|---|---|---|---|---|")
    for row in results["rows"]:
        gt, neural = row[GROUND_TRUTH], row[NEURAL]
        print(f"| {row['robot']} {row['task']} | {row['num_envs']} | {gt:,.0f} | {neural:,.0f} | {neural / gt:.2f}x | "
              f"{row['neural_model']} |")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    run_main(main)
