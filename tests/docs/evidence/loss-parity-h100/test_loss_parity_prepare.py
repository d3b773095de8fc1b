"""The issue-45 GPU runner's preparation, on CPU: each step's passes split the configs as promised (the plain pass
never loads bitsandbytes, the bnb pass holds every config that does)."""

import subprocess
import sys

import yaml

from tests.fixtures.harness import EVIDENCE, load_script

HERE = EVIDENCE / "loss-parity-h100"


def test_each_step_splits_its_configs_into_a_plain_and_a_bitsandbytes_pass(tmp_path):
    prepare = load_script(HERE / "loss_parity_prepare.py")
    configs = prepare.framework_configs()
    scenarios = yaml.safe_load((HERE / "scenarios-loss-parity.yaml").read_text())["scenarios"]
    assert {s["name"] for s in scenarios} == {n for names in prepare.STEPS.values() for n in names}
    for scenario in scenarios:
        assert all(name is None or name in configs for name in scenario["framework_config"]), scenario["name"]
        bands = [n for n in scenario["framework_config"] if n and n.startswith("loss-band-")]
        assert None in scenario["framework_config"] and (bands or scenario["name"] == "z-packed-1b")
    for step in prepare.STEPS:
        passes = {}
        for which in ("plain", "bnb"):
            subprocess.run([sys.executable, str(HERE / "loss_parity_prepare.py"), "--step", step,
                            "--pass", which, "--out", str(tmp_path)], check=True, capture_output=True)
            written = yaml.safe_load((tmp_path / f"scenarios-{which}.yaml").read_text())["scenarios"]
            passes[which] = {(s["name"], c) for s in written for c in s["framework_config"]}
        assert all(prepare.uses_bitsandbytes(configs[c]) for _, c in passes["bnb"])
        assert not any(c and prepare.uses_bitsandbytes(configs[c]) for _, c in passes["plain"])
        if step in ("1b", "7b"):  # their rows compare 8-bit AdamW; later steps (8b-long, fp32...) run other rows
            assert ("z-full-1b" if step == "1b" else "z-lora-8b", "adamw-8bit") in passes["bnb"]
