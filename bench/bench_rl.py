r"""RL environment throughput against the FLOP floor: env-steps/s in neural and ground-truth mode.

One env-step = one frame of one env, including what an RL step does besides physics: the task's reward,
termination and observation, and the resets of finished envs (``NeRDVecEnv.step``). Robots without an RL task
(PendulumWithContact, CubeToss) are timed on ``NeuralEnvironment.step_with_joint_act`` with random torques instead
(the cube has no actuators, so none).
Policy inference is excluded (actions are random and drawn beforehand) unless ``--policy``: then the robots with a
shipped policy (:data:`POLICIES`) act with it, observations in, actions out, every step (rl-games' player, the
deterministic action). Ground truth is Featherstone with the
captured frame graph and no NeRD model attached. ``--capture-frame`` also times every neural model with its frame
recorded once as a CUDA graph and replayed (``NeuralEnvironment(capture_frame=True)``; on a CPU the same code runs
uncaptured), in the same alternation: the ``neural_graph`` columns.

Neural models: the shipped checkpoint where there is one (``pretrained_models/NeRD_models/<robot>/model.pt``),
otherwise a randomly initialised model of the robot's CPU training config (``cfg/train/<robot>/cpu.yaml``;
throughput does not depend on the weights). ``--model-path A B ...`` times your checkpoints of one robot instead,
side by side: one row per model, their samples alternating with the same ground-truth and matmul samples.

FLOP floor: the model's FLOPs per env-step (torch's FlopCounterMode on the integrator's per-step prediction:
matmuls and attention) and the machine's float32 matmul rate (``--matmul-size``, default 1024 x 1024; on a GPU
that size is launch-bound, so pass 8192 there), measured with the same torch thread
count (default 1) in samples that alternate with the ground-truth and neural samples of the same row, so that a
change of load on a shared machine hits all three alike. Floor = rate / FLOPs per env-step; "share" = neural
env-steps/s / floor. Each rate is the best of ``--repeats`` samples (median also stored).

Writes ``bench/results/rl.json`` (``rl_quick.json`` with ``--quick``) and prints a Markdown table.

Example:
    python bench/bench_rl.py            # every robot at N = 64, 512, 2048
    python bench/bench_rl.py --quick    # small sizes and tiny models, about a minute
    python bench/bench_rl.py --robots Anymal --output bench/results/rl_anymal.json   # one robot
    python bench/bench_rl.py --robots Cartpole --model-path runs/a/nn/best.pt runs/b/nn/best.pt \
        --output bench/results/rl_cartpole_heads.json   # two trained models, side by side
"""

import argparse
import json
import os
import platform
from pathlib import Path

import torch

from nerd.checkpoint import shipped_model_path
from nerd.cli import resolve_device, run_main
from nerd.config import load_config
from nerd.envs import make_env
from nerd.errors import UserError, first_line
from nerd.features import signature_of_env
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.models.transformer import TransformerConfig
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.perf import count_flops, matmul_rate, time_alternating
from nerd.rl.config import load_rl_config
from nerd.rl.policy import Policy, load_policy
from nerd.rl.tasks import make_task
from nerd.rl.vec_env import NeRDVecEnv
from nerd.run_dir import write_text_atomic
from nerd.training import TrainConfig

REPO = Path(__file__).resolve().parents[1]
ROBOTS = ("Cartpole", "PendulumWithContact", "Ant", "Anymal", "Franka", "CubeToss", "Humanoid")
TASKS = {"Cartpole": "swingup", "Ant": "run", "Anymal": "forward_walk", "Franka": "reach", "Humanoid": "run"}
"""The RL task timed per robot; a robot without one is timed on passive stepping with random torques."""
POLICIES = {"Cartpole": ("Cartpole/config.yaml", "Cartpole/seed0.pth"),
            "Ant": ("Ant/config.yaml", "Ant/run_neural_seed0.pth"),
            "Anymal": ("Anymal/forward_refined/config.yaml", "Anymal/forward_refined/forward_refined_seed0.pth")}
"""The shipped policy (RL config, checkpoint under ``pretrained_models/RL_policies/``) of each robot's timed task
that ``--policy`` plays."""
GRAPH = "neural_graph"
"""Results key of the neural step with ``capture_frame`` (``--capture-frame``)."""
SHIPPED = {name: path for name in ROBOTS if (path := shipped_model_path(name))}
"""The shipped NeRD model of each robot that has one; the others are timed with an untrained model."""
TINY_MODEL = ModelConfig(transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, head_hidden=[16]))


class PassiveStepper:
    """``step(torques)`` of a NeuralEnvironment, shaped like the vec env for the timing loop."""

    def __init__(self, nenv: NeuralEnvironment):
        self.nenv, self.num_envs, self.device = nenv, nenv.num_envs, nenv.torch_device
        self.action_dim = nenv.env.act_dim

    def reset(self) -> None:
        self.nenv.reset(generator=torch.Generator().manual_seed(0))

    def step(self, torques: torch.Tensor) -> None:
        self.nenv.step_with_joint_act(torques)


class PolicyStepper:
    """A vec env stepped by a policy (the given actions are ignored): what an RL step costs with inference."""

    def __init__(self, vec_env: NeRDVecEnv, act: Policy):
        self.vec_env, self.act = vec_env, act
        self.nenv, self.num_envs, self.device = vec_env.nenv, vec_env.num_envs, vec_env.device
        self.action_space = vec_env.action_space
        self.obs = vec_env.reset()

    def reset(self) -> None:
        self.obs = self.vec_env.reset()
        self.act.reset()

    def step(self, _actions: torch.Tensor) -> None:
        self.obs = self.vec_env.step(self.act(self.obs))[0]


def with_policy(stepper: object, robot: str, device: str) -> object:
    """``stepper`` played by the robot's shipped policy (:data:`POLICIES`)."""
    config, checkpoint = (REPO / "pretrained_models" / "RL_policies" / part for part in POLICIES[robot])
    cfg = load_rl_config(config)
    cfg.env.num_envs = stepper.num_envs
    return PolicyStepper(stepper, load_policy(cfg, checkpoint, stepper.get_env_info(), device))


def build_stepper(robot: str, num_envs: int, mode: str, quick: bool, device: str,
                  model_path: str | None = None, capture_frame: bool = False) -> tuple[object, str]:
    """The vec env (or passive stepper) of ``robot`` in ``mode`` and a description of its neural model
    (``model_path``: a checkpoint to time instead of the shipped model; ``capture_frame``: replay each neural frame
    as one CUDA graph, see :class:`NeuralEnvironment`)."""
    env = make_env(robot, num_envs, device=device)
    desc = ""
    if mode == GROUND_TRUTH:
        nenv = NeuralEnvironment(env, None, GROUND_TRUTH)
    elif model_path is not None:
        nenv = NeuralEnvironment.from_checkpoint(env, model_path, NEURAL, capture_frame=capture_frame)
        desc = str(model_path)
    elif not quick and robot in SHIPPED:
        nenv = NeuralEnvironment.from_checkpoint(env, SHIPPED[robot], NEURAL, capture_frame=capture_frame)
        desc = f"shipped {SHIPPED[robot].relative_to(REPO)}"
    else:
        sig = signature_of_env(env)
        # A robot without a CPU config of its own (Anymal) takes the Ant's, the other legged robot's.
        cfg_path = next(p for p in (f"cfg/train/{robot}/cpu.yaml", "cfg/train/Ant/cpu.yaml") if (REPO / p).is_file())
        cfg = TINY_MODEL if quick else load_config(REPO / cfg_path, TrainConfig).model
        torch.manual_seed(0)
        nenv = NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, cfg), NEURAL,
                                 capture_frame=capture_frame)
        t = cfg.transformer
        desc = f"random init, {t.n_layer}x{t.n_embd}" + (" (tiny)" if quick else f" ({cfg_path} size)")
    if robot not in TASKS:
        return PassiveStepper(nenv), desc
    return NeRDVecEnv(nenv, make_task(robot, TASKS[robot], num_envs, nenv.torch_device), seed=0), desc


def action_width(stepper) -> int:
    """Width of the actions (or torques) ``stepper.step`` takes."""
    return stepper.action_space.shape[0] if hasattr(stepper, "action_space") else stepper.action_dim


def recording_error(stepper) -> str | None:
    """Reset and step ``stepper`` a few times (a GPU records a captured frame at its first neural step): None if
    that worked, else the error's first line, so that a frame the GPU cannot record costs its column, not the run."""
    try:
        stepper.reset()
        for _ in range(3):
            stepper.step(torch.zeros(stepper.num_envs, action_width(stepper), device=stepper.device))
    except RuntimeError as err:
        return first_line(err)
    return None


def flops_per_env_step(stepper) -> float:
    """FLOPs of one neural step's prediction per env (matmuls and attention)."""
    integ = stepper.nenv.integrator
    with torch.inference_mode():
        return count_flops(integ.predict_targets) / integ.num_envs


@torch.no_grad()
def row_rates(steppers: dict[str, object], seconds: float, repeats: int, device: str,
              matmul_size: int = 1024) -> dict[str, dict[str, float]]:
    """Env-steps/s of each stepper and the matmul rate [FLOP/s], their samples in alternation (a change of load on
    a shared machine hits all of them alike): name -> best and median of ``repeats`` samples.

    Actions are random and drawn beforehand; warm-up steps fill the NeRD history first.
    """
    gen = torch.Generator().manual_seed(0)
    fns = {}
    for name, stepper in steppers.items():
        width = action_width(stepper)
        actions = [(2 * torch.rand(stepper.num_envs, width, generator=gen) - 1).to(stepper.device) for _ in range(64)]
        stepper.reset()
        for a in actions[:12]:
            stepper.step(a)
        counter = iter(range(10**12))
        fns[name] = lambda stepper=stepper, actions=actions, counter=counter: stepper.step(
            actions[next(counter) % len(actions)])
    a, b = (torch.randn(matmul_size, matmul_size, generator=gen).to(device) for _ in range(2))
    product = torch.empty(matmul_size, matmul_size, device=device)
    fns["matmul"] = lambda: torch.mm(a, b, out=product)
    times = time_alternating(fns, repeats, seconds / repeats, device)
    rates = {name: {"best": steppers[name].num_envs / t["best"], "median": steppers[name].num_envs / t["median"]}
             for name, t in times.items() if name != "matmul"}
    flops = 2.0 * matmul_size**3
    rates["matmul"] = {"best": flops / times["matmul"]["best"], "median": flops / times["matmul"]["median"]}
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="small env counts and tiny models")
    parser.add_argument("--robots", nargs="+", default=list(ROBOTS), choices=ROBOTS)
    parser.add_argument("--num-envs", type=int, nargs="+", default=None, help="env counts (default 64 512 2048)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per measurement (default 4)")
    parser.add_argument("--repeats", type=int, default=4, help="samples per measurement (best and median kept)")
    parser.add_argument("--output", default=None, help="results JSON (default: bench/results/rl.json)")
    parser.add_argument("--matmul-size", type=int, default=1024,
                        help="side of the float32 matmul that defines the floor (default 1024; 8192 on a GPU)")
    parser.add_argument("--model-path", nargs="+", default=None,
                        help="checkpoints of one robot (name it with --robots) to time instead of its shipped model; "
                             "several are timed side by side, their samples alternating with the ground truth's")
    parser.add_argument("--policy", action="store_true",
                        help="the robots with a shipped policy (Cartpole, Ant, Anymal) act with it every step: policy "
                             "inference included (the others are timed without, as before)")
    parser.add_argument("--capture-frame", action="store_true",
                        help="also time each neural model with its frame replayed as one CUDA graph (capture_frame; "
                             "on a CPU the same code uncaptured), side by side with the plain neural step")
    args = parser.parse_args()
    if args.model_path and (len(args.robots) != 1 or args.quick):
        raise UserError("--model-path times checkpoints of one robot: name it with --robots, without --quick")
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    counts = args.num_envs or ((16, 64) if args.quick else (64, 512, 2048))
    seconds = args.seconds or (0.5 if args.quick else 4.0)
    output = Path(args.output or REPO / "bench" / "results" / ("rl_quick.json" if args.quick else "rl.json"))
    rate = matmul_rate(device, size=args.matmul_size, repeats=args.repeats)
    results = {"device": device, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "torch_threads": torch.get_num_threads(), "quick": args.quick, "matmul_size": args.matmul_size,
               "policy_inference": "shipped policy where one exists" if args.policy else "excluded",
               "capture_frame": args.capture_frame,
               "rows": []}
    for robot in args.robots:
        for n in counts:
            steppers, descs = {GROUND_TRUTH: build_stepper(robot, n, GROUND_TRUTH, args.quick, device)[0]}, {}
            for i, path in enumerate(args.model_path or [None]):
                steppers[f"{NEURAL}:{i}"], descs[i] = build_stepper(robot, n, NEURAL, args.quick, device, path)
                if args.capture_frame:
                    steppers[f"{GRAPH}:{i}"] = build_stepper(robot, n, NEURAL, args.quick, device, path, True)[0]
            if args.policy and robot in POLICIES:
                steppers = {key: with_policy(stepper, robot, device) for key, stepper in steppers.items()}
            failed = {key: error for key in steppers if key.startswith(GRAPH)
                      if (error := recording_error(steppers[key])) is not None}
            for key, error in failed.items():
                print(f"{robot} N={n}: the captured frame failed ({error}); its column is left out", flush=True)
                del steppers[key]
            # The cube has no actuators: its passive stepping has no torques to draw.
            passive = "passive (random torques)" if getattr(steppers[GROUND_TRUTH], "action_dim", 1) else "passive"
            flops = {i: flops_per_env_step(steppers[f"{NEURAL}:{i}"]) for i in descs}
            rates = row_rates(steppers, seconds, args.repeats, device, args.matmul_size)
            del steppers
            for i, desc in descs.items():
                row = {"robot": robot, "task": TASKS.get(robot, passive), "num_envs": n, "neural_model": desc,
                       "policy": POLICIES[robot][1] if args.policy and robot in POLICIES else None,
                       "flops_per_env_step": flops[i], "matmul_flops_per_s": rates["matmul"],
                       GROUND_TRUTH: rates[GROUND_TRUTH], NEURAL: rates[f"{NEURAL}:{i}"]}
                if args.capture_frame:
                    row[GRAPH] = rates.get(f"{GRAPH}:{i}", {"error": failed.get(f"{GRAPH}:{i}")})
                results["rows"].append(row)
                graph = f"  graph {row[GRAPH].get('best', float('nan')):>11,.0f}" if args.capture_frame else ""
                print(f"{robot:<19} N={n:<5} ground truth {row[GROUND_TRUTH]['best']:>11,.0f}  "
                      f"neural {row[NEURAL]['best']:>11,.0f}{graph} env-steps/s  {desc}", flush=True)
    results["matmul_flops_per_s_alone"] = {"before": rate, "after": matmul_rate(device, size=args.matmul_size,
                                                                                repeats=args.repeats)}
    for row in results["rows"]:
        row["floor_env_steps_per_s"] = row["matmul_flops_per_s"]["best"] / row["flops_per_env_step"]
        row["floor_share"] = row[NEURAL]["best"] / row["floor_env_steps_per_s"]
        if "best" in row.get(GRAPH, {}):
            row["floor_share_graph"] = row[GRAPH]["best"] / row["floor_env_steps_per_s"]
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(results, indent=2))
    print(f"\nRL env-steps/s on {results['machine']} ({device}, {results['torch_threads']} torch thread(s)), policy "
          f"inference: {results['policy_inference']}; best of {args.repeats} samples, ground truth, neural and "
          "matmul alternating\n")
    graph_head = " neural, graph | graph / GT | graph share |" if args.capture_frame else ""
    print(f"| robot / task | N | ground truth | neural | neural / GT |{graph_head} model MFLOP per env-step | "
          "matmul GFLOP/s | FLOP floor | share of floor | neural model |")
    print("|---" * (10 + 3 * args.capture_frame) + "|")
    for row in results["rows"]:
        gt, neural = row[GROUND_TRUTH]["best"], row[NEURAL]["best"]
        graph = ""
        if "best" in row.get(GRAPH, {}):
            graph = (f" {row[GRAPH]['best']:,.0f} | {row[GRAPH]['best'] / gt:.2f}x | "
                     f"{100 * row['floor_share_graph']:.0f} % |")
        elif GRAPH in row:
            graph = " failed | – | – |"
        print(f"| {row['robot']} {row['task']} | {row['num_envs']} | {gt:,.0f} | {neural:,.0f} | {neural / gt:.2f}x |"
              f"{graph} {row['flops_per_env_step'] / 1e6:.3f} | {row['matmul_flops_per_s']['best'] / 1e9:.1f} | "
              f"{row['floor_env_steps_per_s']:,.0f} | "
              f"{100 * row['floor_share']:.0f} % | {row['neural_model']} |")
    print(f"\nwrote {output}")


if __name__ == "__main__":
    run_main(main)
