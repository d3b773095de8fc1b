"""Zero-code mode: an unmodified plain-Trainer script gets a Scanner through sitecustomize + env var."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.harness import REPO

AUTOINJECT = REPO / "scanner" / "autoinject"

PLAIN_SCRIPT = textwrap.dedent(
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)
    rows = [{"input_ids": torch.randint(0, 256, (16,))} for _ in range(32)]
    for r in rows:
        r["labels"] = r["input_ids"]
    args = TrainingArguments(output_dir=OUT, per_device_train_batch_size=2, max_steps=6, report_to=[],
                             use_cpu=True, save_strategy="no", disable_tqdm=True, logging_strategy="no")
    Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=rows).train()
    print("TRAINED")
    """
)


def _run(tmp_path, env_value, code=None):
    script = tmp_path / "plain_train.py"
    script.write_text(f"OUT = {str(tmp_path / 'out')!r}\n" + PLAIN_SCRIPT)
    # a pre-existing sitecustomize further down the path must still run (chaining)
    other = tmp_path / "other_site"
    other.mkdir(exist_ok=True)
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITECUSTOMIZE_RAN'] = '1'\n")
    env = {k: v for k, v in os.environ.items() if k != "SCANNER_AUTOINJECT"}
    env["PYTHONPATH"] = os.pathsep.join([str(AUTOINJECT), str(other)])
    if env_value is not None:
        env["SCANNER_AUTOINJECT"] = env_value
    cmd = [sys.executable, "-c", code] if code else [sys.executable, str(script)]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_autoinject_scans_unmodified_script(tmp_path):
    out = tmp_path / "scan.json"
    proc = _run(tmp_path, json.dumps({"steps": 4, "output": str(out)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TRAINED" in proc.stdout
    report = json.loads(out.read_text())
    step = report["steps"][0]
    assert step["step"] == 4 and step["micro_batches"] == 1 and step["tokens"] == 2 * 16
    assert step["mem_params"] > 0 and step["time_step"] > 0


def test_autoinject_is_lazy_noop_without_env_and_chains(tmp_path):
    code = (
        "import os, sys; print('transformers' in sys.modules, 'torch' in sys.modules, "
        "os.environ.get('OTHER_SITECUSTOMIZE_RAN'))"
    )
    assert _run(tmp_path, None, code).stdout.split() == ["False", "False", "1"]
    # enabled: still nothing heavy imported at start; the patch waits for transformers.trainer
    proc = _run(tmp_path, "1", code)
    assert proc.stdout.split() == ["False", "False", "1"], proc.stderr[-2000:]


def test_autoinject_bad_options_fail_at_start(tmp_path):
    proc = _run(tmp_path, '{"steps": 0}', "print('ran')")
    assert proc.returncode != 0 and "1-based" in proc.stderr
    proc = _run(tmp_path, "not json", "print('ran')")
    assert proc.returncode != 0 and "SCANNER_AUTOINJECT" in proc.stderr
