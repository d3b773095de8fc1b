"""tunebench.experiment.fms.compat: fms imported with only the plugins a config needs (a broken one, aadp on today's
trl, no longer fails the rest), its moved import, foak's bnb dequantization mended, and what fms's loaders change
process-wide put back. fms patches a process for good: what imports it runs in a child interpreter here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.fixtures.harness import REPO
from tunebench.experiment.fms.compat import Restored, foak_bnb_dequantize, import_failure, installed

needs_fms = pytest.mark.skipif(not (installed("fms_acceleration_peft") and installed("fms_acceleration_foak")),
                               reason="fms-acceleration's plugins are not installed (scripts/install_deps.py --fms)")


def child(code: str) -> dict:
    """Run `code` in a new interpreter (the repository on its path); it prints one JSON line, returned here."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@needs_fms
def test_only_the_needed_plugins_are_imported():
    found = child("""
        import json, sys
        from tunebench.experiment.fms.compat import import_framework
        fms = import_framework(["fms_acceleration", "fms_acceleration_peft"])
        from fms_acceleration.framework_plugin import PLUGIN_REGISTRATIONS
        print(json.dumps({"plugins": sorted(r.plugin.__name__ for r in PLUGIN_REGISTRATIONS),
                          "foak": sys.modules.get("fms_acceleration_foak", "absent") is None}))
    """)
    assert found == {"plugins": ["AutoGPTQAccelerationPlugin", "BNBAccelerationPlugin"], "foak": True}


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@pytest.mark.skipif(not installed("fms_acceleration_aadp"), reason="fms-acceleration-aadp is not installed")
def test_a_broken_plugin_package_is_named_with_its_cause():
    found = child("""
        import json
        from tunebench.experiment.fms.compat import import_framework
        try:
            import_framework(["fms_acceleration_peft", "fms_acceleration_aadp"])
        except ImportError as exc:
            print(json.dumps({"error": str(exc)}))
    """)
    assert found["error"].startswith("fms-acceleration-aadp cannot be imported here")
    assert "removed in trl 0.20" in found["error"]


def test_import_failure_without_a_known_cause():
    assert import_failure("fms_acceleration_moe", ImportError("no module named scattermoe")) == (
        "fms-acceleration-moe cannot be imported here (ImportError: no module named scattermoe)")


def test_restored_puts_back_what_a_loader_changed():
    original = torch.nn.init.kaiming_uniform_
    with Restored() as restored:
        torch.nn.init.kaiming_uniform_ = lambda *args, **kwargs: None  # fms's GPTQ loader does this
        torch.nn.init.normal_ = torch.nn.init.normal_  # the same object: not a change
    assert torch.nn.init.kaiming_uniform_ is original
    assert restored.restored == ["torch.nn.init.kaiming_uniform_"]


@pytest.mark.skipif(not installed("bitsandbytes"), reason="bitsandbytes is not installed")
def test_foak_dequantize_is_bitsandbytes_dequantize():
    """The mend dequantizes NF4 with double quantization exactly as bitsandbytes does (a weight stored as one row
    comes back transposed, as foak's own code expects)."""
    import bitsandbytes.functional as F

    torch.manual_seed(0)
    weight = torch.randn(64, 128, dtype=torch.bfloat16) * 0.02
    packed, state = F.quantize_4bit(weight, quant_type="nf4", compress_statistics=True)
    assert torch.equal(foak_bnb_dequantize(packed, state), F.dequantize_4bit(packed, state))
    assert (foak_bnb_dequantize(packed, state).float() - weight.float()).abs().max() < 0.01
    assert foak_bnb_dequantize(weight, None) is weight


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@needs_fms
def test_foak_lora_matmul_runs_on_bitsandbytes_050_after_the_mend():
    """foak's fused LoRA matmul on a bnb NF4 weight: a TypeError before the mend (pre-0.50 C arguments), then
    X W^T + s X A^T B^T as torch computes it."""
    found = child("""
        import json, torch
        import bitsandbytes.functional as F
        from tunebench.experiment.fms.compat import import_framework, mend_foak_bnb
        import_framework(["fms_acceleration_foak", "fms_acceleration_peft"])
        from fms_acceleration_foak.fused_ops.unsloth_lora import utils
        torch.manual_seed(0)
        W = torch.randn(32, 64) * 0.02
        packed, state = F.quantize_4bit(W, quant_type="nf4", compress_statistics=True)
        X, A, B = torch.randn(4, 64), torch.randn(8, 64) * 0.1, torch.randn(32, 8) * 0.1
        try:
            utils.matmul_lora(X, packed, state, A, B, 2.0)
            before = "ran"
        except Exception as exc:
            before = type(exc).__name__
        mended = mend_foak_bnb()
        out = utils.matmul_lora(X, packed, state, A, B, 2.0)
        reference = X @ F.dequantize_4bit(packed, state).t() + 2.0 * (X @ A.t()) @ B.t()
        print(json.dumps({"before": before, "mended": mended, "diff": (out - reference).abs().max().item()}))
    """)
    assert found["before"] != "ran"  # a GPU meets the pre-0.50 C arguments (TypeError); a CPU, its CUDA buffers
    assert "fms_acceleration_foak.fused_ops.unsloth_lora.utils.fast_dequantize -> " \
           "bitsandbytes.functional.dequantize_4bit" in found["mended"]
    assert found["diff"] < 1e-5
