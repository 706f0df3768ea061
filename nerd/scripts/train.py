"""Train a NeRD model on a generated dataset.

Installed as ``nerd-train``; ``python train/train.py`` runs the same.

Example:
    python train/train.py --cfg cfg/train/Cartpole/cpu.yaml --logdir runs/Cartpole_cpu
"""


from nerd.cli import add_common_args, add_overrides_arg, check_output, make_parser, resolve_device, run_main
from nerd.config import load_config
from nerd.run_dir import clear_run_dir
from nerd.training import RUN_DIR_ENTRIES, TrainConfig, train


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--cfg", required=True, help="training config (YAML)")
    parser.add_argument("--logdir", required=True, help="run directory (checkpoints, TensorBoard, config)")
    parser.add_argument("--checkpoint", default=None, help="resume this run, or fine-tune it on a new dataset")
    parser.add_argument("--train-dataset", default=None, help="overrides dataset.train")
    parser.add_argument("--valid-dataset", default=None, help="overrides dataset.valid")
    add_overrides_arg(parser, "num_epochs=2 model.transformer.n_layer=4")
    add_common_args(parser)
    args = parser.parse_args(argv)

    overrides = list(args.cfg_overrides)
    if args.train_dataset:
        overrides.append(f"dataset.train={args.train_dataset}")
    if args.valid_dataset:
        overrides.append(f"dataset.valid={args.valid_dataset}")
    cfg = load_config(args.cfg, TrainConfig, overrides)
    if args.checkpoint is None:
        check_output(f"{args.logdir}/nn/last.pt", args.overwrite)
        # A new run never mixes with an old one's checkpoints or TensorBoard events.
        clear_run_dir(args.logdir, RUN_DIR_ENTRIES)
    summary = train(cfg, args.logdir, device=resolve_device(args.device), seed=args.seed, checkpoint=args.checkpoint)
    print(f"best checkpoint by {summary['best_checkpoint_by']} ({summary['best_score']:.5g}) "
          f"-> {summary['best_checkpoint']}; "
          f"best validation loss {summary['best_valid_loss']:.5g} "
          f"({summary['train_seconds'] / 60:.1f} min, {summary['parameters']:,} parameters)")



def cli() -> None:
    """Console-script entry point ``nerd-train``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
