"""tunebench.matrix.fms_configs and fms's scenario file as an fms user brings it (tests/data/fms_scenarios.yaml):
fms's own names, fp16 over bf16 defaults, space-separated target modules, its keypairs option and its CSV."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

import tunebench
from tests.fixtures.harness import DATA, REPO
from tunebench.errors import InputError, InputProblem
from tunebench.experiment.fms.compat import installed
from tunebench.matrix.fms_configs import fms_framework_configs, pairs_of

GPTQ_FILE = {"plugins": {"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True,
                                                                 "use_external_lib": False}}}}}
needs_fms = pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration is not installed")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@needs_fms
def test_fms_s_scenario_file_runs_as_written():
    matrix = tunebench.Matrix.from_yaml(str(DATA / "fms_scenarios.yaml"), device="cuda", include_slow=True)
    gptq = [e for e in matrix.experiments if e.framework_config.name.startswith("accelerated-peft-autogptq")]
    assert {e.framework_config.name for e in gptq} == {"accelerated-peft-autogptq", "accelerated-peft-autogptq-foak"}
    for experiment in gptq:  # the scenario's fp16 over defaults.yaml's bf16, as fms resolves it
        assert experiment.value("training", "fp16") is True and experiment.value("training", "bf16") is False
        assert experiment.value("model", "torch_dtype") == "float16"
        assert experiment.value("peft", "target_modules") == ["q_proj", "k_proj", "v_proj", "o_proj"]
    bnb = [e for e in matrix.experiments if e.scenario == "accelerated-peft-bnb"]
    assert bnb and all(e.value("training", "bf16") is True for e in bnb)
    assert {e.framework_config.name for e in matrix.experiments} >= {
        "none", "foak-fast-kernels", "baseline-peft-bnb", "accelerated-peft-bnb", "accelerated-peft-bnb-foak"}


@needs_fms
def test_a_user_s_sample_configuration_under_a_name_of_their_own(tmp_path):
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(GPTQ_FILE))
    scenario = {"name": "gptq", "framework_config": ["my-gptq"],
                "arguments": {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora"}}
    matrix = tunebench.Matrix.from_scenarios([scenario], device="cuda",
                                             fms_configs={"my-gptq": str(tmp_path / "mine.yaml")})
    [experiment] = matrix.experiments
    assert json.loads(experiment.value("model", "fms_plugins")) == GPTQ_FILE["plugins"]
    assert experiment.value("training", "fp16") is True and experiment.value("model", "torch_dtype") == "float16"


def test_keypairs_problems(tmp_path):
    problems: list[InputProblem] = []
    assert pairs_of(["a", "x.yaml", "b"], problems) == {} and "NAME FILE pairs" in problems[0].message
    assert pairs_of(["a", "x.yaml", "a", "y.yaml"], problems) == {"a": "y.yaml"}
    assert problems[1].message == "'a' is given twice"
    (tmp_path / "empty.yaml").write_text("plugins: {}\n")
    found: list[InputProblem] = []
    assert fms_framework_configs({"none": "x.yaml", "e": str(tmp_path / "empty.yaml"),
                                  "m": str(tmp_path / "missing.yaml")}, {}, found) == {}
    assert [(p.key, p.message.split(":")[0]) for p in found] == [
        ("--acceleration_framework_config_keypairs", "'none' is the baseline's name"),
        ("plugins", "no `plugins"), ("-", "file not found")]


def test_mixed_precision_conflict_names_both_files(tmp_path):
    scenario = {"name": "gptq", "framework_config": ["accelerated-peft-autogptq"],
                "arguments": {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora", "bf16": True}}
    with pytest.raises(InputError) as caught:
        tunebench.Matrix.from_scenarios([scenario], device="cuda")
    [problem] = caught.value.problems
    assert "scenario 'gptq' sets bf16: true" in problem.message
    assert "framework_configs.yaml: framework config 'accelerated-peft-autogptq' sets fp16: true" in problem.message


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_fms_options_are_accepted_with_one_line_each(tmp_path):
    fms_options = ["--dataset_save_path", "benchmark_outputs/data", "--process_port", "29511"]
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ACCELERATION_FRAMEWORK_CONFIG_FILE": "x"}
    done = subprocess.run([sys.executable, str(REPO / "benchmark.py"), "--device", "cpu", "--dry_run",
                           "--results_output_path", str(tmp_path / "out"), *fms_options], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=environment)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--dataset_save_path is fms-acceleration's data cache" in done.stderr
    assert "--process_port is fms-acceleration's accelerate port" in done.stderr
    assert "ACCELERATION_FRAMEWORK_CONFIG_FILE is fms-hf-tuning's" in done.stderr


def test_compare_reads_fms_s_reference_csv(tmp_path):
    from tunebench.results.compare.reading import load_csv

    frame = load_csv(REPO / "refs" / "fms" / "a100_80gb.csv", "reference")
    assert "train_tokens_per_second_per_device" in frame.columns and "train_tokens_per_second" not in frame.columns
    row = frame[(frame.framework_config == "accelerated-peft-autogptq") & (frame.num_gpus == 1)
                & (frame.per_device_train_batch_size == 4)].iloc[0]
    assert row.model_name_or_path == "preset:mistral-7b" and row.train_tokens_per_second_per_device == 3455.406
    assert (frame[frame.framework_config == "none"].peft_method.isin(["none", "lora"])).all()
    assert "TheBloke/Mistral-7B-v0.1-GPTQ → preset:mistral-7b" in frame.attrs["notes"][0]


# fms-acceleration's sample configurations (sample-configurations/CONTENTS.yaml at 876e2ed6fc4e): an fms user's
# scenario file names them.
FMS_NAMES = (
    "accelerated-peft-autogptq", "accelerated-peft-bnb", "baseline-peft-bnb", "accelerated-peft-autogptq-foak",
    "accelerated-peft-autogptq-foak-liger", "accelerated-peft-bnb-foak", "accelerated-peft-bnb-foak-liger",
    "aadp-padding-free", "aadp-padding-free-multipack", "accelerated-peft-bnb-padding-free",
    "accelerated-peft-autogptq-padding-free", "accelerated-peft-bnb-foak-padding-free",
    "accelerated-peft-autogptq-foak-padding-free", "foak-fast-kernels", "foak-fast-kernels-liger",
    *(f"moe-scattermoe-granite-ep{n}{suffix}" for n in (1, 2, 4) for suffix in ("", "-padding-free",
                                                                                  "-padding-free-foak")),
    "moe-scattermoe-granite-ep8", "moe-scattermoe-granite-ep8-foak")


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@needs_fms
def test_every_fms_sample_configuration_is_a_framework_config_fms_accepts():
    from tunebench.experiment.fms.checks import probe
    from tunebench.experiment.fms.settings import fms_plugins_of
    from tunebench.matrix.inputs import load_framework_configs

    problems: list[InputProblem] = []
    shipped = load_framework_configs(REPO / "framework_configs.yaml", problems)
    assert problems == [] and set(FMS_NAMES) <= set(shipped)
    bodies = {name: fms_plugins_of(shipped[name].arguments["fms_plugins"]) for name in FMS_NAMES}
    assert all(plugins.unknown_paths == [] for plugins in bodies.values())
    answer = probe(tuple(sorted({p.text() for p in bodies.values() if p.packages[-1] != "fms_acceleration_moe"})))
    # fms's own check of each body whose plugins import here (aadp's and moe's do not: their rows are skipped)
    checked = {text: facts for text, facts in answer["bodies"].items() if facts["plugins"]}
    assert checked and all(facts["config_errors"] == [] for facts in checked.values())
