r"""Average the weights of fine-tunes of one NeRD model into one checkpoint (weight averaging).

Installed as ``nerd-average``; ``python train/average_checkpoints.py`` runs the same.

The inputs must be one model's checkpoints along one line of training: the same robot, model config, history
length and normalisation statistics (a run's checkpoints, or runs started from one model with ``--init-from``).
With ``--valid-dataset`` the one-step validation loss of every input and of the average is printed (the same
windows for all), so the average can be kept only where it is lower than every input's: the selection rule of
docs/notebook/accuracy.md, which looks at no rollout.

Examples:
    # a low-rate tail from a trained model (train.py --init-from runs/Cartpole_cpu/nn/best.pt ...), then its ends
    python train/average_checkpoints.py runs/Cartpole_cpu/nn/best.pt runs/Cartpole_tail/nn/best.pt \
        --output runs/Cartpole_tail/nn/averaged.pt --valid-dataset data/Cartpole/valid.hdf5
"""

from pathlib import Path

from nerd.cli import add_common_args, check_output, make_parser, quiet_warp, resolve_device, run_main
from nerd.errors import UserError


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("checkpoints", nargs="+", help="two or more checkpoints of one model")
    parser.add_argument("--output", required=True, help="the averaged checkpoint to write")
    parser.add_argument("--valid-dataset", default=None,
                        help="HDF5 dataset (file or directory) on which to compare the validation losses")
    parser.add_argument("--valid-batches", type=int, default=50, help="validation batches (the same for all)")
    parser.add_argument("--batch-size", type=int, default=2048, help="windows per validation batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the validation batches")
    add_common_args(parser, seed_default=None)
    args = parser.parse_args(argv)
    for flag, value in (("--valid-batches", args.valid_batches), ("--batch-size", args.batch_size)):
        if value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    output = check_output(args.output, args.overwrite)
    for path in args.checkpoints:
        if not Path(path).is_file():
            raise FileNotFoundError(f"checkpoint not found: {path}")

    quiet_warp()
    from nerd.checkpoint import average_checkpoints, load_checkpoint, save_checkpoint  # after the checks

    device = resolve_device(args.device)
    model, signature, payload = average_checkpoints(args.checkpoints, device)
    if args.valid_dataset is not None:
        # Imported here: averaging alone needs no dataset code.
        from nerd.datasets.windows import TrajectoryWindows
        from nerd.training import validation_loss

        data = TrajectoryWindows(args.valid_dataset, payload["history_length"], device,
                                 joint_limits=signature.joint_limits,
                                 joint_limit_lookahead=bool(signature.joint_limit_lookahead))
        data.signature.check_compatible(signature, what="validation dataset")
        losses = {path: validation_loss(load_checkpoint(path, device)[0], data, args.batch_size,
                                        args.valid_batches, args.seed) for path in args.checkpoints}
        losses["average"] = validation_loss(model, data, args.batch_size, args.valid_batches, args.seed)
        width = max(len(name) for name in losses)
        for name, loss in losses.items():
            print(f"{name:<{width}}  validation loss {loss:.6g}")
        best_input = min(losses[path] for path in args.checkpoints)
        verdict = "lower" if losses["average"] < best_input else "NOT lower"
        print(f"the average's validation loss is {verdict} than every input's ({losses['average']:.6g} vs "
              f"{best_input:.6g})")
        payload["extra"]["valid_loss"] = {"dataset": str(args.valid_dataset), **losses}
    save_checkpoint(output, model, signature, payload["config"], history_length=payload["history_length"],
                    epoch=payload["epoch"], extra=payload["extra"])
    print(f"wrote {output} (the mean of {len(args.checkpoints)} checkpoints)")


def cli() -> None:
    """Console-script entry point ``nerd-average``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
