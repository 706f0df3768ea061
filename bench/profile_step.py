"""Where one neural step's time goes: a NeRDIntegrator step split into its stages, against the FLOP floor.

Stages, each timed on its own on the same state (every one runs the integrator's own code):
    features      current_inputs(): states, body poses, torques and contact features -> token groups
    history       push_history(): normalise the token once and write it into the (N, H, D) history
    model         the backbone on the history (the last block, norm, projection and head on the last position;
                  on a CPU in calls of 256 envs)
    denormalise   the target statistics applied to the network output
    integrate     integrate_target(): the relative target applied to the states
    nan check     the step's one host synchronisation (torques and predictions finite)
    state writes  joint_q / joint_qd written into the Newton state, then forward kinematics
    contacts      the collision stage refreshed for the new state
Their sum is compared with a whole ``NeuralEnvironment.step_with_joint_act`` (what an RL or evaluation loop
calls). The model's FLOPs (torch's FlopCounterMode, matmuls and attention) and the machine's float32 matmul rate
are measured in the same run, so the floor (FLOPs / rate) and the achieved share are comparable. The full
forward (every position through every block, the previous path) and ``torch.compile`` are timed too, their
samples alternating so that a change of load on a shared machine hits them alike.

On a GPU (``--device cuda``) the script also counts the host synchronisations of a step: torch's sync debug mode
flags every torch call that waits for the device (``.item()``, ``bool()`` of a tensor, ``nonzero``, copies to the
host) while 10 steps run; the integrator's design allows one per step (its NaN check; none with the check off).

Timings: ``--repeats`` samples of at least ``--min-seconds`` each; best and median are reported (the machine may
be shared; the best is the least disturbed sample). Torch runs ``--threads`` threads (default 1).

Example:
    python bench/profile_step.py                              # shipped Cartpole model, N = 2048
    python bench/profile_step.py --env-name Ant --num-envs 512 --model-cfg cfg/train/Ant/cpu.yaml
    python bench/profile_step.py --device cuda --compile      # on a GPU: also the host syncs per step
"""

import argparse
import json
import os
import platform
import warnings
from pathlib import Path

import newton
import torch

from nerd.checkpoint import shipped_model_path
from nerd.cli import resolve_device, run_main
from nerd.config import load_config
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.features import signature_of_env
from nerd.models.nerd_model import NeRDModel
from nerd.modes import NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.perf import count_flops, matmul_rate, time_alternating
from nerd.representation import integrate_target
from nerd.run_dir import write_text_atomic
from nerd.training import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def build(env_name: str, num_envs: int, model_path: str | None, model_cfg: str | None, device: str
          ) -> tuple[NeuralEnvironment, str]:
    """The neural environment to profile and a description of its model."""
    env = make_env(env_name, num_envs, device=device)
    if model_cfg:
        sig = signature_of_env(env)
        cfg = load_config(model_cfg, TrainConfig)
        torch.manual_seed(0)
        model = NeRDModel(sig.input_groups, sig.target_dim, cfg.model)
        return NeuralEnvironment(env, model, NEURAL, cfg.history_length), f"randomly initialised, {model_cfg}"
    path = model_path or shipped_model_path(env_name)
    if path is None:
        raise UserError(f"{env_name} has no shipped model; pass --model-path or --model-cfg")
    return NeuralEnvironment.from_checkpoint(env, path, NEURAL), str(Path(path).relative_to(REPO)
                                                                    if Path(path).is_relative_to(REPO) else path)


def profile(nenv: NeuralEnvironment, repeats: int, min_seconds: float, compile_model: bool,
            matmul_size: int = 1024) -> dict:
    """Seconds per stage (best, median), the model's FLOPs per env-step and the rate of a ``matmul_size``-square
    float32 matmul, the floor's reference."""
    env, integ = nenv.env, nenv.integrator
    n, dof_q, device = nenv.num_envs, nenv.signature.dof_q, nenv.torch_device
    model = integ.nerd_model
    zero = torch.zeros(n, env.act_dim, device=device)
    gen = torch.Generator().manual_seed(0)
    nenv.reset(generator=gen)
    for _ in range(integ.history_length + 2):  # full histories: the steady state of a rollout
        nenv.step_with_joint_act(zero)

    state, control, contacts = env.state_0, env.control, env.contacts
    groups, anchor, states = integ.current_inputs(state, control, contacts)
    tokens, last = integ._tokens, integ.history_count - 1
    with torch.inference_mode():
        raw = model.normalized_last(tokens, last, integ.chunk_envs)
        targets = integ.predict_targets()
        next_states = integrate_target(states, targets, anchor, nenv.signature.layout)
    out_q = env._joint_q
    out_qd = env._joint_qd

    def state_writes():
        out_q.copy_(next_states[:, :dof_q])
        out_qd.copy_(next_states[:, dof_q:])
        env.sync_torch_writes()
        newton.eval_fk(env.model, state.joint_q, state.joint_qd, state)

    def nan_check():
        return bool(torch.isfinite(next_states).all() & torch.isfinite(groups["joint_acts"]).all())

    rate_before = matmul_rate(device, size=matmul_size, repeats=repeats)
    a, b = (torch.randn(matmul_size, matmul_size, generator=gen).to(device) for _ in range(2))
    product = torch.empty(matmul_size, matmul_size, device=device)
    with torch.inference_mode():
        # Every stage, the whole step and the matmul rate's own sample in alternation (a, b, ..., a, b, ...):
        # on a shared machine a change of load then hits all of them alike, and their ratios stay fair.
        stage_fns = {"features": lambda: integ.current_inputs(state, control, contacts),
                     "history": lambda: integ.push_history(groups)}
        stage_fns["model"] = lambda: model.normalized_last(tokens, last, integ.chunk_envs)
        stage_fns["denormalise"] = lambda: model.target_norm.denormalize(raw)
        stage_fns.update({"integrate": lambda: integrate_target(states, targets, anchor, nenv.signature.layout),
                          "nan check": nan_check, "state writes": state_writes, "contacts": env.refresh_contacts,
                          "whole step": lambda: nenv.step_with_joint_act(zero),
                          "matmul": lambda: torch.mm(a, b, out=product)})
        fast = None
        if compile_model:
            fast = torch.compile(model.predict_last, dynamic=False)
            fast(tokens, last, integ.chunk_envs)  # compilation, not timed
            stage_fns["whole step, torch.compile"] = lambda: compiled_step(integ, fast, nenv, zero)
        stages = time_alternating(stage_fns, repeats, min_seconds, device)
        step, mm = stages.pop("whole step"), stages.pop("matmul")
        step_compiled = stages.pop("whole step, torch.compile", None)
        # The prediction's variants, timed in alternation so that load changes hit them alike.
        variants = {"full forward, one call": lambda: model.backbone(tokens),
                    "last position only, one call": lambda: model.predict_last(tokens, last),
                    f"last position only, chunks of {integ.chunk_envs} (default)":
                        lambda: model.predict_last(tokens, last, integ.chunk_envs)}
        if fast is not None:
            variants[f"torch.compile, chunks of {integ.chunk_envs}"] = lambda: fast(tokens, last, integ.chunk_envs)
        variants = time_alternating(variants, repeats, min_seconds, device)
        flops_fast = count_flops(lambda: model.predict_last(tokens, last)) / n
        flops_full = count_flops(lambda: model.backbone(tokens)) / n
        operators = model_operator_shares(lambda: model.predict_last(tokens, last, integ.chunk_envs))
    rate_after = matmul_rate(device, size=matmul_size, repeats=repeats)
    syncs = None
    if torch.device(device).type == "cuda":
        syncs = {"nan check on": count_host_syncs(nenv, zero)}
        nenv.set_nan_check(False)
        syncs["nan check off"] = count_host_syncs(nenv, zero)
        nenv.set_nan_check(True)
    flops = 2.0 * matmul_size**3
    rate = {"best": flops / mm["best"], "median": flops / mm["median"],
            "alone_before": rate_before["best"], "alone_after": rate_after["best"]}
    return {"stages_s": stages, "step_s": step, "compiled_step_s": step_compiled, "prediction_variants_s": variants,
            "flops_per_env_step": flops_fast, "full_forward_flops_per_env_step": flops_full,
            "matmul_flops_per_s": rate, "params": sum(p.numel() for p in model.parameters()),
            "host_syncs_per_step": syncs, "model_operator_shares": operators}


OPERATOR_GROUPS = {"aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul",
                   "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
                   "aten::_scaled_dot_product_efficient_attention": "attention",
                   "aten::_scaled_dot_product_flash_attention": "attention",
                   "aten::gelu": "GELU", "aten::native_layer_norm": "LayerNorm"}


def model_operator_shares(fn, calls: int = 5) -> dict[str, float]:
    """Share of the model's own CPU time per operator group (torch.profiler, self time): where the time goes
    besides the matmuls the floor counts."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    shares: dict[str, float] = {}
    for event in prof.key_averages():
        group = OPERATOR_GROUPS.get(event.key, "other")
        shares[group] = shares.get(group, 0.0) + event.self_cpu_time_total
    total = sum(shares.values())
    return {group: t / total for group, t in sorted(shares.items(), key=lambda kv: -kv[1])}


def compiled_step(integ, fast, nenv: NeuralEnvironment, torques: torch.Tensor) -> None:
    """One whole step with the integrator's prediction swapped for the compiled one (``compile_model=True``)."""
    eager, integ._predict = integ._predict, fast
    try:
        nenv.step_with_joint_act(torques)
    finally:
        integ._predict = eager


def count_host_syncs(nenv: NeuralEnvironment, torques: torch.Tensor, steps: int = 10) -> float:
    """Host synchronisations per ``step_with_joint_act`` on a GPU, as torch's sync debug mode reports them."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(steps):
                nenv.step_with_joint_act(torques)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-name", default="Cartpole")
    parser.add_argument("--num-envs", type=int, default=2048)
    parser.add_argument("--model-path", default=None, help="NeRD checkpoint (default: the robot's shipped model)")
    parser.add_argument("--model-cfg", default=None,
                        help="time a randomly initialised model of this training config's size instead")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the model")
    parser.add_argument("--matmul-size", type=int, default=1024,
                        help="side of the float32 matmul that defines the floor (default 1024; 8192 on a GPU)")
    parser.add_argument("--output", default=None,
                        help="results JSON (default: bench/results/profile_step_<env>_<N>.json)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    nenv, model_desc = build(args.env_name, args.num_envs, args.model_path, args.model_cfg, device)
    result = profile(nenv, args.repeats, args.min_seconds, args.compile, args.matmul_size)
    n = args.num_envs
    result.update({"env_name": args.env_name, "num_envs": n, "model": model_desc, "device": device,
                   "torch_threads": torch.get_num_threads(),
                   "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"})
    rate = result["matmul_flops_per_s"]
    floor = rate["best"] / result["flops_per_env_step"]
    result["floor_env_steps_per_s"] = floor
    print(f"{args.env_name}, N = {n}, {model_desc}, {result['params']:,} parameters, network calls of "
          f"{nenv.integrator.chunk_envs} envs, "
          f"{result['torch_threads']} torch thread(s), {device}")
    print(f"matmul rate {rate['best'] / 1e9:.1f} GFLOP/s (best of the samples alternating with the stages; median "
          f"{rate['median'] / 1e9:.1f}; alone before/after {rate['alone_before'] / 1e9:.1f} / "
          f"{rate['alone_after'] / 1e9:.1f}); model "
          f"{result['flops_per_env_step'] / 1e6:.3f} MFLOP per env-step (full forward "
          f"{result['full_forward_flops_per_env_step'] / 1e6:.3f}); floor {floor:,.0f} env-steps/s\n")
    print("| stage | ms per step (best) | median | share of the step |\n|---|---|---|---|")
    total = result["step_s"]["best"]
    for name, t in result["stages_s"].items():
        print(f"| {name} | {1e3 * t['best']:.2f} | {1e3 * t['median']:.2f} | {100 * t['best'] / total:.0f} % |")
    summed = sum(t["best"] for t in result["stages_s"].values())
    print(f"| sum of stages | {1e3 * summed:.2f} | | {100 * summed / total:.0f} % |")
    print(f"| whole step_with_joint_act | {1e3 * total:.2f} | {1e3 * result['step_s']['median']:.2f} | 100 % |")
    model_s = result["stages_s"]["model"]["best"]
    print(f"\nwhole step: {n / total:,.0f} env-steps/s = {100 * n / total / floor:.0f} % of the floor; "
          f"the model alone {100 * n / model_s / floor:.0f} %")
    if result["compiled_step_s"]:
        t = result["compiled_step_s"]["best"]
        print(f"whole step with torch.compile: {1e3 * t:.2f} ms = {n / t:,.0f} env-steps/s = "
              f"{100 * n / t / floor:.0f} % of the floor")
    print("model time by operator (torch.profiler self time): " + ", ".join(
        f"{group} {100 * share:.0f} %" for group, share in result["model_operator_shares"].items()))
    print("\nthe prediction, variants timed in alternation (ms, best / median):")
    for name, t in result["prediction_variants_s"].items():
        print(f"  {name}: {1e3 * t['best']:.2f} / {1e3 * t['median']:.2f}")
    if result["host_syncs_per_step"] is not None:
        print(f"host synchronisations per step: {result['host_syncs_per_step']}")
    output = Path(args.output or REPO / "bench" / "results" / f"profile_step_{args.env_name}_{n}.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(result, indent=2))
    print(f"wrote {output}")


if __name__ == "__main__":
    run_main(main)
