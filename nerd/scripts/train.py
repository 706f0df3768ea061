r"""Train a NeRD model on a generated dataset.

Installed as ``nerd-train``; ``python train/train.py`` runs the same.

Examples:
    python train/train.py --cfg cfg/train/Cartpole/cpu.yaml --logdir runs/Cartpole_cpu
    # continue that run where it stopped (its own config; overrides may change the schedule, not the model)
    python train/train.py --logdir runs/Cartpole_cpu --resume --cfg-overrides num_epochs=40
    # fine-tune it on other data: a new run starting from its weights and normalisation
    python train/train.py --cfg cfg/train/Cartpole/cpu.yaml --logdir runs/Cartpole_ft \
        --init-from runs/Cartpole_cpu/nn/best.pt --train-dataset data/Cartpole/new.hdf5
    # data-parallel on K processes (DistributedDataParallel; gloo on CPU, nccl with --device cuda, one GPU each)
    torchrun --nproc_per_node=4 train/train.py --cfg cfg/train/Cartpole/paper.yaml --logdir runs/Cartpole \
        --device cuda
"""

import argparse
from pathlib import Path

from nerd.cli import add_common_args, add_overrides_arg, make_parser, quiet_warp, resolve_device, run_main
from nerd.config import load_config
from nerd.distributed import init_distributed, shutdown
from nerd.errors import UserError
from nerd.run_dir import check_run_dir


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--cfg", default=None, help="training config (YAML); with --resume, default: the run's own")
    parser.add_argument("--logdir", required=True, help="run directory (checkpoints, TensorBoard, config)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --logdir from its nn/last.pt (optimiser, epoch, best.pt)")
    parser.add_argument("--init-from", default=None, metavar="CHECKPOINT",
                        help="start a new run from this checkpoint's weights and normalisation (fine-tuning)")
    parser.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)  # removed: a clear error below
    parser.add_argument("--train-dataset", default=None, help="overrides dataset.train")
    parser.add_argument("--valid-dataset", default=None, help="overrides dataset.valid")
    add_overrides_arg(parser, "num_epochs=2 model.transformer.n_layer=4")
    add_common_args(parser, seed_default=None)
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed (default: 0 for a new run, the run's own with --resume)")
    args = parser.parse_args(argv)

    if args.checkpoint is not None:
        raise UserError("--checkpoint is gone: use --resume to continue the run in --logdir, or --init-from "
                        "CHECKPOINT to start a new run from a model's weights")
    if args.resume and args.init_from:
        raise UserError("--resume continues the run in --logdir, --init-from starts a new one: pick one")
    if args.resume and args.overwrite:
        raise UserError("--resume continues the run in --logdir, --overwrite would replace it: pick one")
    cfg_path = args.cfg
    if cfg_path is None:
        if not args.resume:
            raise UserError("--cfg is required (only --resume can take the run's own config)")
        cfg_path = Path(args.logdir) / "config.yaml"

    # The engine is imported after the checks above, so that --help and input errors come at once.
    quiet_warp()
    from nerd.training import RUN_DIR_ENTRIES, TrainConfig, train

    rank, device = init_distributed(resolve_device(args.device))
    if not args.resume and rank.is_main:
        check_run_dir(args.logdir, RUN_DIR_ENTRIES, args.overwrite)
    overrides = list(args.cfg_overrides)
    if args.train_dataset:
        overrides.append(f"dataset.train={args.train_dataset}")
    if args.valid_dataset:
        overrides.append(f"dataset.valid={args.valid_dataset}")
    cfg = load_config(cfg_path, TrainConfig, overrides)
    try:
        summary = train(cfg, args.logdir, device=device, seed=args.seed, resume=args.resume,
                        init_from=args.init_from, overwrite=args.overwrite)
    except BaseException:
        shutdown(completed=False)
        raise
    shutdown()
    if not rank.is_main:
        return
    print(f"best checkpoint by {summary['best_checkpoint_by']}: {summary['best_score']:.5g}, the "
          f"{summary['best_score_meaning']} (lower is better) -> {summary['best_checkpoint']}\n"
          f"best validation loss {summary['best_valid_loss']:.5g} "
          f"({summary['train_seconds'] / 60:.1f} min, {summary['parameters']:,} parameters)")


def cli() -> None:
    """Console-script entry point ``nerd-train``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
