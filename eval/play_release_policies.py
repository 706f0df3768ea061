"""Play the NeRD release's published Ant policies in our ground truth (issue 8's measurement).

Prints a Markdown table (reward against the paper's ground truth, episode lengths, per-term rewards, the largest
observation-mean shift against the checkpoint's running statistics) and writes the full report as JSON.

Example:
    python eval/play_release_policies.py --num-games 2048 --output out/release_policies.json
"""

import argparse
import json
from pathlib import Path

from envs.environment import CONTACT_FRICTION
from nerd.cli import add_common_args, check_output, resolve_device, run_main
from nerd.rl.release_policies import ANT_TASKS, format_report, play_release_policy, policy_path
from nerd.run_dir import write_text_atomic

DEFAULT_RELEASE_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "release_policies"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release-dir", default=str(DEFAULT_RELEASE_DIR),
                        help=f"folder of the published policies (default: {DEFAULT_RELEASE_DIR})")
    parser.add_argument("--tasks", nargs="+", choices=ANT_TASKS, default=list(ANT_TASKS), help="Ant tasks to play")
    parser.add_argument("--num-games", type=int, default=2048, help="episodes per policy (default: 2048)")
    parser.add_argument("--num-envs", type=int, default=2048, help="parallel envs (default: 2048)")
    parser.add_argument("--contact-friction", choices=CONTACT_FRICTION, default=None,
                        help="ground-contact friction law (default: the Ant's, coulomb)")
    parser.add_argument("--output", default=None, help="report JSON (a Markdown table is written beside it)")
    add_common_args(parser)
    args = parser.parse_args()

    device = resolve_device(args.device)
    if args.num_games < 1 or args.num_envs < 1:
        raise ValueError("--num-games and --num-envs must be positive")
    output = check_output(args.output, args.overwrite) if args.output else None
    if output is not None:
        check_output(output.with_suffix(".md"), args.overwrite)
    paths = {task: policy_path(args.release_dir, task) for task in args.tasks}
    for path in paths.values():
        if not path.is_file():
            raise FileNotFoundError(f"published policy not found: {path}")
    results = []
    for task, path in paths.items():
        results.append(play_release_policy(task, path, args.num_games, args.num_envs, device, args.seed,
                                           args.contact_friction))
        print(format_report(results[-1:]).splitlines()[-1], flush=True)
    table = format_report(results)
    print(table)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(output, json.dumps(results, indent=2))
        write_text_atomic(output.with_suffix(".md"), table + "\n")
        print(f"wrote {output} and {output.with_suffix('.md')}")


if __name__ == "__main__":
    run_main(main)
