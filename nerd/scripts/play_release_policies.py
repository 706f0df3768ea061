r"""Play the NeRD release's published policies (Ant, ANYmal) in our ground truth.

Prints a Markdown table (reward against the paper's ground truth, episode lengths, per-term rewards, the largest
observation-mean shift against the checkpoint's running statistics) and writes the full report as JSON.
``python eval/play_release_policies.py`` runs it.

Example:
    python eval/play_release_policies.py --release-dir release_policies --num-games 2048 --num-envs 2048 \
        --output outputs/release_policies.json
    python eval/play_release_policies.py --release-dir release_policies --robot Anymal --robot-variant release \
        --num-games 2048 --num-envs 2048 --output outputs/release_policies_anymal.json
"""

import json

from nerd.cli import (
    add_common_args,
    add_robot_variant_arg,
    check_json_output,
    make_parser,
    quiet_warp,
    resolve_device,
    run_main,
)
from nerd.errors import UserError
from nerd.modes import CONTACT_FRICTION
from nerd.rl.release_policies import PAPER_GROUND_TRUTH, ROBOTS, format_report, play_release_policy, policy_path
from nerd.run_dir import write_text_atomic


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--release-dir", required=True,
                        help="folder of the published policies, one checkpoint per task as "
                             "<dir>/<Robot>/<task>/<Robot>PPO.pth (one seed per task, e.g. the NeRD release's "
                             "pretrained_models/RL_policies/<Robot>/<task>/1/<Robot>PPO.pth)")
    parser.add_argument("--robot", choices=ROBOTS, default="Ant", help="robot whose policies to play")
    parser.add_argument("--tasks", nargs="+", default=None,
                        help="tasks to play (default: all of the robot's: " + "; ".join(
                            f"{robot} {', '.join(tasks)}" for robot, tasks in PAPER_GROUND_TRUTH.items()) + ")")
    parser.add_argument("--num-games", type=int, default=2048, help="episodes per policy")
    parser.add_argument("--num-envs", type=int, default=2048, help="parallel envs")
    parser.add_argument("--contact-friction", choices=CONTACT_FRICTION, default=None,
                        help="ground-contact friction law; unset: the robot's own (coulomb)")
    parser.add_argument("--output", default=None, help="report JSON (a Markdown table is written beside it)")
    add_robot_variant_arg(parser)
    add_common_args(parser)
    args = parser.parse_args(argv)

    if args.num_games < 1 or args.num_envs < 1:
        raise UserError("--num-games and --num-envs must be positive")
    output = check_json_output(args.output, args.overwrite, ".md")[0] if args.output else None
    known = PAPER_GROUND_TRUTH[args.robot]
    tasks = args.tasks or list(known)
    for task in tasks:
        if task not in known:
            raise UserError(f"unknown {args.robot} task '{task}'; valid: {', '.join(known)}")
    paths = {task: policy_path(args.release_dir, task, args.robot) for task in tasks}
    for path in paths.values():
        if not path.is_file():
            raise UserError(f"published policy not found: {path}")
    device = resolve_device(args.device)
    quiet_warp()  # the engine loads in play_release_policy
    results = []
    for task, path in paths.items():
        results.append(play_release_policy(task, path, args.num_games, args.num_envs, device, args.seed,
                                           args.contact_friction, args.robot, args.robot_variant))
        print(format_report(results[-1:]).splitlines()[-1], flush=True)
    table = format_report(results)
    print(table)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, json.dumps(results, indent=2))
        write_text_atomic(output.with_suffix(".md"), table + "\n")
        print(f"wrote {output} and {output.with_suffix('.md')}")


def cli() -> None:
    """Entry point: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
