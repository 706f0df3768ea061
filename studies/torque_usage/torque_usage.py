r"""How hard policies push against how hard the training data pushed: joint torques and joint speeds side by side.

A NeRD model is only trusted where its data went. A policy trained in NeRD that spends its time at torques the data
rarely held is acting where the model extrapolates. This script plays each policy in the ground truth (its RL
config's task, deterministic actions) and records the joint torques the simulator applied (N·m), reads the torques
of each HDF5 dataset, and reports for each source the mean |torque| and the share of torques above 50 % and 90 % of
the reference limit (per joint: the largest |torque| in the first dataset, or ``--torque-limit``), and how often a
joint's torque changes sign from one frame to the next (white noise: half the frames; a gait: a few per period).
Per joint it also reports the mean |torque| and the mean |joint speed| (the actuated joints' velocities): two
policies that score alike may move different joints, and a model knows only the motions its data holds.

Writes a JSON and a Markdown table beside it.

Example (the numbers in docs/notebook/results.md, Ant run):
    python studies/torque_usage/torque_usage.py --rl-cfg cfg/rl/Ant/run_nerd_cpu.yaml \
        --checkpoints runs/rl/ant_run_neural_full/nn/last.pth runs/rl/ant_run_neural_logu/nn/last.pth \
        --datasets data/Ant/train.hdf5 data/Ant_logu/train.hdf5 \
        --output studies/torque_usage/results/torque_usage_ant_run.json
"""

from pathlib import Path

import torch
from tqdm import tqdm

from nerd.cli import (
    add_common_args,
    check_report_outputs,
    make_parser,
    quiet_warp,
    resolve_device,
    run_main,
    write_report,
)
from nerd.datasets.hdf5 import load_trajectories
from nerd.errors import UserError
from nerd.rl.config import RLConfig, load_rl_config, with_num_envs
from nerd.rl.policy import load_policy
from nerd.rl.vec_env import NeRDVecEnv, make_vec_env

THRESHOLDS = (0.5, 0.9)


def usage_stats(torques: torch.Tensor, limit: torch.Tensor) -> dict[str, float]:
    """Mean |torque| / limit, the share of entries above each of :data:`THRESHOLDS` x limit, and the share of
    frames on which a torque's sign differs from the previous frame's (zero counts as a sign of its own); torques
    (frames, sequences, A), time first."""
    ratio = torques.abs() / limit
    stats = {"mean_abs_over_limit": float(ratio.mean())}
    for t in THRESHOLDS:
        stats[f"share_above_{t}"] = float((ratio > t).double().mean())
    sign = torques.sign()
    stats["sign_change_rate"] = float((sign[1:] != sign[:-1]).double().mean())
    return stats


def per_joint(torques: torch.Tensor, speeds: torch.Tensor) -> dict[str, list[float]]:
    """Mean |torque| and mean |joint speed| of each joint, over frames and sequences; (frames, sequences, A)."""
    return {"mean_abs_torque": torques.abs().mean(dim=(0, 1)).tolist(),
            "mean_abs_joint_speed": speeds.abs().mean(dim=(0, 1)).tolist()}


def actuated_speeds(states: torch.Tensor, num_actuated: int) -> torch.Tensor:
    """The actuated joints' velocities in states (..., dof_q + dof_qd): the last ``num_actuated`` entries of
    ``joint_qd`` (a free base's six velocities, when there is one, come first)."""
    return states[..., -num_actuated:]


def dataset_signals(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Every joint torque of an HDF5 dataset and the actuated joints' speeds of the states they act on, each
    (frames, trajectories, A); a missing or damaged file is a DatasetError."""
    data = load_trajectories(path, ("joint_acts", "states"))
    torques = torch.from_numpy(data["joint_acts"]).transpose(0, 1).double()
    states = torch.from_numpy(data["states"]).transpose(0, 1).double()
    return torques, actuated_speeds(states, torques.shape[-1])


@torch.no_grad()
def policy_signals(cfg: RLConfig, venv: NeRDVecEnv, checkpoint: str, steps: int, seed: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint torques the ground truth ``venv`` applied while ``checkpoint`` played ``steps`` steps from resets
    drawn at ``seed``, and the actuated joints' speeds they led to (of each step's last frame, for robots that hold
    an action for several frames), each (steps, envs, A)."""
    policy = load_policy(cfg, checkpoint, venv.get_env_info(), str(venv.device))
    venv.seed(seed)  # every policy starts from the same initial states
    obs = venv.reset()
    policy.reset()
    torques, speeds = [], []
    for _ in tqdm(range(steps), desc=Path(checkpoint).name, leave=False):
        obs, _, _, _ = venv.step(policy(obs))
        torques.append(venv.nenv.joint_acts.double().cpu())
        speeds.append(actuated_speeds(venv.nenv.get_states().double().cpu(), torques[-1].shape[-1]))
    return torch.stack(torques), torch.stack(speeds)


def format_table(result: dict) -> str:
    cols = ["mean_abs_over_limit"] + [f"share_above_{t}" for t in THRESHOLDS] + ["sign_change_rate"]
    lines = [f"Joint-torque usage, relative to the per-joint limit {result['limit_source']}",
             "", "| source | mean abs / limit | " + " | ".join(f"share > {t} limit" for t in THRESHOLDS)
             + " | sign changes / frame |",
             "|---|" + "---|" * len(cols)]
    for row in result["rows"]:
        lines.append(f"| {row['source']} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |")
    for key, title in (("mean_abs_torque", "Mean |torque| of each joint (N·m; N for a slider)"),
                       ("mean_abs_joint_speed", "Mean |joint speed| of each joint (rad/s; m/s for a slider)")):
        width = len(result["rows"][0][key]) if result["rows"] else 0
        lines += ["", title, "", "| source | " + " | ".join(f"joint {j}" for j in range(width)) + " |",
                  "|---|" + "---|" * width]
        lines += [f"| {row['source']} | " + " | ".join(f"{x:.2f}" for x in row[key]) + " |" for row in result["rows"]]
    return "\n".join(lines)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--rl-cfg", required=True, help="RL config of the policies (network and task)")
    parser.add_argument("--checkpoints", nargs="*", default=[], help="rl-games policies to play in the ground truth")
    parser.add_argument("--datasets", nargs="*", default=[], help="HDF5 datasets whose torques to compare")
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=500, help="steps each policy plays (episodes reset inside)")
    parser.add_argument("--torque-limit", type=float, default=None,
                        help="reference |torque| for every joint (default: per joint, the first dataset's maximum)")
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) goes beside it")
    add_common_args(parser, seed_default=500)
    args = parser.parse_args()
    if args.torque_limit is None and not args.datasets:
        raise UserError("give --datasets or --torque-limit: the torques are reported relative to a limit")
    output, _ = check_report_outputs(args.output, args.overwrite, plot=False)
    device = resolve_device(args.device)
    quiet_warp()
    sources = {str(p): dataset_signals(p) for p in args.datasets}
    if args.torque_limit is not None:
        limit, limit_source = torch.tensor(args.torque_limit, dtype=torch.float64), f"{args.torque_limit} (given)"
    else:
        limit = next(iter(sources.values()))[0].abs().amax(dim=(0, 1)).clamp(min=1e-12)
        limit_source = f"(the largest |torque| of {args.datasets[0]}: {[round(x, 3) for x in limit.tolist()]})"
    if args.checkpoints:
        cfg = with_num_envs(load_rl_config(args.rl_cfg, ["env.env_mode=ground-truth"]), args.num_envs)
        venv = make_vec_env(cfg.env, device=device, seed=args.seed)
        for ckpt in args.checkpoints:
            sources[f"{ckpt} (ground truth)"] = policy_signals(cfg, venv, ckpt, args.steps, args.seed)
    for name, (torques, _) in sources.items():
        if torques.shape[-1] != limit.numel() and limit.numel() != 1:
            raise UserError(f"{name}: {torques.shape[-1]} joint torques, the limit has {limit.numel()}")
    result = {"rl_cfg": args.rl_cfg, "num_envs": args.num_envs, "steps": args.steps, "seed": args.seed,
              "limit": limit.tolist(), "limit_source": limit_source,
              "rows": [{"source": name, **usage_stats(t, limit), **per_joint(t, v)}
                       for name, (t, v) in sources.items()]}
    write_report(output, result, format_table(result))


if __name__ == "__main__":
    run_main(main)
