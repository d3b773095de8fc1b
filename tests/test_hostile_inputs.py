"""Generated hostile inputs (hypothesis): scenario YAML and option values the harness has never seen must end in
exit 0 or 2, with no traceback, and nothing written outside the results folder (issue J).

Each example runs the real command line in this process (`tunebench.cli.main`) as a dry run: validation, the
results-folder rules and the per-experiment files are the real ones; nothing is trained. Derandomised, so CI
sees the same 500 examples every time.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tunebench import cli

HOSTILE_NAMES = ["a", "../../escaped", "x/y", "..", ".hidden", "-rf", "精调", "a" * 300, "con", "with space",
                 "tab\tname", "/etc/passwd", "C:\\evil", "~root", "$HOME", "`id`", "a;rm -rf b"]
KEYS = ["max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_seq_len",
        "steady_target_ci_pct", "steady_max_cv", "steady_min_steps", "steady_warmup_steps", "scan_steps",
        "scan_time_steps", "peft_method", "r", "lora_dropout", "training_data_path", "synthetic_num_samples",
        "model_name_or_path", "memory_logging", "output_dir", "results_json", "torch_dtype", "target_modules",
        "seed", "bogus_key", "max_length", "steady_state", "synthetic_length_distribution"]
SPECIAL_VALUES = ["preset:llama-tiny", "preset:nope", "../x", "/etc", "data/missing.jsonl", "synthetic", "4-6",
                  "auto", "lora", "none", "fixed", "all", "scaner", "-1", "0", "1e309", "nan", "", "org/name"]

values = st.one_of(
    st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.booleans(),
    st.none(), st.lists(st.sampled_from(["q_proj", "v_proj", "x", ""]), max_size=3), st.sampled_from(SPECIAL_VALUES),
    st.dictionaries(st.sampled_from(["a", "use_reentrant"]), st.booleans(), max_size=2),
)
arguments = st.one_of(st.just({}), st.dictionaries(st.sampled_from(KEYS), values, max_size=1),
                      st.dictionaries(st.sampled_from(KEYS), values, max_size=6)).map(
    lambda args: {"model_name_or_path": ["preset:llama-tiny"], "max_steps": 8, "max_seq_len": 16,
                  "synthetic_num_samples": 8, "steady_warmup_steps": 2, "steady_min_steps": 2, **args})
plain_scenario = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=30)), "arguments": arguments},
    optional={"framework_config": st.sampled_from([[None], [None, "gradient-checkpointing"], None])})
hostile_scenario = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=30))},
    optional={"framework_config": st.one_of(st.none(), st.lists(st.sampled_from([None, "gradient-checkpointing",
                                                                                  "nope", 3]), max_size=2)),
              "arguments": st.one_of(arguments, values), "slow": st.one_of(st.booleans(), values),
              "exclusive": st.booleans(), "timeout": values, "surprise": values},
)
as_yaml = lambda scenarios: yaml.safe_dump({"scenarios": scenarios}, allow_unicode=True)  # noqa: E731
scenario_files = st.one_of(
    st.lists(plain_scenario, min_size=1, max_size=3).map(as_yaml),  # mostly valid: names and one odd value
    st.lists(plain_scenario, min_size=1, max_size=3).map(as_yaml),
    st.lists(st.one_of(plain_scenario, hostile_scenario), min_size=1, max_size=3).map(as_yaml),
    st.text(max_size=80),  # anything at all, malformed YAML included
    st.sampled_from(["", "scenarios: []", "scenarios: 3", "- a\n- b", "scenarios:\n  - name: x\n   bad: [\n"]),
)
numbers = st.one_of(st.integers(-3, 9).map(str), st.sampled_from(["", "1 2", "1,2", "x", "0", "nan", "1e3", "-1"]))
folders = st.sampled_from(["out", "", ".", "out/nested/deeper", "foreign", "afile", "owned", "out/../out2", "/",
                           "HOME", "SANDBOX_PARENT"])
usual = st.fixed_dictionaries({"--results_output_path": st.sampled_from(["out", "out/nested", "owned", "out2"])},
                              optional={"--num_gpus_matrix": st.sampled_from(["1", "1 2", "2"]),
                                        "--max_concurrent": st.sampled_from(["1", "2"]),
                                        "--run_only_scenarios": st.sampled_from(HOSTILE_NAMES)})
hostile = st.fixed_dictionaries({}, optional={
    "--timeout": st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(["0", "-5", "x"])),
    "--num_gpus_matrix": numbers, "--effective_batch_size_matrix": numbers, "--max_seq_len_matrix": numbers,
    "--packing_matrix": st.sampled_from(["true", "false", "maybe", "true false"]),
    "--max_concurrent": numbers, "--cpu_slots": numbers, "--nvidia_smi_loop_ms": numbers,
    "--memory_logging": st.sampled_from(["scanner", "all", "none", "scaner", "nvidia,huggingface", "", ",,"]),
    "--run_only_scenarios": st.sampled_from(HOSTILE_NAMES),
    "--results_output_path": folders,
})
options = st.one_of(usual, hostile)


def _snapshot(root: Path, skip: set[Path]) -> dict[str, tuple[int, int]]:
    """Every file under `root` (outside `skip`), with its size and modification time."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (here / d).resolve() not in skip]
        for name in filenames:
            path = here / name
            stat = path.lstat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


class TracebackRecorder(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    for name in ("inputs", "work", "home", "work/foreign", "work/owned"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "work" / "foreign" / "thesis.tex").write_text("precious")
    (root / "work" / "owned" / ".tunebench-results").write_text("{}")
    (root / "work" / "afile").write_text("not a folder")
    (root / "inputs" / "defaults.yaml").write_text(yaml.safe_dump({"report_to": "none", "bf16": False,
                                                                   "torch_dtype": "float32"}))
    (root / "inputs" / "framework_configs.yaml").write_text(yaml.safe_dump({"framework_configs": {
        "gradient-checkpointing": {"arguments": {"gradient_checkpointing": True}}}}))
    return root


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(text=scenario_files, chosen=options)
def test_generated_inputs_exit_0_or_2_and_write_only_inside_the_results_folder(sandbox, monkeypatch, text, chosen):
    work = sandbox / "work"
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(sandbox / "home"))
    monkeypatch.setenv("TUNEBENCH_CACHE", str(sandbox / "home" / "cache"))
    (sandbox / "inputs" / "scenarios.yaml").write_text(text)
    chosen = dict(chosen)
    target = chosen.pop("--results_output_path", "out")
    target = {"HOME": str(sandbox / "home"), "SANDBOX_PARENT": str(sandbox.parent)}.get(target, target)
    results = (work / target).resolve() if target else work.resolve()
    existed = results.exists()
    argv = ["--scenarios_config_path", str(sandbox / "inputs" / "scenarios.yaml"), "--defaults_config_path",
            str(sandbox / "inputs" / "defaults.yaml"), "--framework_configs_path",
            str(sandbox / "inputs" / "framework_configs.yaml"), "--device", "cpu", "--dry_run", "--log_level",
            "ERROR", "--results_output_path", target]
    for option, value in chosen.items():
        argv += [option, *value.split()] if option.endswith("matrix") and value.strip() else [option, value]
    before = _snapshot(sandbox, skip={results})
    recorder = TracebackRecorder()
    logging.getLogger().addHandler(recorder)
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    finally:
        logging.getLogger().removeHandler(recorder)
    event(f"exit {code}")
    assert code in (0, 2), argv
    assert not recorder.records, recorder.records[0].getMessage()
    after = _snapshot(sandbox, skip={results})
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    assert changed <= {str(sandbox / "inputs" / "scenarios.yaml")}, (argv, sorted(changed)[:5])
    if code == 2 and not existed:
        assert not results.exists()  # bad input: nothing created
    if code == 0:
        for folder in results.iterdir():
            assert folder.resolve().parent == results  # every experiment folder directly inside it
