"""What the plan reads of an experiment (planning.predict.shape_and_sharding): the shipped framework configs'
settings that change a step's memory reach the fake step."""

from __future__ import annotations

import pytest
import yaml

from tests.fixtures.harness import REPO

CONFIGS = yaml.safe_load((REPO / "framework_configs.yaml").read_text())["framework_configs"]


def _shape(config: str | None):
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.matrix.validation import typed
    from tunebench.planning.predict import shape_and_sharding

    values = {"model_name_or_path": "preset:llama-tiny", "peft_method": "none", "per_device_train_batch_size": 2,
              "max_seq_len": 32, "synthetic_num_samples": 8, "synthetic_length_distribution": "fixed",
              **(CONFIGS[config]["arguments"] if config else {})}
    return shape_and_sharding(typed([ExperimentSpec("s", FrameworkConfig(config), 1, "cuda", values)])[0])[0]


@pytest.mark.parametrize("config", [None, *sorted(c for c in CONFIGS if c.startswith("loss-band"))])
def test_the_last_bit_band_configs_plan_their_hooks_and_no_other_config_does(config):
    assert _shape(config).last_bit == (config or "").startswith("loss-band-bits-")
