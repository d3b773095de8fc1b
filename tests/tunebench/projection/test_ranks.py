"""N GPUs on paper: the collective model's known answers, and per-rank memory and payloads against real gloo runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.fixtures.harness import REPO
from tests.fixtures.projection import kernel_rows, measured_row
from tunebench.hardware.gpus import load_table
from tunebench.projection import ranks
from tunebench.projection.memory import verdict
from tunebench.projection.project import project_one


def test_ring_collectives_and_the_overlap_assumption_give_known_answers():
    link = ranks.Link(bandwidth=300e9, latency=10e-6)
    [ddp] = ranks.collectives("ddp", 4, param_bytes=4e9, grad_bytes=2e9, layers=16, micro_batches=2)
    assert (ddp.kind, ddp.payload, ddp.count) == ("all_reduce", 2e9, 77)  # once per step, 25 MiB buckets
    # all-reduce: 2(N-1)/N of the payload at the bus bandwidth, 2(N-1) latency steps per bucket
    assert ranks.seconds(ddp, 4, link) == pytest.approx(2e9 * 1.5 / 300e9 + 77 * 6 * 10e-6)
    # added whole: no overlap with compute (measured on 2 H200s: docs/evidence/projection-ngpu-h200.md)
    assert ranks.exposed([ddp], 4, link) == pytest.approx(0.01462)
    fsdp = ranks.collectives("fsdp2", 2, param_bytes=1e9, grad_bytes=1e9, layers=15, micro_batches=1)
    assert [(c.kind, c.payload, c.count) for c in fsdp] == [
        ("all_gather", 1e9, 16), ("all_gather", 1e9, 16), ("reduce_scatter", 1e9, 16)]
    one = 1e9 * 0.5 / 300e9 + 16 * 1 * 10e-6  # (N-1)/N of the payload, N-1 steps per layer
    assert ranks.seconds(fsdp[0], 2, link) == pytest.approx(one)
    assert ranks.exposed(fsdp, 2, link) == pytest.approx(3 * one)
    assert ranks.collectives("ddp", 1, 1, 1, 1, 1) == []
    assert ranks.rank_phases({"forward": 1, "optimizer": 0.4, "clip": 0.2}, "fsdp2", 4) == \
        {"forward": 1, "optimizer": 0.1, "clip": 0.05}


def test_n_gpus_add_the_exposed_communication_and_multiply_the_tokens():
    table = load_table()
    h100 = table.lookup("NVIDIA H100 80GB HBM3")
    row = measured_row("x", kernel_rows(), model_name_or_path="preset:llama-tiny")
    one = project_one(row, None, table, h100)
    eight = project_one(row, None, table, h100, n=8, parallelism="ddp")
    comm = eight["proj_time_comm"]
    assert eight["proj_comm_bytes"] == 2e9  # 1e9 bf16 gradients, all-reduced once
    link = ranks.Link(329e9, 8e-6)
    [ddp] = ranks.collectives("ddp", 8, 2e9, 2e9, 2, 1)
    assert comm == pytest.approx(ranks.seconds(ddp, 8, link))
    assert eight["proj_step_time"] == pytest.approx(one["proj_step_time"] + comm)
    assert eight["proj_steady_tokens_per_second"] == pytest.approx(8 * 8192 / eight["proj_step_time"])
    assert "no overlap with compute" in eight["proj_note"] and "all_reduce 2.00 GB" in eight["proj_note"]
    no_link = project_one(row, None, table, h100, n=16, parallelism="ddp")
    assert no_link["proj_note"] == "not projected: no network figure for NVIDIA H100 80GB HBM3 in the GPU table"


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp2", "fsdp1-full_shard"])
def test_a_one_gpu_row_projected_onto_a_sharded_step_says_it_is_optimistic(parallelism):
    table = load_table()
    h100 = table.lookup("NVIDIA H100 80GB HBM3")
    row = measured_row("x", kernel_rows(), model_name_or_path="preset:llama-tiny")
    two = project_one(row, None, table, h100, n=2, parallelism=parallelism)
    assert two["proj_steady_tokens_per_second"] > 0
    said = "; optimistic: a one-GPU row has no" in two["proj_note"]
    assert said == (parallelism != "ddp")
    assert "optimistic" not in project_one(row, None, table, h100)["proj_note"]


@pytest.mark.parametrize("fsdp, own", [(None, "ddp"), ("full_shard auto_wrap", "fsdp2")])
def test_a_row_measured_on_n_gpus_projects_to_m_of_its_own_parallelism(fsdp, own):
    table = load_table()
    h100, h200 = table.lookup("NVIDIA H100 80GB HBM3"), table.lookup("NVIDIA H200")
    config = json.dumps({"version": 2}) if fsdp else None
    # measured on 2 GPUs: tokens of both ranks in the row's rate
    row = measured_row("x", kernel_rows(), model_name_or_path="preset:llama-tiny", num_gpus=2, fsdp=fsdp,
                       fsdp_config=config, steady_tokens_per_second=2 * 8192 / 5.9e-3,
                       steady_nonpad_tokens_per_second=2 * 8192 / 5.9e-3, total_parameters=100_000_000,
                       trainable_parameters=100_000_000)  # collectives shorter than the step (a step can hold them)
    same = project_one(row, None, table, h100)  # its own GPU kind and count: the measurement
    assert (same["proj_num_gpus"], same["proj_parallelism"], same["proj_source_parallelism"]) == (2, own, own)
    assert same["proj_steady_tokens_per_second"] == pytest.approx(row["steady_tokens_per_second"], rel=1e-9)
    four = project_one(row, None, table, h100, n=4)
    link = ranks.Link(329e9, 8e-6)

    def comm(n: int) -> float:
        return ranks.exposed(ranks.collectives(own, n, 2e8, 2e8, 2, 1), n, link)

    # the 2-GPU step less its modelled collectives on 2, plus those on 4; FSDP's optimizer step and clip ÷ 2 more
    sharded = (same["proj_time_optimizer"] + same["proj_time_clip"]) * (2 / 4 - 1) if own == "fsdp2" else 0.0
    assert four["proj_step_time"] == pytest.approx(5.9e-3 - comm(2) + comm(4) + sharded, rel=1e-6)
    assert four["proj_steady_tokens_per_second"] == pytest.approx(4 * 8192 / four["proj_step_time"])
    one = project_one(row, None, table, h100, n=1)  # the same work on one GPU: no collectives at all
    assert one["proj_parallelism"] == "single" and one["proj_time_comm"] == pytest.approx(-comm(2))
    other = project_one(row, None, table, h200, n=2, parallelism="fsdp2" if own == "ddp" else "ddp")
    assert other["proj_note"].startswith(f"not projected: measured with {own} on 2 GPUs")
    assert "proj_steady_tokens_per_second" not in other


def _spec_folder(root: Path, model: str, **arguments) -> Path:
    import tunebench

    lines = "".join(f"      {k}: {v}\n" for k, v in arguments.items())
    scenarios = root / "s.yaml"
    scenarios.write_text(f"scenarios:\n  - name: ranks\n    arguments:\n      model_name_or_path: [{model}]\n{lines}")
    spec = tunebench.Matrix.from_yaml(str(scenarios), device="cpu").experiments[0]
    folder = root / spec.folder_name
    folder.mkdir()
    spec.write(folder, [])
    return folder


@pytest.mark.slow
def test_ddp_per_rank_memory_and_payload_against_a_real_two_process_gloo_run(tmp_path):
    """The 1-process experiment projected to 2 DDP ranks against the same experiment run on 2 gloo processes."""
    settings = dict(peft_method="none", max_steps=6, torch_dtype="float32", bf16="false", per_device_train_batch_size=2,
                    max_seq_len=64, synthetic_num_samples=64)
    scenarios = tmp_path / "run.yaml"
    scenarios.write_text("scenarios:\n  - name: ranks\n    arguments:\n      model_name_or_path: [preset:llama-tiny]\n"
                         + "".join(f"      {k}: {v}\n" for k, v in settings.items()))
    results = tmp_path / "results"
    done = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "--device", "cpu", "--scenarios_config_path",
                           str(scenarios), "--num_gpus_matrix", "2", "--results_output_path", str(results)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    measured = pd.read_csv(results / "raw_summary.csv").iloc[0]
    single = _spec_folder(tmp_path, "preset:llama-tiny", **settings)
    predicted = verdict(single, 2, "ddp", None, None, device_type="cpu")
    for category in ("params", "grads", "optimizer", "buffers"):
        assert predicted[f"pred_mem_{category}"] == measured[f"scan_mem_{category}"], category
    assert abs(predicted["pred_mem_activations"] / measured["scan_mem_activations"] - 1) < 1e-3
    scan = json.loads(next(results.glob("ranks_*/scan.rank0.json")).read_text())
    [ddp] = ranks.collectives("ddp", 2, 0, measured["trainable_parameters"] * 4, 2, 1)
    assert scan["collectives"]["kinds"]["all_reduce"]["bytes_by_dtype"]["float"] == ddp.payload


@pytest.mark.slow
def test_fsdp2_shard_and_payloads_against_a_real_two_process_gloo_run(tmp_path):
    """tests/dist/collectives_worker.py's FSDP2 run (accelerate runs FSDP only on GPUs): its per-rank parameter
    shard and its all-gather / reduce payloads against the projection's, for the same model."""
    from transformers import LlamaConfig

    model = tmp_path / "model"
    LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False).save_pretrained(model)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_port()), str(REPO / "tests/dist/collectives_worker.py"), "fsdp2", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads((out / "expected.json").read_text())
    folder = _spec_folder(tmp_path, str(model), torch_dtype="float32", bf16="false", max_seq_len=32)
    predicted = verdict(folder, 2, "fsdp2", None, None, device_type="cpu")
    all_bytes = expected["layer_param_bytes"] + expected["root_param_bytes"]
    comms = ranks.collectives("fsdp2", 2, all_bytes, expected["grad_bytes"], 2, 1)
    for rank in (0, 1):
        scan = json.loads((out / f"scan.rank{rank}.json").read_text())
        assert predicted["pred_mem_params"] == scan["local_param_bytes"]
        kinds = scan["collectives"]["kinds"]
        assert kinds["all_gather"]["bytes_by_dtype"]["float"] == sum(c.payload for c in comms if c.kind == "all_gather")
        reduced = kinds.get("reduce_scatter") or kinds["all_reduce"]  # gloo reduces with all-reduce
        assert reduced["bytes_by_dtype"]["float"] == next(c.payload for c in comms if c.kind == "reduce_scatter")


def _port() -> int:
    from tunebench.execution.launchers.base import free_port

    return free_port()


def test_a_qlora_fsdp2_row_projects_onto_its_own_gpus_and_says_why_not_onto_another_link():
    """FSDP over a 4-bit base gathers bytes the model does not size: onto another link its collectives cannot be
    said, but onto its own GPU kind and count they are the measured ones (the self-projection was empty)."""
    table = load_table()
    h100, pcie = table.lookup("NVIDIA H100 80GB HBM3"), table.lookup("NVIDIA H100 PCIe")
    row = measured_row("x", kernel_rows(), model_name_or_path="preset:llama-tiny", num_gpus=2,
                       fsdp="full_shard auto_wrap", fsdp_config=json.dumps({"version": 2}), quantization="bnb-4bit",
                       steady_tokens_per_second=2 * 8192 / 5.9e-3, steady_nonpad_tokens_per_second=2 * 8192 / 5.9e-3)
    same = project_one(row, None, table, h100)
    assert same["proj_steady_tokens_per_second"] == pytest.approx(row["steady_tokens_per_second"], rel=1e-9)
    assert same["proj_time_comm"] == 0.0
    assert "2× fsdp2 over the link it was measured on: its collectives kept as measured (FSDP over a quantized " \
           "base" in same["proj_note"]
    other = project_one(row, None, table, pcie)
    assert other["proj_note"] == ("not projected: FSDP over a quantized base: the bytes its 4-bit weights gather are "
                                  "not modelled")
