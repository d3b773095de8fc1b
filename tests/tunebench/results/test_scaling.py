"""Scaling columns (issue Y): every multi-GPU row against its one-GPU twin, read from the experiment folders: on the
4 × H100 evidence's packed run, and on planted folders where the twin is known."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO
from tunebench.results.scaling import scaling_columns, work_of

EVIDENCE = REPO / "docs/evidence/gpu-counts-h100/call-a/a.tgz"


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gpu-counts")
    with tarfile.open(EVIDENCE) as archive:
        archive.extractall(folder, filter="data")
    return folder / "packed"


def test_every_multi_gpu_row_of_the_h100_run_finds_its_one_gpu_twin(packed):
    frame = scaling_columns(packed, pd.read_csv(packed / "raw_summary.csv"))
    ok = frame[(frame.status == "ok") & (frame.num_gpus > 1)].set_index("framework_config")
    ones = frame[(frame.status == "ok") & (frame.num_gpus == 1)]
    twin = {(r.peft_method, r.framework_config): r for r in ones.itertuples()}
    for name, row in ok.iterrows():
        checkpointed = name == "fsdp2-activation-checkpointing"
        expected = twin[(row.peft_method, "gradient-checkpointing" if checkpointed else "none")]
        assert row.scaling_baseline_id == expected.experiment_id, name
        rate = expected.steady_nonpad_tokens_per_second
        assert row.scaling_efficiency == pytest.approx(row.steady_nonpad_tokens_per_second / (2 * rate), rel=1e-12)
        assert row.comm_exposed_share == pytest.approx(
            1 - expected.steady_step_time_median / row.steady_step_time_median, rel=1e-12)
    assert ones.get("scaling_efficiency", pd.Series(dtype=float)).isna().all()  # one GPU has no twin but itself


def _spec(folder: Path, experiment_id: str, num_gpus: int, **arguments) -> None:
    folder.mkdir()
    base = {"model_name_or_path": "preset:llama-tiny", "per_device_train_batch_size": 4, "peft_method": "none"}
    (folder / "spec.json").write_text(json.dumps({"experiment_id": experiment_id, "num_gpus": num_gpus,
                                                  "device_type": "cuda", "arguments": {**base, **arguments}}))


def test_the_twin_is_the_same_work_per_device_and_nothing_else(tmp_path):
    _spec(tmp_path / "s_one", "one", 1)
    _spec(tmp_path / "s_one-bs8", "one-bs8", 1, per_device_train_batch_size=8)  # other work: never the twin
    _spec(tmp_path / "s_ddp", "ddp", 2, ddp_find_unused_parameters=False)
    _spec(tmp_path / "s_fsdp", "fsdp", 4, fsdp="full_shard auto_wrap", fsdp_config={"version": 2})
    _spec(tmp_path / "s_lr", "lr", 2, learning_rate=1e-3)  # a numerics setting differs: no twin
    frame = pd.DataFrame({"experiment_id": ["one", "one-bs8", "ddp", "fsdp", "lr"], "status": ["ok"] * 5,
                          "num_gpus": [1, 1, 2, 4, 2], "steady_nonpad_tokens_per_second": [100.0, 180, 190, 360, 200],
                          "steady_step_time_median": [1.0, 1.0, 1.05, 1.1, 1.0]}).set_index("experiment_id",
                                                                                          drop=False)
    out = scaling_columns(tmp_path, frame)
    assert out.loc["ddp", "scaling_efficiency"] == pytest.approx(0.95)
    assert out.loc["fsdp", "scaling_efficiency"] == pytest.approx(0.9)
    assert out.loc["fsdp", "scaling_baseline_id"] == "one"
    assert out.loc["fsdp", "comm_exposed_share"] == pytest.approx(1 - 1 / 1.1)
    assert pd.isna(out.loc["lr", "scaling_efficiency"])


def test_checkpointing_is_one_setting_whichever_switch_turned_it_on():
    trainer = work_of({"experiment_id": "a", "num_gpus": 1, "arguments": {"gradient_checkpointing": True}})
    fsdp = work_of({"experiment_id": "b", "num_gpus": 2, "arguments": {
        "fsdp": "full_shard", "fsdp_config": json.dumps({"version": 2, "activation_checkpointing": True})}})
    plain = work_of({"experiment_id": "c", "num_gpus": 2, "arguments": {"fsdp": "full_shard"}})
    assert trainer.workload == fsdp.workload != plain.workload
    assert work_of({"experiment_id": "d", "arguments": {}}) is None  # no GPU count: not a run's spec


def test_compare_checks_the_multi_gpu_reference(tmp_path):
    """refs/nvidia-h100-x4.csv (1, 2 and 4 H100s) against the evidence it was written from: no regression; the same
    rows with one 2-GPU FSDP2 row 20 % slower: a regression naming it."""
    import tunebench

    reference = REPO / "refs/nvidia-h100-x4.csv"
    rows = pd.read_csv(REPO / "docs/evidence/gpu-counts-h100/merged-raw_summary.csv")
    rows = rows[rows.status == "ok"]
    assert set(rows["num_gpus"]) == {1, 2, 4}
    same = tmp_path / "same.csv"
    rows.to_csv(same, index=False)
    options = tunebench.CompareOptions(out=str(tmp_path / "same"), metrics=("steady_nonpad_tokens_per_second",),
                                       charts=False)
    assert tunebench.compare(reference, same, options).exit_code == 0
    slower = rows.copy()
    target = (slower.framework_config == "fsdp2") & (slower.num_gpus == 2) & (slower.scenario == "gc-1b-full-par")
    slower.loc[target, "steady_nonpad_tokens_per_second"] *= 0.8
    slower.to_csv(tmp_path / "slower.csv", index=False)
    options = tunebench.CompareOptions(out=str(tmp_path / "slower"), metrics=("steady_nonpad_tokens_per_second",),
                                       charts=False)
    result = tunebench.compare(reference, tmp_path / "slower.csv", options)
    assert result.exit_code == 1
