"""Helpers for harness tests: a temporary set of YAML inputs using the tiny preset."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# 10 steps: warm-up 1-3 with the memory scan on step 2, phase-timed steps 4-10, steady steps 4-10.
TINY_DEFAULTS = {
    "max_steps": 10, "max_seq_len": 64, "logging_strategy": "no", "save_strategy": "no", "report_to": "none",
    "torch_dtype": "float32", "bf16": False, "synthetic_num_samples": 64, "per_device_train_batch_size": 2,
    "learning_rate": 1e-3, "steady_warmup_steps": 3, "steady_min_steps": 5, "synthetic_length_distribution": "uniform",
    "optim": "adamw_torch_fused", "logging_nan_inf_filter": False, "gradient_checkpointing": False,  # TRL defaults to True
}


def write_inputs(folder: Path, scenarios: list[dict], defaults: dict | None = None, framework_configs: dict | None = None,
                 raw_scenarios: str | None = None) -> list[str]:
    """Write the three YAML files and return the benchmark.py options that point at them."""
    (folder / "scenarios.yaml").write_text(raw_scenarios if raw_scenarios is not None else yaml.safe_dump({"scenarios": scenarios}))
    (folder / "defaults.yaml").write_text(yaml.safe_dump(TINY_DEFAULTS if defaults is None else defaults))
    (folder / "framework_configs.yaml").write_text(yaml.safe_dump({"framework_configs": framework_configs or {
        "gradient-checkpointing": {"arguments": {"gradient_checkpointing": True}}}}))
    return ["--scenarios_config_path", str(folder / "scenarios.yaml"), "--defaults_config_path",
            str(folder / "defaults.yaml"), "--framework_configs_path", str(folder / "framework_configs.yaml"),
            "--device", "cpu"]


def tiny_scenario(name: str = "full", **arguments) -> dict:
    return {"name": name, "framework_config": [None],
            "arguments": {"model_name_or_path": ["preset:llama-tiny"], **arguments}}
