#!/usr/bin/env bash
# One call on a lent GPU machine, from the repository root: the training step's throughput on CUDA, then trainings
# of one robot's NeRD model (ENV) side by side on the one GPU (MODELS), for a wall-clock budget each:
#   paper  the release's architecture (cfg/train/$ENV/paper.yaml) from scratch
#   small  the CPU-sized model (cfg/train/$ENV/cpu.yaml) trained on from INIT's weights (the shipped Cartpole model's
#          GPU steps were made this way: pretrained_models/NeRD_models/Cartpole/README.md), or from scratch (INIT=none)
# All with the linear skip path and the learning rate annealed to LR_END. best.pt is chosen by the per-epoch rollout
# check (the robot's env reset, CHECK_ENVS rollouts x CHECK_H steps) where Newton imports, else by the validation
# loss: Warp's wheel is more than one call carries, so Newton is there only when it was carried in parts beforehand
# (docs/results.md, "The CUDA path"). Evaluate the checkpoints afterwards with eval/eval_passive_motion.py.
#
# Uses data/$ENV/{train,valid}.hdf5 (the "How it was made" commands of pretrained_models/NeRD_models/$ENV/README.md);
# where they are missing and Newton is installed, it generates them first on $DEV with those commands (TRANSITIONS
# for train). The Ant's 1 M transitions (750 MB) are far more than a call carries, so on a GPU machine they are made there.
# Variables:
#   ENV       Cartpole or Ant (Cartpole)
#   OUT       results (outputs/gpu)
#   BUDGET    minutes of optimiser steps per training (6)
#   DEADLINE  seconds from the start after which the trainings are stopped, keeping their last epoch's checkpoints (560)
#   DEV, PY   device (cuda) and interpreter (python3)
#   MODELS    which trainings: "paper small" side by side, or one of them alone; "small@1e-4 small@3e-5" trains the
#             small model twice, side by side, from those starting learning rates ("paper small")
#   SMALL_LR  the small run's starting learning rate where MODELS names none (3e-4)
#   LR_END    (1e-5); WARMUP: lr_warmup, the share of the budget over which the rate first rises from 0 (0)
#   BATCH     windows per optimiser step (2048); EXTRA: more --cfg-overrides for every training (none)
#   BENCH     1 runs the throughput step first; 0 leaves the whole deadline to the trainings (1)
#   TRANSITIONS  training transitions generated where the data is missing (1000000)
#   INIT      the weights the small runs start from (pretrained_models/NeRD_models/$ENV/model.pt); none: from
#             scratch (a recipe with new inputs, e.g. EXTRA="joint_limit_inputs=true joint_limit_lookahead=true",
#             has to be learned from the start: docs/accuracy.md, "Error against windows"). Joint-limit inputs take
#             the robot's limits from its env, so from scratch they need Newton there; from INIT they are INIT's.
#             A from-scratch joint-limit run without Newton there starts from an untrained checkpoint made here:
#             train.py with the recipe and num_epochs=1 batches_per_epoch=1 lr_start=1.0e-12 lr_end=1.0e-12
#             rollout_eval.num_envs=0 (its best.pt holds the fresh weights, the limits and the data's statistics)
#   TRAIN     the training data (data/$ENV/train.hdf5); another file, or a directory of parts, is used as it is, and generated only with TRAIN_GEN
#   TRAIN_GEN generation options for a missing TRAIN file, e.g. "--torque-scale log-uniform" (none: not generated)
#             Data over a call's 64 MiB travels packed (bench/pack_dataset.py) and is unpacked there first:
#             stop 37's command in docs/accuracy.md, "The look-ahead chain on an H100"
#   CHECK     rollout or valid_loss: what picks best.pt (rollout where Newton imports)
#   CHECK_ENVS, CHECK_H  the rollout check's size (Cartpole 256 x 1000, Ant 128 x 500: the evaluated horizons)
# A dry run on the CPU: DEV=cpu BUDGET=0.2 bash bench/gpu_train.sh   (ENV=Ant ... for the Ant)
set -u
ENV=${ENV:-Cartpole}
OUT=${OUT:-outputs/gpu}
BUDGET=${BUDGET:-6}
DEADLINE=${DEADLINE:-560}
DEV=${DEV:-cuda}
PY=${PY:-python3}
MODELS=${MODELS:-paper small}
SMALL_LR=${SMALL_LR:-3.0e-4}
LR_END=${LR_END:-1.0e-5}
TRANSITIONS=${TRANSITIONS:-1000000}
TRAIN=${TRAIN:-data/$ENV/train.hdf5}
INIT=${INIT:-pretrained_models/NeRD_models/$ENV/model.pt}
BATCH=${BATCH:-2048}
BENCH=${BENCH:-1}
WARMUP=${WARMUP:-0}
case $ENV in
    Cartpole) gen_envs=2048; CHECK_ENVS=${CHECK_ENVS:-256}; CHECK_H=${CHECK_H:-1000} ;;
    Ant) gen_envs=1000; CHECK_ENVS=${CHECK_ENVS:-128}; CHECK_H=${CHECK_H:-500} ;;
    *) echo "ENV must be Cartpole or Ant, not '$ENV'"; exit 2 ;;
esac
RUNS=$(mktemp -d)
name() { echo "${1//@/_lr}"; }  # a run's file names, without '@'
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    # 0. the data, where this machine has none (the release's sampler, or TRAIN_GEN's options for another TRAIN file)
    for part in "train $TRANSITIONS 0" "valid 100000 1"; do
        set -- $part
        file=data/$ENV/$1.hdf5; options=""
        if [ "$1" = train ] && [ "$TRAIN" != "$file" ]; then
            file=$TRAIN; options=${TRAIN_GEN:-}
            [ -n "$options" ] || continue
        fi
        [ -f "$file" ] && continue
        $PY generate/generate_dataset.py --env-name $ENV --num-transitions $2 --trajectory-length 100 \
            --num-envs $gen_envs --seed $3 --dataset-dir "$(dirname "$file")" --dataset-name "$(basename "$file")" \
            --device "$DEV" $options --overwrite > "$RUNS/generate_$1.log" 2>&1
        echo "generated $file rc=$? at ${SECONDS}s"
    done
    [ -e "$TRAIN" ] || echo "missing $TRAIN: carry it to this machine or give TRAIN_GEN"  # a file or a directory of parts

    # 1. the training step alone, with and without data loading, against the measured float32 matmul rate
    matmul=1024
    [ "$DEV" = cpu ] || matmul=8192
    [ "$BENCH" = 0 ] || timeout 150 $PY bench/bench_train.py --device "$DEV" --dataset data/$ENV/valid.hdf5 --repeats 3 \
        --min-seconds 0.5 --matmul-size $matmul --batch-sizes 512 2048 \
        --cfg cfg/train/$ENV/cpu.yaml cfg/train/$ENV/paper.yaml --output "$OUT/bench_train.json"
    [ "$BENCH" = 0 ] || echo "bench_train rc=$?"

    # 2. the trainings at once, time-sliced on the one GPU (in stop 22 each ran at about half its speed alone)
    if [ -z "${CHECK:-}" ]; then
        CHECK=valid_loss; $PY -c "import newton" 2>/dev/null && CHECK=rollout
    fi
    check="rollout_eval.num_envs=0 best_checkpoint_by=valid_loss"
    [ "$CHECK" = rollout ] && check="rollout_eval.num_envs=$CHECK_ENVS rollout_eval.horizon=$CHECK_H best_checkpoint_by=rollout"
    echo "best.pt by $CHECK"
    common="num_epochs=100000 time_budget_minutes=$BUDGET time_budget_clock=wall model.linear_skip=true
            $check batch_size=$BATCH lr_end=$LR_END lr_warmup=$WARMUP dataset.train=$TRAIN ${EXTRA:-}"
    left=$((DEADLINE - SECONDS))
    runs=$MODELS
    if [ $left -le 30 ]; then
        echo "no time left for the trainings: ${SECONDS}s gone"; runs=""
    else
        echo "trainings ($MODELS) start at ${SECONDS}s, stopped at the latest after ${left}s"
    fi
    pids=""
    for run in $runs; do
        case $run in
            paper) args="--cfg cfg/train/$ENV/paper.yaml --cfg-overrides $common" ;;
            small|small@*)
                lr=${run#small@}; [ "$lr" = "$run" ] && lr=$SMALL_LR
                init="--init-from $INIT"; [ "$INIT" = none ] && init=""
                args="--cfg cfg/train/$ENV/cpu.yaml $init --cfg-overrides $common lr_start=$lr" ;;
            *) echo "unknown model '$run' in MODELS (paper, small)"; continue ;;
        esac
        timeout $left $PY train/train.py --logdir "$RUNS/$(name $run)" --device "$DEV" --seed 0 $args \
            > "$RUNS/$(name $run).log" 2>&1 &
        pids="$pids $!"
    done
    for pid in $pids; do wait $pid; echo "training (pid $pid) rc=$?"; done
    for run in $runs; do echo "== $run"; tr '\r' '\n' < "$RUNS/$(name $run).log" | grep -v "it/s" | tail -n 4; done
} 2>&1 | tee "$OUT/session.log"

for run in $MODELS; do
    for ckpt in best last; do
        cp "$RUNS/$(name $run)/nn/$ckpt.pt" "$OUT/$(name $run)_$ckpt.pt" 2>/dev/null || echo "no $ckpt.pt for $run"
    done
done
tar -czf "$OUT/runs_meta.tar.gz" -C "$RUNS" --exclude='*.pt' . && rm -rf "$RUNS"
ls -la "$OUT"
