"""`benchmark.py verify` on CPU: scanner vs torch's MemTracker on the same step, and the scan's cost (issue I).

Reached through the modules it calls (verify's output and a local model's config.json check):
tunebench/verify/output.py, tunebench/experiment/model_config.py."""

import json

import pytest

from tunebench import cli


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@pytest.mark.parametrize("extra", [[], ["--peft", "lora", "--gradient_checkpointing"]])
def test_verify_on_cpu_agrees_with_memtracker(tmp_path, capsys, extra):
    out = tmp_path / "verify.json"
    code = cli.main(["verify", "--device", "cpu", "--out", str(out), *extra])
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads(out.read_text())
    by = {row["category"]: row for row in result["categories"]}
    assert set(by) == {"params", "buffers", "optimizer", "activations"}  # CPU: no grads-at-peak, no temporaries
    for exact in ("params", "buffers", "optimizer"):
        assert by[exact]["scanner_bytes"] == by[exact]["memtracker_bytes"], exact
    assert abs(by["activations"]["difference"]) < 0.03
    # The scanner's reported step and the step timer's time of that same step: two clocks around one step (their
    # marks are taken by two callbacks back to back, so a busy machine can preempt between them: a relative and
    # an absolute slack). A step far from the run's median is reported by reported_step_vs_median, not failed.
    assert len(result["step_seconds"]) == 16 and result["reported_step_vs_median"] is not None
    timer_seconds = result["step_seconds"][int(result["reported_step"]) - 1]
    assert abs(result["reported_step_seconds"] - timer_seconds) < 0.25 * timer_seconds + 0.1
    assert "scanner vs MemTracker" in printed and "activations" in printed
    lines = printed.splitlines()
    assert "  category        scanner bytes  MemTracker bytes  difference" in lines
    assert lines[-1] == "verdict: PASS: every category within ±3.00 % of MemTracker"
    assert "difference = (scanner - MemTracker) / MemTracker" in printed
    assert "{'train_runtime'" not in printed and "gemm_4bit" not in printed  # no library noise


@pytest.mark.parametrize("argv,line", [
    (["--steps", "4"], "benchmark.py verify: --steps 4: out of range (fix: give a value >= 5 and <= 10,000)"),
    (["--tolerance", "nan"], "benchmark.py verify: --tolerance nan: out of range (fix: give a value > 0 and <= 1)"),
    (["--batch", "100000"], "benchmark.py verify: --batch 100000: out of range (fix: give a value >= 1 and <= 4,096)"),
    (["--steps", "10000", "--batch", "4096", "--seq", "1024"],
     "benchmark.py verify: --steps × --batch × --grad_accum × --seq = 41,943,040,000 tokens, more than the "
     "134,217,728 verify builds in memory (fix: smaller values)"),
    (["--steps", "x"], "benchmark.py verify: argument --steps: invalid int value: 'x' (fix: see `benchmark.py verify "
     "--help`)"),
])
def test_verify_bad_options_exit_2_in_one_line(capsys, argv, line):
    assert cli.main(["verify", "--device", "cpu", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_verify_names_every_bad_option_at_once(capsys):
    """Issue AC: verify said the first problem only; three took three round trips."""
    assert cli.main(["verify", "--device", "cpu", "--steps", "5", "--quantization", "qlora",
                     "--model", "/nonexistent/model"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "benchmark.py verify: 3 problem(s); nothing was run:"
    assert lines[1] == "  - needs --steps >= --scan_step + 3 (fix: e.g. --steps 16)"
    assert lines[2] == "  - --quantization qlora: a quantized base trains LoRA adapters only (fix: add --peft lora)"
    assert lines[3].startswith("  - --model: local model directory '/nonexistent/model' does not exist") and \
        len(lines) == 4


def test_verify_refuses_a_local_model_whose_config_is_not_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    assert cli.main(["verify", "--device", "cpu", "--model", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"benchmark.py verify: --model: {tmp_path / 'config.json'}: not JSON (")


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_holder_split_follows_every_op_memtracker_tracks(checkpointing):
    """verify's split of MemTracker's peak by the scanner's rules (on CUDA) sees the step MemTracker sees: the peak
    the rules locate equals MemTracker's own, and the split never exceeds it. Run here on CPU tensors."""
    import torch
    from transformers import Trainer, TrainingArguments

    from tunebench.experiment.entry_parser import checkpointing_renames
    from tunebench.experiment.models import load_model
    from tunebench.verify.memtracker_step import MemTrackerStep

    torch.manual_seed(0)
    names = checkpointing_renames()
    args = TrainingArguments(output_dir="/tmp/tunebench-holder-split", max_steps=3, use_cpu=True,
                             per_device_train_batch_size=2, gradient_accumulation_steps=2, report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             **{names.get("gradient_checkpointing", "gradient_checkpointing"): checkpointing,
                                names.get("gradient_checkpointing_kwargs", "gradient_checkpointing_kwargs"):
                                    {"use_reentrant": False}})
    rows = [{"input_ids": ids, "labels": ids.clone()} for ids in torch.randint(3, 259, (12, 32))]
    step = MemTrackerStep(3, split_by_holder=True)
    Trainer(model=load_model("preset:llama-tiny", "float32"), args=args, train_dataset=rows, callbacks=[step]).train()
    assert step.split is not None and step.split["peak"] == step.peak["Total"] > 0
    assert 0 < step.split["activations"] + step.split["grads"] <= step.peak["Total"]
