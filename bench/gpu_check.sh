#!/usr/bin/env bash
# One call on a GPU machine, from the repository root: the user-facing commands with --device cuda, end to end,
# and the neural step's throughput there. Phases, each under its own time limit, in order of what they tell:
#   1. bench/bench_rl.py: env-steps/s of ground truth and NeRD for the Cartpole and the Ant at N = 64 ... 8192 and
#      for the other robots at N = 2048, with the FLOP floor from an 8192^3 float32 matmul;
#   2. passive motion of the shipped Cartpole (H=1000) and Ant (H=500) models, 2048 rollouts, seed 500, as in the
#      README (a check that CUDA gives the CPU's numbers, within float differences);
#   3. the shipped Ant run policy's batch evaluation (cfg/eval/ant_run.yaml), both simulators, 2048 episodes;
#   4. a short rl-games PPO run in NeRD (Cartpole swing-up, 20 epochs) and dataset generation (Ant, 200 k transitions);
#   5. the tests that take a device (pytest -k cuda).
# Everything goes to $OUT (default outputs/gpu_check): gpu_check.log, and one archive of the JSON, PNG and logs.
# Variables: OUT, DEV (cuda), DEADLINE (seconds after which the remaining phases are skipped; 420), PY (python3).
# A dry run on the CPU with small sizes: DEV=cpu QUICK=1 bash bench/gpu_check.sh
set -u
OUT=${OUT:-outputs/gpu_check}
DEV=${DEV:-cuda}
DEADLINE=${DEADLINE:-420}
PY=${PY:-python3}
QUICK=${QUICK:-0}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

if [ "$QUICK" = 1 ]; then
    big="--quick --num-envs 16 64"; small="--quick --num-envs 16"; sec=0.3; matmul=512
    envs=16; rollouts=16; h_cart=20; h_ant=10; games=4; epochs=2; transitions=2000
else
    big="--num-envs 64 512 2048 8192"; small="--num-envs 2048"; sec=1; matmul=8192
    envs=2048; rollouts=2048; h_cart=1000; h_ant=500; games=2048; epochs=20; transitions=200000
fi

# phase NAME LIMIT COMMAND...: runs COMMAND with its output in $W/NAME.log unless the deadline has passed
phase() {
    local name=$1 limit=$2; shift 2
    local left=$((DEADLINE - SECONDS))
    if [ $left -le 10 ]; then echo "[$name] skipped: ${SECONDS}s gone"; return; fi
    [ $limit -gt $left ] && limit=$left
    local start=$SECONDS
    timeout "$limit" "$@" > "$W/$name.log" 2>&1
    local rc=$?
    echo "[$name] rc=$rc in $((SECONDS - start))s (limit ${limit}s)"
    tr '\r' '\n' < "$W/$name.log" | grep -v -E "it/s|s/it" | tail -n 14
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    $PY -c "import torch, warp, newton; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'| warp', warp.__version__, '| newton', newton.__version__)"

    phase rl_cart_ant 170 $PY bench/bench_rl.py --device "$DEV" --robots Cartpole Ant $big --seconds $sec --repeats 3 \
        --matmul-size $matmul --output "$W/rl_cartpole_ant.json"
    phase eval_cartpole 60 $PY eval/eval_passive_motion.py --env-name Cartpole --env-mode neural \
        --model-path pretrained_models/NeRD_models/Cartpole/model.pt --num-envs $envs --num-rollouts $rollouts \
        --rollout-horizon $h_cart --seed 500 --device "$DEV" --output "$W/cartpole_passive.json"
    phase eval_ant 60 $PY eval/eval_passive_motion.py --env-name Ant --env-mode neural \
        --model-path pretrained_models/NeRD_models/Ant/model.pt --num-envs $envs --num-rollouts $rollouts \
        --rollout-horizon $h_ant --seed 500 --device "$DEV" --output "$W/ant_passive.json"
    phase ant_run_batch 90 $PY eval/batch_eval_policy.py --eval-cfg cfg/eval/ant_run.yaml --device "$DEV" \
        --output "$W/ant_run_batch.json" --cfg-overrides num_games=$games num_envs=$envs
    phase rl_others 90 $PY bench/bench_rl.py --device "$DEV" --robots PendulumWithContact Franka Anymal CubeToss \
        $small --seconds $sec --repeats 3 --matmul-size $matmul --output "$W/rl_others.json"
    phase ppo_cartpole 60 $PY eval/run_rl.py --rl-cfg cfg/rl/Cartpole/swingup.yaml --env-mode neural \
        --nerd-model-path pretrained_models/NeRD_models/Cartpole/model.pt --max-epochs $epochs --seed 0 \
        --device "$DEV" --logdir "$W/ppo_cartpole"
    phase generate_ant 60 $PY generate/generate_dataset.py --env-name Ant --num-transitions $transitions \
        --trajectory-length 100 --num-envs $envs --device "$DEV" --dataset-dir "$W/data" --dataset-name ant.hdf5
    phase pytest_cuda 60 $PY -m pytest -q -x -k "$DEV" -p no:cacheprovider tests
    echo "done at ${SECONDS}s"
} 2>&1 | tee "$OUT/gpu_check.log"

rm -rf "$W/data" "$W"/ppo_cartpole/nn
tar -czf "$OUT/gpu_check.tar.gz" -C "$W" . && rm -rf "$W"
ls -la "$OUT"
