"""YAML configs load into validated dataclasses; mistakes name the offending key."""

import subprocess
import sys

import pytest

from nerd.config import ConfigError, apply_overrides, from_dict, load_config
from nerd.training import TrainConfig


def test_shipped_configs_load(tmp_path):
    """Every YAML under cfg/train loads into TrainConfig."""
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[2] / "cfg/train").rglob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        cfg = load_config(path, TrainConfig)
        assert cfg.env_name in path.parts


@pytest.mark.parametrize("data,message", [
    ({"env_name": "Cartpole", "batch_sise": 3}, "unknown config key 'batch_sise'"),
    ({"env_name": "Cartpole", "model": {"transformer": {"n_embd": "big"}}},
     "'model.transformer.n_embd': expected an integer"),
    ({"env_name": "Cartpole", "lr_start": True}, "'lr_start': expected a number"),
    ({"env_name": "Cartpole", "model": {"mlp": {"activation": "swish"}}}, "'model.mlp.activation': expected one of"),
    ({"env_name": "Cartpole", "rollout_eval": {"initial_states": "reset"}},
     "'rollout_eval.initial_states': expected one of"),
    ({"batch_size": 3}, "missing required config key 'env_name'"),
    ({"env_name": "Cartpole", "history_length": 17, "model": {"transformer": {"block_size": 16}}},
     "'history_length': 17 exceeds model.transformer.block_size 16"),
])
def test_invalid_configs_name_the_key(data, message):
    """Unknown keys, wrong types, invalid choices and missing keys raise ConfigError naming the dotted key."""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        from_dict(TrainConfig, data)


def test_overrides_parse_yaml_values_and_ints_widen_to_floats():
    """key.sub=value overrides are YAML-typed; an int is accepted where a float is declared."""
    data = apply_overrides({"env_name": "Cartpole"}, ["model.transformer.n_layer=2", "lr_end=0", "dataset.train=a.h5"])
    cfg = from_dict(TrainConfig, data)
    assert cfg.model.transformer.n_layer == 2 and cfg.lr_end == 0.0 and isinstance(cfg.lr_end, float)
    assert cfg.dataset.train == "a.h5"


def test_engine_free_modules_do_not_import_warp():
    """Models, normalisation, frames, representation, features, datasets and training stay engine-free."""
    code = (
        "import sys, nerd.models.nerd_model, nerd.normalization, nerd.frames, nerd.representation, nerd.features, "
        "nerd.datasets.hdf5, nerd.datasets.windows, nerd.datasets.summary, nerd.checkpoint, nerd.config, "
        "nerd.training; "
        "bad = [m for m in ('warp', 'newton') if m in sys.modules]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
