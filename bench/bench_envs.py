"""Ground-truth stepping and dataset-generation throughput.

Measures, with a warm Warp kernel cache (compile time is measured separately, in a subprocess with an empty
cache, and never counted in throughput):

* env-steps/s (frames x envs per second) of every robot at N = 1, 64, 512, captured graph vs plain launches,
  with Featherstone's mass matrix refreshed once per frame (the release's setting, the default) and, captured,
  every substep (Newton's default);
* dataset generation transitions/s vs raw captured stepping at the same N and trajectory length.

Writes ``bench/results/envs.json`` and prints a Markdown table.

Example:
    python bench/bench_envs.py                 # everything (a few minutes on 2 CPU cores)
    python bench/bench_envs.py --quick         # N = 1 and 64 only, no cold-cache compile
    python bench/bench_envs.py --stepping-only # stepping table only (no generation, no cold-cache compile)
    python bench/bench_envs.py --envs Anymal --output bench/results/envs_anymal.json   # one robot

Robots whose data goes through a controller (ANYmal's PD law) step with zero *actions* through it, and generate
with random actions and per-env random gains; the others step with zero torques.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from nerd.cli import resolve_device, run_main
from nerd.envs import ENV_NAMES, make_env
from nerd.generation import GenerationConfig, generate_dataset
from nerd.run_dir import write_text_atomic

MIN_SECONDS = 1.5  # time each measurement at least this long


def steps_per_second(name: str, num_envs: int, use_graph: bool, device: str,
                     mass_matrix_refresh: str = "frame") -> float:
    """Frames x envs per second of zero-torque (zero-action for controller robots) stepping, after one warm-up
    frame that loads/captures."""
    env = make_env(name, num_envs, device=device, use_graph=use_graph, mass_matrix_refresh=mass_matrix_refresh)
    env.reset(generator=torch.Generator().manual_seed(0))
    if env.random_control == "actions":
        actions = torch.zeros(num_envs, env.action_dim, device=env.torch_device)

        def step():
            env.step(actions)
    else:
        torques = torch.zeros(num_envs, env.act_dim, device=env.torch_device)

        def step():
            env.step_with_joint_act(torques)
    step()
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < MIN_SECONDS:
        step()
        frames += 1
    env.synchronize()
    return frames * num_envs / (time.perf_counter() - start)


def cold_compile_seconds(name: str, device: str) -> float:
    """Seconds to build the robot and run its first frame with an empty kernel cache (in a subprocess)."""
    code = (
        "import time; t = time.perf_counter(); import torch; from nerd.envs import make_env; "
        f"env = make_env('{name}', 1, device='{device}'); "
        "env.step_with_joint_act(torch.zeros(1, env.act_dim, device=env.torch_device)); "
        "print(time.perf_counter() - t)"
    )
    with tempfile.TemporaryDirectory() as cache:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env={**os.environ, "WARP_CACHE_PATH": cache}, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def generation_vs_stepping(name: str, num_envs: int, length: int, device: str, batches: int = 5) -> dict[str, float]:
    """Generation transitions/s against raw captured stepping with random torques, over ``batches`` batches.

    Several batches amortise what a run pays once (building the model, the first uncaptured frame and the
    capture, creating and closing the file), as a real dataset of many batches does.
    """
    env = make_env(name, num_envs, device=device)
    gen = torch.Generator().manual_seed(0)
    env.reset(states=env.sample_initial_states(num_envs, gen))

    def random_step():
        if env.random_control == "actions":  # what generation does: new gains and actions every frame
            env.randomize_controller(gen)
            env.step(env.sample_random_actions(num_envs, gen))
        else:
            env.step_with_joint_act(env.sample_random_torques(num_envs, gen))
    random_step()
    start = time.perf_counter()
    for _ in range(batches * length):
        random_step()
    env.synchronize()
    raw = num_envs * batches * length / (time.perf_counter() - start)
    result = {"raw_steps_per_s": raw, "batches": batches}
    with tempfile.TemporaryDirectory() as tmp:
        # Warm-up: imports and kernel modules, outside the timing.
        generate_dataset(GenerationConfig(name, 2 * num_envs, trajectory_length=2, num_envs=num_envs),
                         Path(tmp) / "warmup.hdf5", device=device, progress=False)
        for compression in ("lzf", None):
            cfg = GenerationConfig(name, batches * num_envs * length, trajectory_length=length, num_envs=num_envs,
                                   compression=compression)
            summary = generate_dataset(cfg, Path(tmp) / f"{compression}.hdf5", device=device, progress=False)
            key = compression or "uncompressed"
            result[f"generation_{key}_transitions_per_s"] = summary.transitions_per_second
            result[f"ratio_{key}"] = summary.transitions_per_second / raw
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="N = 1 and 64 only, skip cold-cache compile times")
    parser.add_argument("--stepping-only", action="store_true", help="skip generation and cold-cache compile")
    parser.add_argument("--envs", nargs="+", choices=ENV_NAMES, default=list(ENV_NAMES), help="robots to measure")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "envs.json"))
    args = parser.parse_args()
    device = resolve_device(args.device)
    sizes = (1, 64) if args.quick else (1, 64, 512)
    generation_sizes = {"Cartpole": 2048, "PendulumWithContact": 2048, "Ant": 16, "Anymal": 16}
    results = {"device": device, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "torch_threads": torch.get_num_threads(), "stepping": [], "compile": {}, "generation": {}}
    for name in args.envs:
        for n in sizes:
            captured = steps_per_second(name, n, True, device)
            plain = steps_per_second(name, n, False, device)
            substep = steps_per_second(name, n, True, device, mass_matrix_refresh="substep")
            results["stepping"].append({"env": name, "num_envs": n, "captured": captured, "uncaptured": plain,
                                        "captured_substep_refresh": substep})
            print(f"{name:<20} N={n:<4} captured {captured:>12,.0f}  uncaptured {plain:>12,.0f}  "
                  f"captured, per-substep mass matrix {substep:>12,.0f} env-steps/s", flush=True)
        if args.stepping_only:
            continue
        if not args.quick:
            results["compile"][name] = cold_compile_seconds(name, device)
            print(f"{name:<20} cold-cache build + first frame {results['compile'][name]:.1f} s", flush=True)
        results["generation"][name] = {"num_envs": generation_sizes[name], "trajectory_length": 100,
                                       **generation_vs_stepping(name, generation_sizes[name], 100, device)}
        gen = results["generation"][name]
        print(f"{name:<20} generation {gen['ratio_lzf']:.0%} (lzf) / {gen['ratio_uncompressed']:.0%} (uncompressed) "
              "of raw stepping", flush=True)

    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(results, indent=2))
    print("\n| robot | N | captured env-steps/s | uncaptured env-steps/s | speed-up | captured, mass matrix every "
          "substep | frame vs substep refresh |\n|---|---|---|---|---|---|---|")
    for row in results["stepping"]:
        print(f"| {row['env']} | {row['num_envs']} | {row['captured']:,.0f} | {row['uncaptured']:,.0f} | "
              f"{row['captured'] / row['uncaptured']:.1f}x | {row['captured_substep_refresh']:,.0f} | "
              f"{row['captured'] / row['captured_substep_refresh']:.1f}x |")
    print("\n| robot | N | raw stepping /s | generation /s (lzf) | ratio | generation /s (uncompressed) | ratio "
          "| cold compile (s) |\n|---|---|---|---|---|---|---|---|")
    for name, row in results["generation"].items():
        compile_s = results["compile"].get(name)
        print(f"| {name} | {row['num_envs']} | {row['raw_steps_per_s']:,.0f} | "
              f"{row['generation_lzf_transitions_per_s']:,.0f} | {row['ratio_lzf']:.0%} | "
              f"{row['generation_uncompressed_transitions_per_s']:,.0f} | {row['ratio_uncompressed']:.0%} | "
              f"{'-' if compile_s is None else f'{compile_s:.0f}'} |")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    run_main(main)
