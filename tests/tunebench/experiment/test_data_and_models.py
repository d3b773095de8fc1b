"""Data preparation (synthetic, local files, cache, --no_data_processing), model presets and GPU skipping."""

import json

import pandas as pd
import pytest

from tests.fixtures.harness import tiny_scenario, write_inputs
from tunebench import cli
from tunebench.execution.experiment_run import skip_reason
from tunebench.experiment.arguments import DataArguments
from tunebench.experiment.data import prepare_dataset, synthetic_lengths
from tunebench.experiment.models import PRESETS, build_tokenizer, load_config, resolve_model_source
from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data"


def test_synthetic_lengths_follow_their_distribution():
    assert synthetic_lengths(5, 64, 0, "fixed", 0) == [64] * 5
    uniform = synthetic_lengths(2000, 128, 32, "uniform", 0)
    assert min(uniform) >= 32 and max(uniform) <= 128 and 70 < sum(uniform) / len(uniform) < 90
    assert synthetic_lengths(10, 64, 0, "uniform", 7) == synthetic_lengths(10, 64, 0, "uniform", 7)


def test_local_jsonl_and_parquet_are_tokenised_and_cached(tmp_path, cache):
    tokenizer = build_tokenizer("preset:llama-tiny")
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": t}) for t in ["hello world", "abc"]))
    rows = prepare_dataset(DataArguments(training_data_path=str(jsonl), max_seq_len=8), tokenizer)
    assert [len(r) for r in rows["input_ids"]] == [8, 4]  # truncated to max_seq_len; "abc" + eos
    assert rows["input_ids"][1][-1] == tokenizer.eos_token_id
    parquet = tmp_path / "chat.parquet"
    pd.DataFrame(
        {"messages": [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]}
    ).to_parquet(parquet)
    chat = prepare_dataset(DataArguments(training_data_path=str(parquet), max_seq_len=64), tokenizer)
    assert tokenizer.decode(chat["input_ids"][0]) == "<s>user: hi</s><s>assistant: yo</s>"
    assert len(list(cache.iterdir())) == 2


def test_no_data_processing_reuses_cache_and_refuses_when_missing(tmp_path, cache, capsys):
    options = write_inputs(tmp_path, [tiny_scenario()])
    out = tmp_path / "out"
    assert cli.main([*options, "--results_output_path", str(out), "--no_data_processing"]) == 2
    assert "run once without --no_data_processing" in capsys.readouterr().err and not out.exists()
    assert cli.main([*options, "--results_output_path", str(out), "--dry_run"]) == 0  # dry run builds nothing
    assert not cache.exists()
    data_args = DataArguments(max_seq_len=64, synthetic_num_samples=64)
    prepare_dataset(data_args, build_tokenizer("preset:llama-tiny"), seed=42)
    assert cli.main([*options, "--results_output_path", str(out), "--no_data_processing", "--dry_run"]) == 0


def test_every_preset_resolves_offline_and_cannot_be_a_hub_id():
    for name in PRESETS:
        source = resolve_model_source(f"preset:{name}")
        assert source.kind == "preset" and "/" not in name
        assert load_config(f"preset:{name}").vocab_size >= len(build_tokenizer("preset:llama-tiny"))
    assert resolve_model_source("meta-llama/Llama-3.2-1B").kind == "hub"
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_model_source("preset:llama-9000")


def test_experiments_needing_absent_gpus_are_skipped_with_reason():
    exp = ExperimentSpec("s", FrameworkConfig("none"), 2, "cuda", {"model_name_or_path": "preset:llama-tiny"})
    assert skip_reason(exp, available_gpus=1) == "needs 2 GPU(s), this machine has 1"
    assert skip_reason(exp, available_gpus=2) is None
    fsdp = ExperimentSpec("s", FrameworkConfig("fsdp2", {"fsdp": "full_shard"}, min_gpus=2), 1, "cuda",
                      {"model_name_or_path": "preset:llama-tiny", "fsdp": "full_shard"})
    assert "needs at least 2 processes" in skip_reason(fsdp, available_gpus=8)


def test_presets_initialise_on_the_host_without_cuda_or_when_asked():
    from types import SimpleNamespace

    from tunebench.experiment.components import preset_init_device

    state = SimpleNamespace(local_process_index=1)
    training = SimpleNamespace(use_cpu=False, fsdp="", fsdp_config={})
    assert preset_init_device(SimpleNamespace(preset_init_device="auto"), training, state) == "cpu"  # no CUDA here
    assert preset_init_device(SimpleNamespace(preset_init_device="cpu"), training, state) == "cpu"
