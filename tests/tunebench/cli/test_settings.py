"""Bad input gives one clear message per problem, exit code 2, nothing launched and nothing written.

Reached through the modules it calls (the suggestions for unknown argument keys): tunebench/matrix/aliases.py."""

import os
import sys

import pytest

from tests.fixtures.harness import tiny_scenario, write_inputs
from tunebench import cli


def run_cli(tmp_path, capsys, *extra, **inputs):
    options = write_inputs(tmp_path, **inputs)
    out_dir = tmp_path / "out"
    code = cli.main([*options, "--results_output_path", str(out_dir), *extra])
    return code, capsys.readouterr().err, out_dir


@pytest.mark.parametrize("inputs,extra,expected", [
    ({"scenarios": [], "raw_scenarios": "scenarios:\n  - name: x\n   bad: [\n"}, [], "malformed YAML"),
    ({"scenarios": [tiny_scenario(max_stepz=3)]}, [], "scenario 'full': arguments.max_stepz: unknown argument (fix: "
                                                      "did you mean 'max_steps'?)"),
    ({"scenarios": [tiny_scenario(max_steps="many")]}, [], "invalid int value: 'many'"),
    ({"scenarios": [tiny_scenario(peft_method="qlora")]}, [], "invalid choice: 'qlora'"),
    ({"scenarios": [{"name": "s", "framework_config": ["turbo"],
                     "arguments": {"model_name_or_path": ["preset:llama-tiny"]}}]}, [],
     "unknown framework config 'turbo'"),
    ({"scenarios": [tiny_scenario(per_device_train_batch_size=3)]}, ["--effective_batch_size_matrix", "4"],
     "effective_batch_size 4 cannot be split"),
    ({"scenarios": [tiny_scenario(model_name_or_path=["preset:llama-huge"])]}, [],
     "unknown preset 'preset:llama-huge'"),
    ({"scenarios": [tiny_scenario(max_length=128)]}, [], "use max_seq_len"),
    ({"scenarios": [tiny_scenario(max_steps=3, scan_steps="5")]}, [], "scan_steps 5 ends after max_steps 3"),
    ({"scenarios": [tiny_scenario(scan_steps="4", scan_time_steps="3-6")]}, [], "scan_time_steps 3-6: "
                                                                                "Scanner(time_steps=...): 3-6 overlaps "
                                                                                "the memory-scanned steps 4-4"),
    ({"scenarios": [tiny_scenario()]}, ["--packing_matrix", "maybe"], "expected true/false values"),
    ({"scenarios": [tiny_scenario()]}, ["--run_only_scenarios", "nope"], "no scenario 'nope'"),
])
def test_bad_input_exits_2_with_message_and_runs_nothing(tmp_path, capsys, inputs, extra, expected):
    code, err, out_dir = run_cli(tmp_path, capsys, *extra, **inputs)
    assert code == 2
    assert expected in err
    assert "nothing was run" in err
    assert not out_dir.exists()  # nothing launched, nothing written


def test_all_problems_reported_at_once_naming_the_file(tmp_path, capsys):
    scenarios = [tiny_scenario("a", max_stepz=3), tiny_scenario("b", learning_rat=0.1)]
    code, err, _ = run_cli(tmp_path, capsys, scenarios=scenarios)
    assert code == 2
    assert "2 problem(s)" in err
    assert err.count("scenarios.yaml") == 2 and "max_stepz" in err and "learning_rat" in err


def test_unknown_key_in_defaults_names_defaults_file(tmp_path, capsys):
    code, err, _ = run_cli(tmp_path, capsys, scenarios=[tiny_scenario()], defaults={"bogus_default": 1})
    assert code == 2 and "defaults.yaml: bogus_default: unknown argument" in err


def test_existing_results_are_not_deleted_on_bad_input(tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, _, _ = run_cli(tmp_path, capsys, scenarios=[tiny_scenario(max_stepz=1)])
    assert code == 2 and (out_dir / "keep.txt").read_text() == "precious"


def test_dry_run_writes_command_sh_and_runs_nothing(tmp_path, capsys):
    code, _, out_dir = run_cli(tmp_path, capsys, "--dry_run", "--num_gpus_matrix", "1", "2",
                               scenarios=[tiny_scenario()])
    assert code == 0
    folders = sorted(p for p in out_dir.iterdir() if p.is_dir())
    assert len(folders) == 2
    for folder in folders:
        assert (folder / "command.sh").is_file() and (folder / "spec.json").is_file()
        assert not (folder / "results.json").exists() and not (folder / "stdout.log").exists()
    assert not (out_dir / "raw_summary.csv").exists()
    # On CPU two processes go through torchrun (gloo); on GPUs through `accelerate launch`.
    two = [f for f in folders if "torch.distributed.run" in (f / "command.sh").read_text()]
    assert len(two) == 1 and "--nproc_per_node 2" in (two[0] / "command.sh").read_text()


def test_readme_gpu_matrix_validates_on_the_cpu_scenario_set(tmp_path):
    # `tox -e run-benches -- "1 2" "4 8" results` on a machine without GPUs: the CPU set must accept it.
    out = tmp_path / "out"
    code = cli.main(["--device", "cpu", "--num_gpus_matrix", "1 2", "--effective_batch_size_matrix", "4 8",
                     "--results_output_path", str(out), "--dry_run"])
    assert code == 0
    assert len([p for p in out.iterdir() if p.is_dir()]) == 2 * 2 * 2 * 2  # scenarios × configs × GPUs × batches


def test_a_regular_file_as_results_path_is_an_input_error(tmp_path, capsys):
    options = write_inputs(tmp_path, [tiny_scenario()])
    target = tmp_path / "results.csv"
    target.write_text("precious")
    code = cli.main([*options, "--results_output_path", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and "exists and is not a directory" in err and "Traceback" not in err
    assert target.read_text() == "precious"


def test_a_second_harness_on_the_same_results_folder_is_refused(tmp_path, capsys):
    from tunebench.results.folder import results_lock

    options = write_inputs(tmp_path, [tiny_scenario()])
    out = tmp_path / "out"
    with results_lock(out):  # another harness holds the folder
        code = cli.main([*options, "--results_output_path", str(out), "--dry_run"])
    err = capsys.readouterr().err
    assert code == 2 and f"results folder in use by pid {os.getpid()} on " in err
    assert not list(out.glob("full_*"))  # nothing planned, written or launched
    assert cli.main([*options, "--results_output_path", str(out), "--dry_run"]) == 0  # free again


def test_executor_ray_without_ray_is_exit_2(tmp_path, capsys, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a)
    )
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # imported by an earlier test of this process
    code, err, out = run_cli(tmp_path, capsys, "--executor", "ray", scenarios=[tiny_scenario()])
    assert code == 2 and "Ray is not installed" in err and "pip install -e '.[ray]'" in err and not out.exists()


@pytest.mark.parametrize("typed,meant", [
    ("lora_rank", "r"), ("lora_r", "r"), ("rank", "r"), ("alpha", "lora_alpha"),
    ("lora_target_modules", "target_modules"), ("lora_dropout_p", "lora_dropout"), ("max_seq_length", "max_seq_len"),
    ("model_name", "model_name_or_path"), ("batch_size", "per_device_train_batch_size"),
    ("grad_accum", "gradient_accumulation_steps"), ("dataset_path", "training_data_path"),
    ("data_path", "training_data_path"), ("lr", "learning_rate"), ("num_epochs", "num_train_epochs"),
])
def test_an_unknown_key_from_another_tool_suggests_its_name_here(tmp_path, capsys, typed, meant):
    """Issue W: `lora_rank: 8` suggested the Trainer's `local_rank`; the LoRA rank is `r`."""
    code, err, _ = run_cli(tmp_path, capsys, scenarios=[tiny_scenario(**{typed: 8})])
    assert code == 2
    assert f"arguments.{typed}: unknown argument (fix: did you mean {meant!r}?)" in err
    assert "local_rank" not in err


@pytest.mark.parametrize("timeout", [1e12, 10**30, ".inf"])
def test_a_huge_scenario_timeout_is_refused_before_anything_runs(tmp_path, capsys, timeout):
    """Issue W: a huge finite timeout passed validation, then Process.join raised OverflowError in every row."""
    raw = ("scenarios:\n  - name: s\n    timeout: " + str(timeout) + "\n    arguments:\n"
           "      model_name_or_path: [preset:llama-tiny]\n")
    code, err, out_dir = run_cli(tmp_path, capsys, scenarios=[], raw_scenarios=raw)
    assert code == 2 and not out_dir.exists()
    assert "scenarios[0] (s).timeout: expected seconds > 0 and <= 2,592,000, got " in err


@pytest.mark.parametrize("command", ["plan", "verify", "compare", "report"])
def test_each_subcommand_prints_its_own_help_with_defaults(capsys, command):
    """Issue W: `plan --help` printed benchmark.py's help; no help showed defaults."""
    try:
        code = cli.main([command, "--help"])
    except SystemExit as exc:  # benchmark.py's own parser (plan) exits as argparse does
        code = exc.code
    out = capsys.readouterr().out
    assert code == 0 and out.startswith(f"usage: benchmark.py {command} ")
    shown = {"plan": "(default: INFO)", "verify": "(default: 0.03)", "compare": "--no_charts",
             "report": "--reference REFERENCE"}[command]
    assert shown in " ".join(out.split())


@pytest.mark.parametrize("text,message", [
    ('{"model_type": "llama", "num_hidden_layers": 1000000}',
     "config.json: num_hidden_layers: expected a whole number in [0, 512], got 1000000"),
    ("{not json", "config.json: not JSON ("),
    ("[1, 2]", "config.json: expected a JSON object, got array"),
])
def test_plan_refuses_a_local_config_it_could_not_use(tmp_path, capsys, text, message):
    """Issue W: `plan` on a million-layer config never finished; a config.json that is not JSON launched a doomed
    experiment."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(text)
    options = write_inputs(tmp_path, [tiny_scenario(model_name_or_path=[str(tmp_path / "model")])])
    assert cli.main(["plan", *options, "--results_output_path", str(tmp_path / "out")]) == 2
    (problem,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  - ")]
    assert f"arguments.model_name_or_path: {tmp_path / 'model' / message}" in problem
    assert not (tmp_path / "out").exists()


def test_a_dry_run_into_a_finished_folder_says_what_it_left_alone(tmp_path, capsys):
    """Issue W2: a dry run said it wrote command.sh for each experiment, and into a finished folder it wrote none."""
    code, _, out_dir = run_cli(
        tmp_path, capsys, "--dry_run", "--num_gpus_matrix", "1", "2", scenarios=[tiny_scenario()]
    )
    assert code == 0
    finished = sorted(p for p in out_dir.iterdir() if p.is_dir())[0]
    (finished / "results.json").write_text('{"experiment_id": "x", "status": "ok"}')
    before = (finished / "command.sh").read_text()
    code = cli.main([*write_inputs(tmp_path, [tiny_scenario()]), "--results_output_path", str(out_dir), "--dry_run",
                     "--num_gpus_matrix", "1", "2"])
    printed = capsys.readouterr().out.splitlines()[-1]
    assert code == 0 and printed == (f"dry run: wrote command.sh for 1 experiment(s) under {out_dir}/; 1 already run "
                                     "there, their files left as they are; ran nothing")
    assert (finished / "command.sh").read_text() == before


@pytest.mark.parametrize("where", ["yaml", "matrix"])
def test_an_attention_implementation_transformers_does_not_know_is_exit_2_naming_the_key(tmp_path, capsys, where):
    """Issue W2: `attn_implementation: bogus_attention` and `--attn_implementation_matrix bogus_attention` launched
    experiments that all failed as the model loaded. The names are this transformers' own (its AttentionInterface)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from tunebench.experiment.acceleration import attention_implementations

    assert set(attention_implementations()) == {"eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()} >= {"sdpa", "eager"}
    scenario = tiny_scenario(attn_implementation="bogus_attention") if where == "yaml" else tiny_scenario()
    extra = ["--attn_implementation_matrix", "sdpa", "bogus_attention"] if where == "matrix" else []
    code, err, out_dir = run_cli(tmp_path, capsys, "--dry_run", *extra, scenarios=[scenario])
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    key = "command line: --attn_implementation_matrix" if where == "matrix" else \
        "scenario 'full': arguments.attn_implementation"
    assert code == 2 and len(problems) == 1 and key in problems[0], err
    assert "unknown attention implementation 'bogus_attention' (fix: one of: eager, " in problems[0]
    assert not out_dir.exists()


def test_a_scenario_with_four_mistakes_gets_one_message_listing_all_four(tmp_path, capsys):
    """Issue AC: four typos took four round trips (unknown keys stopped the typing, the first bad value stopped the
    rest, ranges came last). Each mistake is a different layer of the checks; each is named with its fix."""
    scenario = {"name": "typos", "framework_config": ["gradient-checkpointng"],
                "arguments": {"model_name_or_path": ["preset:llama-tiny"], "max_step": 20, "peft_method": "qlora4",
                              "learning_rate": -1}}
    code, err, out_dir = run_cli(tmp_path, capsys, "--max_seq_len_matrix", "0", scenarios=[scenario])
    assert code == 2 and not out_dir.exists()
    lines = [line for line in err.splitlines() if line.startswith("  - ")]
    expected = ["--max_seq_len_matrix: expected numbers >= 1",
                "typos.framework_config: unknown framework config 'gradient-checkpointng' (fix: did you mean "
                "'gradient-checkpointing'?)",
                "arguments.max_step: unknown argument (fix: did you mean 'max_steps'?)",
                "arguments.peft_method: invalid choice: 'qlora4' (choose from 'none', 'lora', 'prompt-tuning') "
                "(fix: did you mean 'lora'?)",
                "arguments.learning_rate: -1.0 is out of range"]
    assert len(lines) == len(expected) and all(any(part in line for line in lines) for part in expected), err
    assert "5 problem(s)" in err
    # the misspelt max_step is not also "max_steps too small for the step windows": asked once all is right
    assert "raise max_steps" not in err


def test_the_python_api_answers_in_its_own_words(tmp_path):
    """Issue AC: `LoRA` from Python was refused as `argument --peft_method/--peft-method: invalid choice`: the
    command line's words. It names the key of the dict, and what was meant."""
    import tunebench

    with pytest.raises(tunebench.InputError) as caught:
        tunebench.Matrix.from_scenarios([tiny_scenario(peft_method="LoRA", lora_alhpa=16)], device="cpu",
                                        max_seq_len=[0])
    said = str(caught.value)
    assert "--" not in said, said
    assert "arguments.peft_method: invalid choice: 'LoRA'" in said and "did you mean 'lora'?" in said
    assert "arguments.lora_alhpa: unknown argument (fix: did you mean 'lora_alpha'?)" in said
    assert "Matrix.from_scenarios: max_seq_len: 0 is out of range" in said
