"""benchmark.py's and `benchmark.py plan`'s options: each command lists, in groups, and takes only its own; an
option of the other command, or a misspelt one, is named with the fix, every one at once (issue AC)."""

import argparse
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench import cli
from tunebench.cli import SUBCOMMANDS
from tunebench.cli.options import GROUPS, PLAN, RUN, build_parser

RUN_ONLY = ["--repeats", "--overwrite", "--dry_run", "--executor", "--max_concurrent", "--ray_address",
            "--slurm_partition", "--timeout", "--memory_logging", "--trackers", "--skip_predicted_oom", "--plan"]
PLAN_ONLY = ["--fit_map", "--project_from", "--gpu_hour_usd", "--project_num_gpus", "--project_parallelism"]
SHARED = ["--num_gpus_matrix", "--scenarios_config_path", "--results_output_path", "--plan_device", "--gpu_table",
          "--device", "--log_level"]


def _help(prog: str) -> str:
    return build_parser(prog).format_help()


@pytest.mark.parametrize("prog, own, other", [(RUN, RUN_ONLY, PLAN_ONLY), (PLAN, PLAN_ONLY, RUN_ONLY)])
def test_each_command_lists_only_its_own_options_in_groups(prog, own, other):
    text = _help(prog)
    listed = {word.rstrip(",") for word in text.split() if word.startswith("--")}
    assert set(own + SHARED) <= listed and not set(other) & listed
    headings = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
    shown = [title for key, title in GROUPS.items() if prog == RUN or key != "telemetry"]  # plan measures nothing
    assert [h for h in headings if h in GROUPS.values()] == shown
    assert prog == PLAN or {"local executor", "ray executor", "slurm executor"} <= set(headings)


def test_every_option_is_taken_by_one_command_or_refused_by_name_in_the_other():
    run, plan = build_parser(RUN), build_parser(PLAN)
    taken = {name for parser in (run, plan) for name in parser._option_string_actions}
    for parser, other in ((run, plan), (plan, run)):
        for name in taken - set(parser._option_string_actions):
            assert name.startswith("-") and parser.elsewhere[name] == other.prog, name


def test_the_main_help_names_every_subcommand():
    assert all(f"`{name}`" in _help(RUN) for name in ("plan", *SUBCOMMANDS))


def test_plan_refuses_a_runs_options_and_names_each_with_the_misspelt_one(tmp_path, capsys):
    """Issue AC: `plan --repeats 3 --max_concurrent 4` was accepted silently."""
    out = tmp_path / "out"
    options = write_inputs(tmp_path, [tiny_scenario()])
    with pytest.raises(SystemExit) as exited:
        cli.main(["plan", *options, "--results_output_path", str(out), "--repeats", "3", "--max_concurrent", "4",
                  "--overwrit", "--num-gpus-matrx", "2"])
    assert exited.value.code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert err.splitlines()[1:] == [
        "  - --repeats: an option of `benchmark.py`, not of `benchmark.py plan` (fix: drop it, or run `benchmark.py`)",
        "  - --max_concurrent: an option of `benchmark.py`, not of `benchmark.py plan` (fix: drop it, or run "
        "`benchmark.py`)",
        "  - --overwrit: unknown option (fix: did you mean --overwrite? It is an option of `benchmark.py`)",
        "  - --num-gpus-matrx: unknown option (fix: did you mean --num-gpus-matrix?)"], err
    assert err.splitlines()[0] == "benchmark.py plan: 4 problem(s) on the command line; nothing was run:"


def test_a_run_refuses_plans_options(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exited:
        cli.main([*write_inputs(tmp_path, [tiny_scenario()]), "--results_output_path", str(out), "--fit_map"])
    assert exited.value.code == 2 and not out.exists()
    assert "  - --fit_map: an option of `benchmark.py plan`, not of `benchmark.py`" in capsys.readouterr().err


@given(st.one_of(st.sampled_from(["yes", "True", "T", "y", "1", "no", "FALSE", "f", "N", "0", "", "on", "2"]),
                 st.text(max_size=6)))
@settings(deadline=None)  # the first example imports transformers
def test_the_matrix_booleans_read_as_the_entry_reads_them(text):
    """The command line's true/false words are the training entry's (transformers' HfArgumentParser), without
    importing transformers (it imports torch: seconds of every command line's start-up)."""
    from transformers.hf_argparser import string_to_bool

    from tunebench.cli.parsing import text_to_bool

    try:
        expected = string_to_bool(text)
    except argparse.ArgumentTypeError:
        with pytest.raises(argparse.ArgumentTypeError):
            text_to_bool(text)
    else:
        assert text_to_bool(text) is expected


def test_the_command_line_imports_no_torch():
    """`benchmark.py --help` and the options' parsing import neither torch nor transformers."""
    code = "import sys, tunebench.cli; print(sorted({'torch', 'transformers', 'trl'} & set(sys.modules)))"
    found = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and found.stdout.strip() == "[]", found.stderr[-2000:]
