"""Every command in the bash blocks of the README and of every model card runs as written, at a reduced size, in the
order it is written; so does the README's Python example.

The commands are read from the documents themselves, so a new or changed command is tested without editing this
file. Only the sizes change: the flags in ``SIZES`` get small values and ``EXTRA`` appends tiny-run settings per
script. Commands that cannot run in a test (``NOT_RUN``) must still appear in their document exactly as listed here.
Documentation-only commands (hours of training) go in ```text blocks, which are not run.
"""

import importlib.util
import re
import shlex

import pytest

from tests.helpers import REPO, run_script

# Flag -> reduced value, wherever the flag appears.
SIZES = {"--num-transitions": "2000", "--num-envs": "8", "--num-rollouts": "4", "--rollout-horizon": "5",
         "--num-games": "4"}
# Script -> arguments appended (argparse keeps the last value of a flag); RL training also stops after an epoch.
EXTRA = {
    "train/train.py": ["--cfg-overrides", "num_epochs=1", "batches_per_epoch=5", "batch_size=32", "valid_batches=2",
                       "rollout_eval.num_envs=2", "rollout_eval.horizon=5", "model.transformer.n_layer=1",
                       "model.transformer.n_embd=16"],
    "eval/run_rl.py": ["--cfg-overrides", "params.config.mini_epochs=2", "env.episode_length=10"],
    "eval/batch_eval_policy.py": ["--cfg-overrides", "num_games=4", "num_envs=4", "episode_length=10"],
    "train/transfer_loop.py": ["--cfg-overrides", "rounds=2", "epochs_per_round=1", "num_envs=8",
                               "rl_overrides=[params.config.mini_epochs=1,env.episode_length=20]",
                               "refine.finetune_minutes=0.002", "refine.gt_fraction=0.5",
                               "refine.train_overrides=[batch_size=16,batches_per_epoch=2,valid_batches=1,"
                               "rollout_eval.num_envs=2,rollout_eval.horizon=5]",
                               "evaluation.num_games=4", "evaluation.num_envs=4"],
}
NOT_RUN: dict[str, str] = {}
CARDS = sorted((REPO / "pretrained_models").rglob("README.md"))
NEEDS_MODULE = {"--viewer usd": "pxr"}  # run where the optional module is installed


def readme_commands(text: str) -> list[str]:
    """The commands of the README's ```bash blocks: continuation lines joined, comments dropped, ``for VAR in
    A B C; do ... done`` loops unrolled."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines = [line.split(" #")[0].rstrip() for line in block.replace("\\\n", " ").splitlines()]
        lines = [" ".join(line.split()) for line in lines if line.strip() and not line.lstrip().startswith("#")]
        i = 0
        while i < len(lines):
            loop = re.fullmatch(r"for (\w+) in (.+); do", lines[i])
            if loop:
                end = lines.index("done", i)
                for value in loop.group(2).split():
                    commands += [line.replace(f"${loop.group(1)}", value) for line in lines[i + 1: end]]
                i = end + 1
            else:
                commands.append(lines[i])
                i += 1
    return commands


def reduced(argv: list[str]) -> list[str]:
    """``argv`` (script and arguments) with the sizes of ``SIZES`` and the tiny-run settings of ``EXTRA``."""
    argv = [SIZES[argv[i - 1]] if i and argv[i - 1] in SIZES else arg for i, arg in enumerate(argv)]
    extra = list(EXTRA.get(argv[0], []))
    if argv[0] == "eval/run_rl.py" and "--playback" not in argv:
        extra += ["--max-epochs", "1"] + ([] if "--num-envs" in argv else ["--num-envs", "8"])
    return argv + extra


def test_documents_list_every_skipped_command():
    """Each command this test does not run is in a document as written here (the list cannot drift), and every
    other command is one of the project's Python scripts."""
    commands = [c for path in (REPO / "README.md", *CARDS) for c in readme_commands(path.read_text())]
    assert set(NOT_RUN) <= set(commands), set(NOT_RUN) - set(commands)
    assert all(c in NOT_RUN or c.startswith("python ") for c in commands), commands


def run_commands(text: str, monkeypatch, capsys) -> list[str]:
    """Run the bash-block commands of ``text`` in order at reduced sizes; the scripts that ran."""
    ran = []
    for command in readme_commands(text):
        if command in NOT_RUN:
            continue
        missing = [m for flag, m in NEEDS_MODULE.items() if flag in command and importlib.util.find_spec(m) is None]
        if missing:
            continue
        argv = reduced(shlex.split(command)[1:])
        code, out, err = run_script(argv[0], *argv[1:], monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, f"{command}\n{err[-2000:]}"
        ran.append(argv[0])
    return ran


def user_directory(tmp_path, monkeypatch):
    """Work from a directory holding the repository's cfg/ and pretrained_models/, as a user in a clone does."""
    for name in ("cfg", "pretrained_models"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)


def test_every_readme_command_runs(tmp_path, monkeypatch, capsys):
    """The README's commands, in order: the pipeline runs end to end (data, a model, its evaluation, three
    policies and their table) and writes only under data/, runs/ and outputs/."""
    user_directory(tmp_path, monkeypatch)
    ran = run_commands((REPO / "README.md").read_text(), monkeypatch, capsys)
    assert (tmp_path / "runs/Cartpole_cpu/nn/best.pt").is_file()
    assert (tmp_path / "outputs/cp.json").is_file() and (tmp_path / "outputs/cartpole_table.md").is_file()
    assert ran.count("eval/run_rl.py") >= 4 and "generate/visualize_dataset.py" in ran
    assert {p.name for p in tmp_path.iterdir()} <= {"cfg", "pretrained_models", "data", "runs", "outputs"}


@pytest.mark.parametrize("card", CARDS, ids=lambda p: str(p.parent.relative_to(REPO / "pretrained_models")))
def test_every_model_card_command_runs(card, tmp_path, monkeypatch, capsys):
    """A model card's commands run as written from a clone's root and write only under outputs/ (never into the
    model's own folder, where their files already exist)."""
    user_directory(tmp_path, monkeypatch)
    assert run_commands(card.read_text(), monkeypatch, capsys), "no command to try the model or policy"
    assert {p.name for p in tmp_path.iterdir()} <= {"cfg", "pretrained_models", "outputs"}


def test_readme_python_example_runs(tmp_path, monkeypatch):
    """The README's Python example runs as written."""
    user_directory(tmp_path, monkeypatch)
    (example,) = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert tuple(namespace["states"].shape) == (16, 4)


@pytest.mark.parametrize("text,expected", [
    ("```bash\npython a.py --x 1 \\\n    --y 2  # note\n# comment\n```", ["python a.py --x 1 --y 2"]),
    ("```bash\nfor s in 0 1; do\n  python a.py --seed $s\ndone\n```", ["python a.py --seed 0", "python a.py --seed 1"]),
])
def test_readme_commands_are_parsed_like_bash(text, expected):
    """Continuations, comments and for-loops are read the way bash reads them."""
    assert readme_commands(text) == expected
