"""tunebench/matrix/narrowing.py: what a matrix would drop or change without a word is said before anything runs
(issue AD): a scenario whose num_gpus misses the matrix, loss_band_kind without a seed, torch_compile_mode without
torch_compile (a line each, once per scenario), and torch_compile_mode with torch_compile false (exit 2)."""

from __future__ import annotations

import logging

import pytest

import tunebench

TINY = {"model_name_or_path": "preset:llama-tiny"}


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tunebench.matrix.narrowing"]


def test_a_scenario_whose_gpu_counts_miss_the_matrix_is_said(caplog):
    scenarios = [{"name": "four", "num_gpus": [4], "arguments": TINY}, {"name": "all", "arguments": TINY}]
    with caplog.at_level(logging.WARNING):
        frame = tunebench.Matrix.from_scenarios(scenarios, device="cpu", num_gpus=[1, 2]).frame()
    assert sorted(frame["scenario"]) == ["all", "all"]
    assert _lines(caplog) == ["Matrix.from_scenarios: scenario 'four': num_gpus [4] holds none of the matrix's GPU "
                              "counts [1, 2]: it runs no experiment (add the counts to --num_gpus_matrix, or widen "
                              "its num_gpus)"]


def test_settings_that_do_nothing_or_more_are_said_once_per_scenario(caplog):
    scenarios = [{"name": "s", "arguments": {**TINY, "loss_band_kind": "last_bit", "torch_compile_mode": "default"}}]
    with caplog.at_level(logging.WARNING):
        matrix = tunebench.Matrix.from_scenarios(scenarios, device="cpu", num_gpus=[1, 2])
    assert len(matrix.experiments) == 2
    assert _lines(caplog) == [
        "Matrix.from_scenarios: scenario 's': arguments.loss_band_kind: loss_band_kind 'last_bit' has no effect "
        "without loss_band_seed > 0 (only a band run perturbs anything): this experiment is no band run (set "
        "loss_band_seed, e.g. 1, or drop loss_band_kind)",
        "Matrix.from_scenarios: scenario 's': arguments.torch_compile_mode: torch_compile_mode 'default' turns "
        "torch.compile on (transformers does for any mode): the experiment is compiled, and planned so (say "
        "torch_compile: true)"]
    assert all(e.value("training", "torch_compile") is True for e in matrix.experiments)  # planned as it runs


def test_a_band_run_and_a_compiled_run_say_nothing(caplog):
    scenarios = [{"name": "s", "arguments": {**TINY, "loss_band_kind": "last_bit", "loss_band_seed": 1,
                                             "torch_compile": True, "torch_compile_mode": "default"}}]
    with caplog.at_level(logging.WARNING):
        tunebench.Matrix.from_scenarios(scenarios, device="cpu")
    assert _lines(caplog) == []


def test_a_mode_with_compilation_off_is_a_contradiction():
    scenarios = [{"name": "s", "arguments": {**TINY, "torch_compile": False, "torch_compile_mode": "default"}}]
    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios(scenarios, device="cpu")
    assert [(p.key, p.message, p.fix) for p in caught.value.problems] == [(
        "scenario 's': arguments.torch_compile_mode", "torch_compile_mode 'default' with torch_compile: false: "
        "transformers compiles whenever a mode is given", "drop torch_compile_mode, or set torch_compile: true")]
