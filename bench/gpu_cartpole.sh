#!/usr/bin/env bash
# One call on a lent GPU machine, from the repository root: the training step's throughput on CUDA, then two
# Cartpole trainings side by side on the one GPU, for a wall-clock budget each:
#   paper  the release's architecture (cfg/train/Cartpole/paper.yaml, ~2.7 M parameters) from scratch
#   small  the shipped CPU-sized model (cfg/train/Cartpole/cpu.yaml) trained on from its weights (in stop 22 that
#          was stop 21's model; this run and a second one made today's, pretrained_models/NeRD_models/Cartpole/README.md)
# Both with batches of 2048 windows, the linear skip path, the learning rate annealed to 1e-5, best.pt by the
# validation loss: the per-epoch rollout check needs Newton, and Warp's wheel (~150 MB) is more than the device
# machine takes, so nothing here imports Newton. Evaluate the checkpoints afterwards with eval/eval_passive_motion.py.
#
# Needs data/Cartpole/{train,valid}.hdf5 (pretrained_models/NeRD_models/Cartpole/README.md, "How it was made").
# Variables: OUT (results; default outputs/gpu), BUDGET (minutes per training; 6), DEADLINE (seconds from the
# start after which the trainings are stopped, keeping their last epoch's checkpoints; 560), DEV (cuda), PY (python3).
# A dry run on the CPU: DEV=cpu BUDGET=0.2 bash bench/gpu_cartpole.sh
set -u
OUT=${OUT:-outputs/gpu}
BUDGET=${BUDGET:-6}
DEADLINE=${DEADLINE:-560}
DEV=${DEV:-cuda}
PY=${PY:-python3}
RUNS=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    # 1. the training step alone, with and without data loading, against the measured float32 matmul rate
    matmul=1024
    [ "$DEV" = cpu ] || matmul=8192
    timeout 150 $PY bench/bench_train.py --device "$DEV" --dataset data/Cartpole/valid.hdf5 --repeats 3 \
        --min-seconds 0.5 --matmul-size $matmul --batch-sizes 512 2048 \
        --cfg cfg/train/Cartpole/cpu.yaml cfg/train/Cartpole/paper.yaml --output "$OUT/bench_train.json"
    echo "bench_train rc=$?"

    # 2. two trainings at once, time-sliced on the one GPU (in stop 22 each ran at about half its speed alone)
    common="num_epochs=100000 time_budget_minutes=$BUDGET time_budget_clock=wall model.linear_skip=true
            rollout_eval.num_envs=0 best_checkpoint_by=valid_loss batch_size=2048 lr_end=1.0e-5"
    left=$((DEADLINE - SECONDS))
    echo "trainings start at ${SECONDS}s, stopped at the latest after ${left}s"
    timeout $left $PY train/train.py --cfg cfg/train/Cartpole/paper.yaml --logdir "$RUNS/paper" --device "$DEV" --seed 0 \
        --cfg-overrides $common > "$RUNS/paper.log" 2>&1 &
    paper=$!
    timeout $left $PY train/train.py --cfg cfg/train/Cartpole/cpu.yaml --logdir "$RUNS/small" --device "$DEV" --seed 0 \
        --init-from pretrained_models/NeRD_models/Cartpole/model.pt \
        --cfg-overrides $common lr_start=3.0e-4 > "$RUNS/small.log" 2>&1 &
    small=$!
    wait $paper; echo "paper rc=$?"
    wait $small; echo "small rc=$?"
    for run in paper small; do tr '\r' '\n' < "$RUNS/$run.log" | grep -v "it/s" | tail -n 4; done
} 2>&1 | tee "$OUT/session.log"

for run in paper small; do
    cp "$RUNS/$run/nn/best.pt" "$OUT/${run}_best.pt" 2>/dev/null || echo "no best.pt for $run"
done
tar -czf "$OUT/runs_meta.tar.gz" -C "$RUNS" --exclude='*.pt' . && rm -rf "$RUNS"
ls -la "$OUT"
