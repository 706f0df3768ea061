#!/usr/bin/env bash
# One call on a GPU machine, from the repository root: the user-facing commands with --device cuda, end to end,
# and the neural step's throughput there. Phases, each under its own time limit, in order of what they tell:
#   1. the tests that take a device (pytest -k cuda), first those of the captured neural frame: that the frame a
#      GPU records and replays (capture_frame) computes what the plain frame computes;
#   2. bench/bench_rl.py with the shipped policies acting (inference included) for the Cartpole, the Ant and the
#      ANYmal at N = 512, 2048, 8192: env-steps/s of the ground truth, of NeRD, and of NeRD with its frame
#      captured, with the FLOP floor from an 8192^3 float32 matmul;
#   3. PPO's training throughput (env-steps/s with the learner) for the Ant run: in NeRD with the captured frame,
#      in NeRD without it, in the ground truth (a few epochs each);
#   4. bench_rl for the other robots at N = 2048 (without a policy), captured beside plain, and for the Humanoid at
#      N = 512, 2048, 8192;
#   5. passive motion of the shipped Cartpole (H=1000) and Ant (H=500) models, 2048 rollouts, seed 500, as in the
#      README (a check that CUDA gives the CPU's numbers, within float differences), the Ant also captured;
#   6. the shipped Ant run policy's batch evaluation (cfg/eval/ant_run.yaml), both simulators, 2048 episodes;
#   7. a short PPO run in NeRD (Cartpole swing-up, 20 epochs) and dataset generation (Ant, 200 k transitions).
# At the end bench/gpu_targets.py prints the captured frame's targets from phases 2 and 3 (also targets.json).
# Everything goes to $OUT (default outputs/gpu_check): gpu_check.log, and one archive of the JSON, PNG and logs.
# Variables: OUT, DEV (cuda), DEADLINE (seconds after which the remaining phases are skipped; 540), PY (python3).
# A dry run on the CPU with small sizes: DEV=cpu QUICK=1 bash bench/gpu_check.sh
set -u
OUT=${OUT:-outputs/gpu_check}
DEV=${DEV:-cuda}
DEADLINE=${DEADLINE:-540}
PY=${PY:-python3}
QUICK=${QUICK:-0}
W=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

if [ "$QUICK" = 1 ]; then
    big="--quick --num-envs 16 64"; small="--quick --num-envs 16"; hum=$small; sec=0.3; matmul=512
    envs=16; rollouts=16; h_cart=20; h_ant=10; games=4; epochs=2; ppo_epochs=2; ppo_envs=16; transitions=2000
else
    big="--num-envs 512 2048 8192"; small="--num-envs 2048"; hum="--num-envs 512 2048 8192"; sec=1; matmul=8192
    envs=2048; rollouts=2048; h_cart=1000; h_ant=500; games=2048; epochs=20; ppo_epochs=10; ppo_envs=2048
    transitions=200000
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

    phase pytest_frame_graph 90 $PY -m pytest -q -x -k "$DEV" -p no:cacheprovider tests/nerd/test_frame_graph.py
    phase rl_policy 200 $PY bench/bench_rl.py --device "$DEV" --robots Cartpole Ant Anymal $big --policy \
        --capture-frame --seconds $sec --repeats 3 --matmul-size $matmul --output "$W/rl_policy.json"
    for run in "neural graph env.capture_nerd_frame=true" "neural plain env.capture_nerd_frame=false" \
               "ground-truth gt env.capture_nerd_frame=false"; do
        set -- $run
        phase "ppo_ant_$2" 60 $PY eval/run_rl.py --rl-cfg cfg/rl/Ant/run.yaml --env-mode "$1" \
            --nerd-model-path pretrained_models/NeRD_models/Ant/model.pt --num-envs $ppo_envs \
            --max-epochs $ppo_epochs --seed 0 --device "$DEV" --logdir "$W/ppo_ant_$2" --cfg-overrides "$3"
    done
    phase rl_others 90 $PY bench/bench_rl.py --device "$DEV" --robots PendulumWithContact Franka CubeToss $small \
        --capture-frame --seconds $sec --repeats 3 --matmul-size $matmul --output "$W/rl_others.json"
    phase rl_humanoid 90 $PY bench/bench_rl.py --device "$DEV" --robots Humanoid $hum --capture-frame \
        --seconds $sec --repeats 3 --matmul-size $matmul --output "$W/rl_humanoid.json"
    phase eval_cartpole 60 $PY eval/eval_passive_motion.py --env-name Cartpole --env-mode neural \
        --model-path pretrained_models/NeRD_models/Cartpole/model.pt --num-envs $envs --num-rollouts $rollouts \
        --rollout-horizon $h_cart --seed 500 --device "$DEV" --output "$W/cartpole_passive.json"
    phase eval_ant 60 $PY eval/eval_passive_motion.py --env-name Ant --env-mode neural \
        --model-path pretrained_models/NeRD_models/Ant/model.pt --num-envs $envs --num-rollouts $rollouts \
        --rollout-horizon $h_ant --seed 500 --device "$DEV" --output "$W/ant_passive.json"
    phase eval_ant_captured 60 $PY eval/eval_passive_motion.py --env-name Ant --env-mode neural --capture-frame \
        --model-path pretrained_models/NeRD_models/Ant/model.pt --num-envs $envs --num-rollouts $rollouts \
        --rollout-horizon $h_ant --seed 500 --device "$DEV" --output "$W/ant_passive_captured.json"
    phase ant_run_batch 90 $PY eval/batch_eval_policy.py --eval-cfg cfg/eval/ant_run.yaml --device "$DEV" \
        --output "$W/ant_run_batch.json" --cfg-overrides num_games=$games num_envs=$envs
    phase ppo_cartpole 60 $PY eval/run_rl.py --rl-cfg cfg/rl/Cartpole/swingup.yaml --env-mode neural \
        --nerd-model-path pretrained_models/NeRD_models/Cartpole/model.pt --max-epochs $epochs --seed 0 \
        --device "$DEV" --logdir "$W/ppo_cartpole"
    phase generate_ant 60 $PY generate/generate_dataset.py --env-name Ant --num-transitions $transitions \
        --trajectory-length 100 --num-envs $envs --device "$DEV" --dataset-dir "$W/data" --dataset-name ant.hdf5
    phase pytest_cuda 60 $PY -m pytest -q -x -k "$DEV" -p no:cacheprovider tests
    echo "done at ${SECONDS}s"
    $PY bench/gpu_targets.py "$W" --output "$OUT/targets.json"
} 2>&1 | tee "$OUT/gpu_check.log"

rm -rf "$W/data" "$W"/ppo_*/nn
tar -czf "$OUT/gpu_check.tar.gz" -C "$W" . && rm -rf "$W"
ls -la "$OUT"
