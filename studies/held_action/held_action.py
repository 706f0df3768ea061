r"""Where a model departs from the ground truth when one joint's action is held, as a reach or a stride holds it.

Random-torque data shows a model short, jittery motions; a policy holds an action for tens of steps and swings a
joint far. This script starts every env from the task's reset (the RL config's task, the same initial states in
every simulator), holds the action +1, then -1, on one actuated joint at a time (0 on the others) for ``--steps``
RL steps, in the ground truth and in each NeRD model, and reports per held action:

- the held joint's displacement after the last step in each simulator (rad; m for a slider), and
- each model's error against the ground truth after half and after all the steps: the end-effector distance (m)
  for robots that have one (the Franka), else the mean |joint-position error| over the actuated joints.

Writes a JSON and a Markdown table beside it.

Example (the numbers in studies/held_action/README.md, the Franka's task-start model):
    python studies/held_action/held_action.py --rl-cfg cfg/rl/Franka/reach_position_cpu.yaml \
        --nerd-model-path pretrained_models/NeRD_models/Franka/task_start/model.pt \
        --output studies/held_action/results/held_action_franka_position.json
"""

from __future__ import annotations

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
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.config import load_rl_config, with_num_envs
from nerd.rl.vec_env import NeRDVecEnv, make_vec_env


@torch.no_grad()
def held_rollout(venv: NeRDVecEnv, action: torch.Tensor, steps: int, seed: int) -> torch.Tensor:
    """The actuated joints' positions at a task reset drawn at ``seed`` and after each of ``steps`` RL steps holding
    ``action`` (A,) in every env; (steps + 1, envs, A)."""
    if steps > venv.episode_length:
        raise UserError(f"--steps {steps} is longer than the task's episode ({venv.episode_length} steps)")
    venv.seed(seed)
    venv.reset()
    held = action.to(venv.device).expand(venv.num_envs, -1).clone()
    positions = [actuated_positions(venv)]
    for _ in range(steps):
        venv.step(held)
        positions.append(actuated_positions(venv))
    return torch.stack(positions).double().cpu()


def actuated_positions(venv: NeRDVecEnv) -> torch.Tensor:
    """The actuated joints' positions (envs, A): ``joint_q`` without a free base's seven coordinates."""
    env = venv.nenv.env
    return venv.nenv.get_states()[:, env.dof_q - len(env.act_dof_indices):env.dof_q]


def departure(venv: NeRDVecEnv, truth: torch.Tensor, model: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Per step, the model's mean error against the ground truth over envs, from the actuated joints' positions
    (steps, envs, A) of both: the end-effector distance for a fixed-base robot that has an end effector, else the
    mean |joint-position error|; returns (steps,) and the metric's name."""
    env = venv.nenv.env
    if hasattr(env, "end_effector_position") and truth.shape[-1] == env.dof_q:
        ee = env.end_effector_position  # reads the joint positions, the first dof_q entries of a state
        return (ee(truth) - ee(model)).norm(dim=-1).mean(dim=1), "end-effector error [m]"
    return (truth - model).abs().mean(dim=(1, 2)), "mean |joint-position error| [rad]"


def format_table(result: dict) -> str:
    half, steps = result["steps"] // 2, result["steps"]
    lines = [f"Held actions from the task's reset ({result['rl_cfg']}, {result['num_envs']} envs, seed "
             f"{result['seed']}); the held joint's displacement after {steps} steps, and each model's "
             f"{result['metric']} after {half} / {steps} steps", "",
             "| held action | ground truth: displacement | "
             + " | ".join(f"model {m}: displacement | model {m}: error" for m in range(len(result["models"])))
             + " |", "|---|---|" + "---|---|" * len(result["models"])]
    for row in result["rows"]:
        cells = [f"joint {row['joint']} {row['action']:+.0f}", f"{row['gt_displacement']:+.3f}"]
        for m in row["models"]:
            cells += [f"{m['displacement']:+.3f}", f"{m['error_half']:.3f} / {m['error_end']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Models: " + "; ".join(f"{m}: {path}" for m, path in enumerate(result["models"]))]
    return "\n".join(lines)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--rl-cfg", required=True, help="RL config: robot, control mode and task (its reset)")
    parser.add_argument("--nerd-model-path", nargs="+", required=True, help="NeRD model(s) to compare")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32, help="RL steps each action is held")
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) goes beside it")
    add_common_args(parser, seed_default=3)
    args = parser.parse_args()
    if args.steps < 2:
        raise UserError(f"--steps must be at least 2, got {args.steps}")
    output, _ = check_report_outputs(args.output, args.overwrite, plot=False)
    device = resolve_device(args.device)
    quiet_warp()
    cfg = with_num_envs(load_rl_config(args.rl_cfg), args.num_envs)
    simulators = [(GROUND_TRUTH, None)] + [(NEURAL, path) for path in args.nerd_model_path]
    runs = []
    for mode, path in simulators:
        env_cfg = cfg.env
        env_cfg.env_mode, env_cfg.nerd_model_path = mode, path
        venv = make_vec_env(env_cfg, device=device, seed=args.seed)
        num_actuated = venv.nenv.action_dim
        if num_actuated != len(venv.nenv.env.act_dof_indices):
            raise UserError(f"{cfg.env.robot}: {num_actuated} actions for {len(venv.nenv.env.act_dof_indices)} "
                            "actuated joints; held actions need one action per actuated joint")
        actions = [(j, sign) for j in range(num_actuated) for sign in (1.0, -1.0)]
        rollouts = []
        for j, sign in tqdm(actions, desc=path or GROUND_TRUTH, leave=False):
            action = torch.zeros(num_actuated)
            action[j] = sign
            rollouts.append(held_rollout(venv, action, args.steps, args.seed))
        runs.append(rollouts)
    rows = []
    for i, (j, sign) in enumerate(actions):
        truth = runs[0][i]
        row = {"joint": j, "action": sign, "gt_displacement": float((truth[-1, :, j] - truth[0, :, j]).mean()),
               "models": []}
        for rollouts in runs[1:]:
            model = rollouts[i]
            if not torch.equal(model[0], truth[0]):
                raise UserError("the simulators started from different states; the task reset must be seeded")
            error, metric = departure(venv, truth[1:], model[1:])
            row["models"].append({"displacement": float((model[-1, :, j] - model[0, :, j]).mean()),
                                  "error_half": float(error[args.steps // 2 - 1]), "error_end": float(error[-1]),
                                  "error_per_step": error.tolist()})
        rows.append(row)
    result = {"rl_cfg": args.rl_cfg, "num_envs": args.num_envs, "steps": args.steps, "seed": args.seed,
              "metric": metric, "models": list(args.nerd_model_path), "rows": rows}
    write_report(output, result, format_table(result))


if __name__ == "__main__":
    run_main(main)
