"""Play the NeRD release's published Ant policies in our ground truth (issue 8's measurement).

Prints a Markdown table (reward against the paper's ground truth, episode lengths, per-term rewards, the largest
observation-mean shift against the checkpoint's running statistics) and writes the full report as JSON.
``python eval/play_release_policies.py`` runs it.

Example:
    python eval/play_release_policies.py --num-games 2048 --num-envs 2048 \
        --output out/release_policies.json
"""

import json
from pathlib import Path

from nerd.cli import add_common_args, check_json_output, make_parser, resolve_device, run_main
from nerd.envs.environment import CONTACT_FRICTION
from nerd.errors import UserError
from nerd.rl.release_policies import ANT_TASKS, format_report, play_release_policy, policy_path
from nerd.run_dir import write_text_atomic

DEFAULT_RELEASE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "release_policies"
"""``../shared/release_policies`` next to the repository root, where the project keeps the release's policies."""


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--release-dir", default=str(DEFAULT_RELEASE_DIR),
                        help="folder of the published policies")
    parser.add_argument("--tasks", nargs="+", choices=ANT_TASKS, default=list(ANT_TASKS), help="Ant tasks to play")
    parser.add_argument("--num-games", type=int, default=2048, help="episodes per policy")
    parser.add_argument("--num-envs", type=int, default=2048, help="parallel envs")
    parser.add_argument("--contact-friction", choices=CONTACT_FRICTION, default=None,
                        help="ground-contact friction law; unset: the Ant's own (coulomb)")
    parser.add_argument("--output", default=None, help="report JSON (a Markdown table is written beside it)")
    add_common_args(parser)
    args = parser.parse_args(argv)

    device = resolve_device(args.device)
    if args.num_games < 1 or args.num_envs < 1:
        raise UserError("--num-games and --num-envs must be positive")
    output = check_json_output(args.output, args.overwrite, ".md")[0] if args.output else None
    paths = {task: policy_path(args.release_dir, task) for task in args.tasks}
    for path in paths.values():
        if not path.is_file():
            raise UserError(f"published policy not found: {path}")
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


def cli() -> None:
    """Entry point: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
