"""A GPU named is a GPU planned, from one GPU table: `--plan_device <GPU>` plans for CUDA (the same `pred_*` as with
`--device cuda`), a contradicting `--device cpu` is one line naming both options, and every consumer (plan, the fit
map, the projection, tune) resolves a name to the same entry of the one table."""

from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import tunebench
from tests.fixtures.harness import REPO, TINY_DEFAULTS, tiny_scenario, write_inputs
from tunebench import cli
from tunebench.errors import InputError
from tunebench.hardware.gpus import load_table, resolve
from tunebench.planning.gpu_target import plan_target

H100 = "NVIDIA H100 80GB HBM3"
# What --plan_device resolved to before the one table (predict.py's DEVICE_MIB and attention_kernels.py's _ARCH):
# the same names must give the same memory and compute capability now.
LEGACY_MIB = {"NVIDIA H200": 143771, H100: 81559, "NVIDIA H100 NVL": 95830, "NVIDIA H100 PCIe": 81559,
              "H100": 81559, "NVIDIA A100-SXM4-80GB": 81920, "NVIDIA A100 80GB PCIe": 81920,
              "NVIDIA A100-SXM4-40GB": 40960, "NVIDIA L40S": 46068, "NVIDIA L4": 23034, "NVIDIA B200": 183359,
              "NVIDIA A10G": 23028}
LEGACY_ARCH = {"NVIDIA H200": 90, H100: 90, "NVIDIA B200": 100, "NVIDIA A100-SXM4-80GB": 80, "NVIDIA A10G": 86,
               "NVIDIA L40S": 89, "NVIDIA L4": 89}


@pytest.fixture
def no_gpu_here(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi: `--device auto` finds no GPU


def _auto(options: list[str]) -> list[str]:
    return [a for i, a in enumerate(options) if a != "--device" and options[i - 1] != "--device"]


def _plan(tmp_path: Path, name: str, options: list[str], *extra: str) -> pd.DataFrame:
    assert cli.main(["plan", *options, "--results_output_path", str(tmp_path / name), *extra]) == 0
    return pd.read_csv(tmp_path / name / ("fit_map.csv" if "--fit_map" in extra else "plan.csv"))


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_a_gpu_named_alone_plans_for_cuda_as_device_cuda_does(tmp_path, no_gpu_here):
    options = write_inputs(tmp_path, [tiny_scenario(), tiny_scenario("lora", peft_method="lora")])
    alone = _plan(tmp_path, "alone", _auto(options), "--plan_device", H100)
    cuda = _plan(tmp_path, "cuda", _auto(options), "--device", "cuda", "--plan_device", H100)
    predicted = [c for c in cuda.columns if c.startswith("pred_") and c != "pred_seconds"]
    assert len(predicted) > 15 and set(alone["device_type"]) == {"cuda"}
    pd.testing.assert_frame_equal(alone[predicted], cuda[predicted])
    # CUDA's plan, not the CPU's: allocator blocks, the GPU's attention kernel (float32 heads: memory-efficient),
    # the H100's memory
    assert (alone["pred_mem_params"] % 512 == 0).all() and set(alone["pred_attention"]) == {"efficient"}
    assert (alone["pred_capacity_bytes"] == 81559 * 1024**2).all()
    budget = _plan(tmp_path, "budget", _auto(options), "--plan_device", "80GiB")  # a size names no GPU
    assert set(budget["device_type"]) == {"cpu"}
    fit_alone = _plan(tmp_path, "map-alone", _auto(options), "--fit_map", "--plan_device", H100)
    fit_cuda = _plan(tmp_path, "map-cuda", _auto(options), "--device", "cuda", "--fit_map", "--plan_device", H100)
    pd.testing.assert_frame_equal(fit_alone, fit_cuda)


@pytest.mark.parametrize("extra", [["plan"], ["plan", "--fit_map"], ["--skip_predicted_oom"], ["--plan"],
                                   ["--dry_run", "--plan"]])
def test_device_cpu_with_a_gpu_named_is_one_line_naming_both_options(tmp_path, capsys, extra, no_gpu_here):
    options = write_inputs(tmp_path, [tiny_scenario()])  # --device cpu
    head = extra[:1] if extra[0] == "plan" else []
    out = tmp_path / "out"
    code = cli.main([*head, *options, *extra[len(head):], "--plan_device", H100, "--results_output_path", str(out)])
    problems = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert code == 2 and len(problems) == 1, problems
    assert "--plan_device" in problems[0] and "--device cpu" in problems[0] and H100 in problems[0]
    assert not out.exists()


def test_a_run_here_without_a_gpu_is_refused_when_a_gpu_is_named(tmp_path, capsys, no_gpu_here):
    out = tmp_path / "out"
    code = cli.main([*_auto(write_inputs(tmp_path, [tiny_scenario()])), "--skip_predicted_oom", "--plan_device", H100,
                     "--results_output_path", str(out)])
    problems = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert code == 2 and len(problems) == 1 and "found no GPU" in problems[0] and "--device" in problems[0]
    assert not out.exists()


def test_the_python_api_plans_a_gpu_named_for_cuda_and_refuses_device_cpu(tmp_path, no_gpu_here):
    scenarios = [tiny_scenario()]
    defaults = str(write_inputs(tmp_path, scenarios) and tmp_path / "defaults.yaml")
    matrix = tunebench.Matrix.from_scenarios(scenarios, defaults=defaults)
    assert matrix.device_type == "cpu"
    frame = tunebench.plan(matrix, plan_device=H100)
    cuda = tunebench.plan(tunebench.Matrix.from_scenarios(scenarios, defaults=defaults, device="cuda"), H100)
    assert set(frame["device_type"]) == {"cuda"}
    assert frame["pred_mem_peak"].tolist() == cuda["pred_mem_peak"].tolist()
    assert tunebench.fit_map(matrix, H100)["max_micro_batch"].tolist() == \
        tunebench.fit_map(tunebench.Matrix.from_scenarios(scenarios, defaults=defaults, device="cuda"), H100)[
            "max_micro_batch"].tolist()
    with pytest.raises(InputError, match="device=cpu asks for a CPU run"):  # in the API's words (issue W2)
        tunebench.plan(tunebench.Matrix.from_scenarios(scenarios, defaults=defaults, device="cpu"), H100)


def test_every_shipped_gpu_has_memory_and_compute_capability_with_sources():
    for gpu in load_table().gpus:
        assert gpu.capacity_bytes() and gpu.arch(), gpu.name
        for figure in ("memory_mib", "compute_capability"):
            assert gpu.sources[figure] and "predict.py" not in gpu.sources[figure], (gpu.name, figure)


@pytest.mark.parametrize("name", sorted(LEGACY_MIB))
def test_the_names_planned_before_the_one_table_keep_their_memory_and_kernels(name):
    target = plan_target(name)
    assert target.capacity == LEGACY_MIB[name] * 1024**2 and target.named
    assert target.arch == LEGACY_ARCH.get(target.name, target.arch)


def test_the_most_specific_fragment_wins_and_a_gh200_is_not_an_h200():
    table = load_table()
    assert table.lookup("NVIDIA H100 PCIe").name == "NVIDIA H100 PCIe"  # not the bare "H100" of the SXM part
    assert table.lookup("NVIDIA A100 80GB PCIe").name == "NVIDIA A100-SXM4-80GB"  # not the bare "A100" (40 GB)
    assert table.lookup("NVIDIA L40S").name == "NVIDIA L40S"  # not "L4"
    assert table.lookup("H200").name == "NVIDIA H200" and table.lookup("NVIDIA GH200 480GB") is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(LEGACY_MIB)), st.sampled_from(["", "NVIDIA ", "nvidia "]), st.sampled_from(["", "  "]))
def test_a_name_resolves_to_the_same_entry_in_plan_projection_and_tune(name, prefix, pad):
    from tunebench.tuning.option_checks import plan_device_problem, project_to_problems

    spelled = f"{pad}{prefix}{name.removeprefix('NVIDIA ')}{pad}"
    table = load_table()
    entry = resolve(table, spelled, "--plan_device")  # tune's projection of its runs (tuning.runs.projected)
    target = plan_target(spelled)  # plan's, the fit map's and tune's --plan_device / --project_to predictions
    assert target.gpu == entry and target.name == entry.name and target.capacity == entry.capacity_bytes()
    assert plan_device_problem(spelled) is None and project_to_problems(spelled, None, 1) == []


def test_a_user_table_gives_plan_its_memory_and_compute_capability(tmp_path, no_gpu_here):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"gpus": [{"name": "Lab A100", "match": ["Lab A100"], "bf16_tflops": 312,
                                              "memory_tb_per_s": 2.0, "memory_mib": 40960,
                                              "compute_capability": {"value": 8.0, "source": "our cards"}}]}))
    bf16 = {**TINY_DEFAULTS, "torch_dtype": "bfloat16", "bf16": True, "synthetic_length_distribution": "fixed"}
    options = _auto(write_inputs(tmp_path, [tiny_scenario()], defaults=bf16))
    plan = _plan(tmp_path, "mine", options, "--plan_device", "Lab A100", "--gpu_table", str(mine))
    assert (plan["pred_capacity_bytes"] == 40960 * 1024**2).all()
    assert set(plan["pred_attention"]) == {"flash"}  # compute capability 8.0, bf16, no mask: flash, not cuDNN
    hopper = _plan(tmp_path, "h100", options, "--plan_device", H100)
    assert set(hopper["pred_attention"]) == {"cudnn"}


def test_no_module_but_the_table_holds_a_gpus_memory():
    figures = [str(int(g.value("memory_mib"))) for g in load_table().gpus]
    for path in (REPO / "tunebench").rglob("*.py"):
        text = path.read_text()
        assert not [f for f in figures if f in text], path


def test_tune_with_device_cpu_and_a_gpu_named_is_one_line_naming_both(tmp_path, capsys, no_gpu_here):
    from tunebench.cli import tune as tune_command

    out = tmp_path / "tuned"
    code = tune_command.main(["--model", "preset:llama-tiny", "--device", "cpu", "--plan_device", H100,
                              "--results_output_path", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--plan_device" in lines[0] and "--device cpu" in lines[0], lines
    assert not out.exists()


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(parts=st.lists(st.one_of(st.sampled_from(["", " ", "80GiB", "NVIDIA H200", "NVIDIA L40S", "H100", "0GiB",
                                                  "nope", "80 GiB"]), st.text(max_size=8)), max_size=4),
       separator=st.sampled_from([",", ", ", " ,", ",,"]))
def test_a_generated_device_list_is_its_devices_or_one_problem_naming_the_option(parts, separator):
    """Issue AD: `--plan_device ","` was `ValueError: No objects to concatenate`; any list is its names in order,
    each once and none empty, or one problem naming --plan_device; `plan_target` takes one device or refuses."""
    from tunebench.planning.gpu_target import device_names

    spec = separator.join(parts)
    try:
        names = device_names(spec)
    except InputError as error:
        assert [p.key for p in error.problems] == ["--plan_device"]
        assert "empty entry" in error.problems[0].message or "listed twice" in error.problems[0].message
        return
    assert names == [p.strip() for p in spec.split(",")] if spec.strip() else names == []
    assert all(names) and len(set(names)) == len(names)
    try:
        target = plan_target(spec)
    except InputError as error:
        assert {p.key for p in error.problems} == {"--plan_device"}
    else:
        assert len(names) <= 1 and (target.capacity is None) == (not names)
