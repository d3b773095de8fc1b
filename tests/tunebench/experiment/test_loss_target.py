"""Time to a target loss from per-step records: exact figures, and a reason wherever a figure is empty."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.experiment.loss_target import COLUMNS, target_columns, target_loss

FLOOR = (math.log(2), "")


def test_exact_figures_with_the_scanned_step_counted_at_the_steady_median():
    losses = {1: 6.0, 2: 5.0, 3: 4.7, 4: 4.0, 5: 3.0}
    seconds = {1: 9.0, 2: 1.0, 3: 5.0, 4: 1.1, 5: 1.0}  # step 1 compiles; step 3 is memory-scanned
    tokens = {s: 100 * s for s in losses}
    row = target_columns(losses, seconds, tokens, FLOOR, 0.25, 0.0, scanned={3}, steady_median=1.05)
    target = 6.0 - 0.25 * (6.0 - math.log(2))
    assert row["loss_target"] == pytest.approx(target) and target == pytest.approx(4.673, abs=1e-3)
    assert row["loss_first_step"] == 6.0 and row["data_entropy_floor_nats"] == math.log(2)
    assert row["loss_target_steps"] == 4  # 4.7 at step 3 is above the target, 4.0 at step 4 below
    assert row["loss_target_tokens"] == 100 + 200 + 300 + 400
    assert row["loss_target_seconds"] == pytest.approx(9.0 + 1.0 + 1.05 + 1.1)
    assert row["loss_target_note"] is None and set(row) == set(COLUMNS)


def test_empty_figures_say_why():
    losses = {1: 6.0, 2: 5.9}
    row = target_columns(losses, {1: 1.0, 2: 1.0}, {1: 1, 2: 1}, FLOOR, 0.5, 0.0, set(), 1.0)
    assert row["loss_target_steps"] is None and row["loss_target_note"].startswith("not reached in 2 steps")
    own = target_columns(losses, {1: 1.0, 2: 1.0}, {1: 1, 2: 1}, (None, "your own data"), 0.5, 0.0, set(), 1.0)
    assert own["loss_target"] is None and "loss_target_nats" in own["loss_target_note"]
    assert own["data_entropy_floor_note"] == "your own data" and own["data_entropy_floor_nats"] is None
    given_target = target_columns(losses, {1: 1.0, 2: 2.0}, {1: 5, 2: 6}, (None, "own"), 0.5, 5.95, set(), 1.0)
    assert given_target["loss_target"] == 5.95 and given_target["loss_target_steps"] == 2
    assert given_target["loss_target_tokens"] == 11 and given_target["loss_target_seconds"] == 3.0
    assert "no loss" in target_columns({}, {}, {}, FLOOR, 0.5, 0.0, set(), None)["loss_target_note"]
    assert target_loss(0.5, math.log(2), 0.25, 0.0)[0] is None  # already below the floor: no target


@settings(max_examples=200, deadline=None)
@given(losses=st.lists(st.floats(0.7, 20, allow_nan=False), min_size=1, max_size=40),
       fraction=st.floats(0.01, 1.0))
def test_the_step_is_the_first_at_or_below_the_target(losses, fraction):
    per_step = dict(enumerate(losses, 1))
    row = target_columns(per_step, dict.fromkeys(per_step, 1.0), dict.fromkeys(per_step, 3), FLOOR, fraction,
                         0.0, set(), 1.0)
    target = row["loss_target"]
    if target is None:
        assert losses[0] <= math.log(2)
        return
    below = [s for s, v in per_step.items() if v <= target]
    assert row["loss_target_steps"] == (below[0] if below else None)
    if below:
        assert row["loss_target_tokens"] == 3 * below[0] and row["loss_target_seconds"] == below[0]


@pytest.mark.slow
def test_a_checkpoint_with_its_own_data_gets_the_same_columns(tmp_path):
    """A local folder with weights and a .jsonl of text: the floor is unknown and says so, time to target comes
    from a loss the user gives, and loss parity judges by the band runs of that baseline."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd

    from tests.fixtures.harness import REPO, write_inputs
    from tunebench.experiment.models import build_tokenizer, load_model

    folder = tmp_path / "checkpoint"
    load_model("preset:llama-tiny", "float32", init_device="cpu").save_pretrained(folder)
    build_tokenizer("preset:llama-tiny").save_pretrained(folder)
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"text": f"row {i}: " + "the cat sat on the mat. " * (3 + i % 5)}) + "\n"
                            for i in range(64)))
    own = {"model_name_or_path": [str(folder)], "training_data_path": str(data), "max_steps": 8}
    scenarios = [{"name": "own", "framework_config": [None, "loss-band-1"], "arguments": own},
                 {"name": "own-target", "framework_config": [None], "arguments": {**own, "loss_target_nats": 5.8}}]
    options = write_inputs(tmp_path, scenarios, framework_configs={"loss-band-1": {"arguments": {"loss_band_seed": 1}}})
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "raw_summary.csv").set_index(["scenario", "framework_config"])
    assert set(frame["status"]) == {"ok"} and frame["data_entropy_floor_nats"].isna().all()
    assert frame["data_entropy_floor_note"].str.contains("your own data").all()
    plain = frame.loc[("own", "none")]
    assert pd.isna(plain["loss_target"]) and "loss_target_nats" in plain["loss_target_note"]
    given = frame.loc[("own-target", "none")]
    assert given["loss_target"] == 5.8 and 1 < given["loss_target_steps"] < 8 and given["loss_target_tokens"] > 0
    assert frame.loc[("own", "loss-band-1"), "loss_parity_band_source"] == "folder: 1 band run(s)"
