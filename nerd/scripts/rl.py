r"""Train a PPO policy (rl-games) in the neural or ground-truth simulator, or play a trained one back.

Installed as ``nerd-rl``; ``python eval/run_rl.py`` runs the same.

Examples:
    # train in NeRD (as in the paper, the policy sees only the neural simulator)
    python eval/run_rl.py --rl-cfg cfg/rl/Cartpole/swingup_cpu.yaml --env-mode neural \
        --nerd-model-path runs/Cartpole_cpu/nn/best.pt --seed 0 --logdir runs/rl/cartpole_neural_0
    # evaluate that policy in the ground truth: mean ± std episode reward and length over 2048 episodes (the
    # run's own config.yaml is found beside its checkpoint)
    python eval/run_rl.py --env-mode ground-truth \
        --playback runs/rl/cartpole_neural_0/nn/last.pth --num-games 2048 --num-envs 2048
    # watch one episode of it in the ground truth (blue) and in NeRD (orange), recorded off-screen
    python eval/run_rl.py --rl-cfg cfg/rl/Cartpole/swingup_cpu.yaml \
        --nerd-model-path runs/Cartpole_cpu/nn/best.pt --playback runs/rl/cartpole_neural_0/nn/last.pth \
        --video outputs/swingup.gif
    # continue a training run that was interrupted (it writes its full state every 10 epochs), with its own config
    python eval/run_rl.py --logdir runs/rl/cartpole_neural_0 --resume
"""

import json
import time
from pathlib import Path

from nerd.cli import (
    add_common_args,
    add_control_mode_arg,
    add_overrides_arg,
    add_robot_variant_arg,
    add_viewer_args,
    check_json_output,
    check_viewer_args,
    make_parser,
    quiet_warp,
    resolve_device,
    run_main,
    viewing_requested,
)
from nerd.distributed import rank_from_env
from nerd.errors import UserError
from nerd.modes import ENV_MODES
from nerd.rl.config import RUN_DIR_ENTRIES, load_rl_config, run_config_of, with_num_envs
from nerd.run_dir import check_run_dir, write_text_atomic


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--rl-cfg", default=None,
                        help="RL config, e.g. cfg/rl/Cartpole/swingup.yaml (with --playback, default: the "
                             "config.yaml of the checkpoint's run, beside the checkpoint or one folder up)")
    parser.add_argument("--env-mode", choices=ENV_MODES, default=None,
                        help="simulator (default: the config's env.env_mode)")
    parser.add_argument("--nerd-model-path", nargs="+", default=None,
                        help="NeRD checkpoint (neural mode); several step as their ensemble (mean prediction)")
    parser.add_argument("--nerd-mirror", action="store_true",
                        help="our option (Cartpole): each NeRD model also steps the robot's mirror image and the "
                             "two predictions are averaged (sets env.nerd_mirror)")
    parser.add_argument("--num-envs", type=int, default=None, help="parallel envs (default: the config's)")
    parser.add_argument("--max-epochs", type=int, default=None, help="PPO epochs (default: the config's)")
    parser.add_argument("--playback", default=None, metavar="CHECKPOINT", help="evaluate this rl-games checkpoint")
    parser.add_argument("--num-games", type=int, default=64, help="episodes to play back")
    parser.add_argument("--output", default=None, help="playback results JSON")
    parser.add_argument("--logdir", default=None, help="training run directory (default: runs/rl/<robot>__<task>__...)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the interrupted training in --logdir from its last full state (nn/resume.pth, "
                             "written every 10 epochs), with the run's own config.yaml and seed; --max-epochs may "
                             "extend it")
    parser.add_argument("--multi-gpu", action="store_true",
                        help="rl-games' multi-GPU PPO under torchrun (sets params.config.multi_gpu; needs --device "
                             "cuda; one GPU per rank)")
    add_robot_variant_arg(parser)
    add_control_mode_arg(parser)
    add_overrides_arg(parser, "params.config.mini_epochs=4")
    add_common_args(parser)
    add_viewer_args(parser)
    args = parser.parse_args(argv)

    if args.resume:
        resume_training(args)
        return
    if args.rl_cfg is None and args.playback is None:
        raise UserError("--rl-cfg is required to train (only --playback can find its run's config)")
    viewing = viewing_requested(args)
    if viewing:
        check_viewer_args(args)
        if args.playback is None:
            raise UserError("--viewer/--video show a trained policy: add --playback CHECKPOINT")
    output = None
    if args.playback is not None and not viewing and args.output:
        output = check_json_output(args.output, args.overwrite, None)[0]
    if args.playback is not None and not Path(args.playback).is_file():
        raise FileNotFoundError(f"policy checkpoint not found: {args.playback}")
    cfg = load_rl_config(args.rl_cfg or run_config_of(args.playback), args.cfg_overrides)
    if args.env_mode is not None:
        cfg.env.env_mode = args.env_mode
    if args.nerd_model_path is not None:
        paths = args.nerd_model_path
        cfg.env.nerd_model_path = paths[0] if len(paths) == 1 else paths
    if args.nerd_mirror:
        cfg.env.nerd_mirror = True
    if args.robot_variant is not None:
        cfg.env.robot_variant = args.robot_variant
    if args.control_mode is not None:
        cfg.env.control_mode = args.control_mode
    if args.multi_gpu:
        cfg.params["config"]["multi_gpu"] = True
    main_rank = not cfg.params["config"].get("multi_gpu") or rank_from_env().is_main
    if args.num_envs is not None and args.playback is None:
        cfg = with_num_envs(cfg, args.num_envs)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logdir = Path(args.logdir or f"runs/rl/{cfg.env.robot}__{cfg.env.task}__{cfg.env.env_mode}__{args.seed}__{stamp}")
    if args.playback is None and main_rank:
        check_run_dir(logdir, RUN_DIR_ENTRIES, args.overwrite)

    # The engine is imported after the checks above, so that --help and input errors come at once.
    device = resolve_device(args.device)
    quiet_warp()
    from nerd.rl.playback import format_playback, play_policy, show_policy
    from nerd.rl.train import train_policy

    if viewing:
        shown = show_policy(cfg, args.playback, device, args.seed, viewer=args.viewer, output_path=args.output_path,
                            video=args.video, video_size=args.video_size)
        print("episode reward: " + ", ".join(f"{k} {v:.1f}" for k, v in shown["episode_reward"].items())
              + f"; {shown['frames']} frames in {shown['seconds']:.1f} s"
              + (f"; wrote {shown['path']}" if shown["path"] else ""))
        return

    if args.playback is not None:
        result = play_policy(cfg, args.playback, args.num_games, device, args.seed, args.num_envs, progress=True)
        print(format_playback(result))
        if output:
            output.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(output, json.dumps(result, indent=2), overwrite=args.overwrite)
            print(f"wrote {output}")
        return

    summary = train_policy(cfg, logdir, device, args.seed, args.max_epochs, overwrite=args.overwrite)
    if main_rank:
        report_training(summary)


# What a resumed run takes from its own config.yaml; changing it mid-run would make another run.
CONFIG_OPTIONS = {"rl_cfg": "--rl-cfg", "cfg_overrides": "--cfg-overrides", "env_mode": "--env-mode",
                  "nerd_model_path": "--nerd-model-path", "nerd_mirror": "--nerd-mirror", "num_envs": "--num-envs",
                  "robot_variant": "--robot-variant", "control_mode": "--control-mode", "multi_gpu": "--multi-gpu"}


def resume_training(args) -> None:
    """``--resume``: continue the run in ``--logdir`` from the newest full state it left
    (:func:`nerd.rl.train.interrupted_run_state`; a finished run's ``last.pth`` with a larger ``--max-epochs``),
    with its recorded config and seed (:func:`nerd.rl.train.train_policy`'s ``resume``)."""
    if args.logdir is None:
        raise UserError("--resume continues the run in --logdir: name it")
    conflicting = [flag for key, flag in CONFIG_OPTIONS.items() if getattr(args, key, None)]
    conflicting += [flag for flag, given in (("--playback", args.playback), ("--overwrite", args.overwrite),
                                             ("--viewer/--video", viewing_requested(args))) if given]
    if conflicting:
        raise UserError(f"--resume continues the run in --logdir with its own config.yaml; drop "
                        f"{', '.join(conflicting)}")
    logdir = Path(args.logdir)
    if not (logdir / "config.yaml").is_file():
        raise UserError(f"nothing to resume: {logdir} holds no training run (no config.yaml)")
    recorded = load_rl_config(logdir / "config.yaml")
    device = resolve_device(args.device)
    quiet_warp()
    from nerd.rl.train import train_policy

    summary = train_policy(recorded, logdir, device, int(recorded.params.get("seed", 0)), args.max_epochs,
                           resume=True)
    report_training(summary)


def report_training(summary: dict) -> None:
    """Print a training run's final reward, divergence count and checkpoints."""
    final = summary["epochs"][-1] if summary["epochs"] else None
    diverged = summary["diverged_episodes"]
    print(f"trained in {summary['train_seconds']:.0f} s"
          + (f"; epoch {final['epoch']}: mean episode reward {final['mean_episode_reward']:.2f}" if final else "")
          + (f"; {diverged} of {summary['episodes']} episodes diverged" if diverged else "")
          + f"\nfinal policy: {summary['last_checkpoint']}"
          + (f"\nbest policy (by training reward): {summary['best_checkpoint']}" if summary["best_checkpoint"] else ""))


def cli() -> None:
    """Console-script entry point ``nerd-rl``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
