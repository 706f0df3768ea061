"""studies/compute_curve/compute_curve.py: power-law fits of error against windows, their extrapolation, and bad
specs."""

import json

import numpy as np
import pytest
import yaml

from tests.helpers import error_lines, run_script

SCRIPT = "studies/compute_curve/compute_curve.py"


def write_eval(path, horizon, cart, pole):
    """A minimal eval_passive_motion.py report: the errors at one horizon (and a shorter one beside it)."""
    path.write_text(json.dumps({"metrics_by_horizon": {
        "100": {"cart_position_error": cart / 10, "pole_angle_error": pole / 10},
        str(horizon): {"cart_position_error": cart, "pole_angle_error": pole}}}))
    return str(path)


def run(tmp_path, spec, monkeypatch, capsys, *extra):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    return run_script(SCRIPT, str(tmp_path / "spec.yaml"), "--output", str(tmp_path / "curve.json"), *extra,
                      monkeypatch=monkeypatch, capsys=capsys)


def test_an_exact_power_law_is_recovered_and_extrapolated_to_its_target(tmp_path, monkeypatch, capsys):
    # cart = 2 W^-0.5, pole = 8 W^-0.25 (read from eval JSONs); a second series falls nowhere (given inline).
    windows = [1e6, 4e6, 16e6]
    chain = [{"windows": w, "eval": write_eval(tmp_path / f"e{i}.json", 1000, 2 * w ** -0.5, 8 * w ** -0.25),
              "label": f"stage {i}"} for i, w in enumerate(windows)]
    flat = [{"windows": w, "metrics": {"cart_position_error": 0.5, "pole_angle_error": 0.3 + 0.1 * i}}
            for i, w in enumerate(windows)]
    spec = {"horizon": 1000, "targets": {"cart_position_error": 1e-4, "pole_angle_error": 0.1},
            "series": {"chain": list(reversed(chain)), "flat": flat}}
    code, out, err = run(tmp_path, spec, monkeypatch, capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "curve.json").read_text())
    chain_fit = result["series"]["chain"]["fits"]
    assert [p["windows"] for p in result["series"]["chain"]["points"]] == windows  # sorted by windows
    assert np.isclose(chain_fit["cart_position_error"]["exponent"], -0.5)
    assert np.isclose(chain_fit["pole_angle_error"]["exponent"], -0.25)
    # 2 W^-0.5 = 1e-4 at W = 4e8 (25x the last point); 8 W^-0.25 = 0.1 at W = 80^4
    assert np.isclose(chain_fit["cart_position_error"]["windows_to_target"], 4e8)
    assert np.isclose(chain_fit["cart_position_error"]["multiple_of_last"], 25.0)
    assert np.isclose(chain_fit["pole_angle_error"]["windows_to_target"], 80.0 ** 4)
    flat_fit = result["series"]["flat"]["fits"]
    assert flat_fit["pole_angle_error"]["exponent"] > 0 and flat_fit["pole_angle_error"]["windows_to_target"] is None
    assert "not falling" in (tmp_path / "curve.md").read_text() and (tmp_path / "curve.png").stat().st_size > 0


def test_fit_from_windows_drops_the_early_points_and_a_met_target_needs_no_more(tmp_path, monkeypatch, capsys):
    points = [{"windows": 1e6, "metrics": {"pole_angle_error": 5.0}},  # an outlier before the fit's start
              {"windows": 2e6, "metrics": {"pole_angle_error": 0.4}},
              {"windows": 8e6, "metrics": {"pole_angle_error": 0.1}}]
    spec = {"horizon": 1000, "targets": {"pole_angle_error": 0.2}, "fit_from_windows": 2e6,
            "series": {"s": points}}
    code, _, err = run(tmp_path, spec, monkeypatch, capsys)
    assert code == 0, err
    fit = json.loads((tmp_path / "curve.json").read_text())["series"]["s"]["fits"]["pole_angle_error"]
    assert fit["points"] == 2 and np.isclose(fit["exponent"], -1.0)
    assert fit["windows_to_target"] == 8e6 and fit["multiple_of_last"] == 1.0


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(horizonn=1000), "error: unknown config key 'horizonn' (valid keys: fit_from_windows, "
                                        "horizon, notes, protocol, series, targets, title)"),
    (lambda s: s["series"]["s"][0].update(eval="x.json"),
     "error: config key 'series.s[0].eval': give either 'eval' or 'metrics' for each point, not both or neither"),
    (lambda s: s["series"]["s"][0].update(windows=-1),
     "error: config key 'series.s[0].windows': must be > 0, got -1.0"),
    (lambda s: s["series"]["s"][0]["metrics"].pop("pole_angle_error"),
     "error: point 'a' has no 'pole_angle_error' (it has ['cart_position_error'])"),
])
def test_a_bad_spec_is_a_one_line_error_naming_what_is_wrong(tmp_path, monkeypatch, capsys, change, message):
    spec = {"horizon": 1000, "targets": {"pole_angle_error": 0.12},
            "series": {"s": [{"windows": 1e6, "label": "a",
                              "metrics": {"cart_position_error": 0.1, "pole_angle_error": 0.2}}]}}
    change(spec)
    code, _, err = run(tmp_path, spec, monkeypatch, capsys)
    assert code != 0 and error_lines(err) == [message]
    assert not (tmp_path / "curve.json").exists()


def test_an_evaluation_without_the_horizon_is_refused(tmp_path, monkeypatch, capsys):
    path = write_eval(tmp_path / "short.json", 500, 0.1, 0.2)
    spec = {"horizon": 1000, "targets": {"pole_angle_error": 0.12}, "series": {"s": [{"windows": 1e6, "eval": path}]}}
    code, _, err = run(tmp_path, spec, monkeypatch, capsys)
    assert code != 0 and error_lines(err) == [
        f"error: {path} has no errors at horizon 1000 (it has ['100', '500']); is it an eval_passive_motion.py "
        "report?"]


def test_a_fit_is_drawn_towards_its_target_only_where_it_falls_to_it():
    """A falling fit is drawn to where it reaches the target (capped at 100x the largest windows); a rising one ends
    at its last point, so that it cannot stretch the plot over orders of magnitude of error."""
    import runpy

    from tests.helpers import REPO

    fit_span = runpy.run_path(str(REPO / SCRIPT))["fit_span"]
    falling = {"from_windows": 1e6, "windows_to_target": 5e8}
    assert fit_span(falling, 1e7, 1e7)[-1] == pytest.approx(5e8)
    assert fit_span(falling, 1e7, 1e6)[-1] == pytest.approx(1e8)  # capped at 100x the largest windows
    rising = {"from_windows": 1e6, "windows_to_target": None}
    span = fit_span(rising, 2e7, 1e9)
    assert span[0] == pytest.approx(1e6) and span[-1] == pytest.approx(2e7)
