"""tunebench.experiment.fms.seam end to end on a CPU: fms's own AccelerationFramework (model_loader, augmentation,
get_callbacks_and_ready_for_train) inside the training entry, in fresh interpreters, on preset:llama-tiny.

The bitsandbytes plugins run as they are (bitsandbytes has CPU kernels); the GPTQ plugin runs with the two things a
CPU lacks faked by tests/fixtures/fms_cpu.py (its import-time CUDA check, its Triton dequantization kernel replaced by
the same arithmetic in torch). The harness itself skips GPTQ rows on a CPU, saying why."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from tests.fixtures.harness import REPO, TINY_DEFAULTS, write_inputs
from tunebench.experiment.fms.compat import installed

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration is not installed")]

FMS_CONFIGS = ("accelerated-peft-autogptq", "baseline-peft-bnb", "accelerated-peft-bnb")
LORA = {"peft_method": "lora", "r": 8, "lora_alpha": 16, "target_modules": "q_proj v_proj", "max_steps": 6,
        "steady_warmup_steps": 2, "steady_min_steps": 2, "scan_steps": "1"}
LORA_PARAMETERS = 2 * (64 * 8 + 8 * 64 + 64 * 8 + 8 * 32)  # llama-tiny: q (64→64) and v (64→32) in 2 layers


def _inputs(folder):
    shipped = yaml.safe_load((REPO / "framework_configs.yaml").read_text())["framework_configs"]
    options = write_inputs(folder, [{"name": "peft", "framework_config": [None, *FMS_CONFIGS],
                                     "arguments": {"model_name_or_path": ["preset:llama-tiny"], **LORA}}],
                           defaults={**TINY_DEFAULTS, "torch_dtype": "bfloat16", "bf16": True},
                           framework_configs={name: shipped[name] for name in FMS_CONFIGS})
    return options


def _harness(options, out, *extra):
    done = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path", str(out),
                           *extra], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def _rows(out) -> dict[str, dict]:
    return {json.loads(p.read_text())["framework_config"]: json.loads(p.read_text())
            for p in out.glob("*/results.json")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fms")
    options = _inputs(folder)
    _harness(options, folder / "dry", "--dry_run")
    [gptq] = [p.parent for p in (folder / "dry").glob("*/spec.json")
              if json.loads(p.read_text())["framework_config"] == "accelerated-peft-autogptq"]
    entry = subprocess.run([sys.executable, "-m", "tests.fixtures.fms_cpu", str(gptq / "spec.json")], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert entry.returncode == 0, entry.stderr[-3000:]
    _harness(options, folder / "run")
    return {"gptq": json.loads((gptq / "results.json").read_text()), "rows": _rows(folder / "run")}


def test_gptq_through_fms_loader_trains_lora_from_the_same_random_weights(run):
    row, baseline = run["gptq"], run["rows"]["none"]
    assert row["status"] == "ok" and row["fms_plugins"] == "auto_gptq"
    assert row["quantization"] == "gptq-4bit-g128-rtn"
    assert row["trainable_parameters"] == LORA_PARAMETERS == baseline["trainable_parameters"]
    assert row["fms_versions"].startswith("fms-acceleration==0.6.4;fms-acceleration-peft==0.4.4")
    # the step-1 loss of a LoRA model is its base's (B starts at zero): the 4-bit grid moves it by rounding only
    assert math.isfinite(row["loss_first_step"])
    assert abs(row["loss_first_step"] - baseline["loss_first_step"]) / baseline["loss_first_step"] < 0.01


def test_the_gptq_loader_s_process_wide_init_bug_is_contained(run):
    patches = run["gptq"]["fms_patches"].split(";")
    for name in ("kaiming_uniform_", "uniform_", "normal_"):
        assert f"model_loader left torch.nn.init.{name} changed: restored" in patches
    assert "model_loader left AutoModelForCausalLM.from_config changed: restored" in patches
    assert math.isfinite(run["gptq"]["train_loss"])  # LoRA's A initialised: without the restore, NaN


def test_bnb_plugins_run_in_fresh_interpreters(run):
    for name in ("baseline-peft-bnb", "accelerated-peft-bnb"):
        row = run["rows"][name]
        assert row["status"] == "ok", row.get("error_messages")
        assert row["quantization"] == "bnb-4bit-nf4-dq" and row["fms_plugins"] == "bitsandbytes"
        assert row["startup_preloaded"] is False
        assert row["trainable_parameters"] == LORA_PARAMETERS
        assert math.isfinite(row["train_loss"])


def test_the_harness_skips_gptq_on_a_cpu(run):
    row = run["rows"]["accelerated-peft-autogptq"]
    assert row["status"] == "skipped"
    assert row["error_messages"] == ("fms's GPTQ dequantization is a Triton GPU kernel: there is none for the CPU "
                                     "(run it on a GPU)")


def test_space_separated_target_modules_were_split(run):
    """fms's `target_modules: "q_proj v_proj"`: LoRA on both (PEFT would take the string as one pattern: none)."""
    assert run["rows"]["none"]["trainable_parameters"] == LORA_PARAMETERS
