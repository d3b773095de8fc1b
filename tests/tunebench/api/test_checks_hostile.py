"""Generated hostile values (hypothesis) for every option of the Python API (issue W2): tunebench.Matrix,
tunebench.plan / fit_map, tunebench.run with RunSettings (and the plugins' settings), tunebench.compare with
CompareOptions, tunebench.report and tunebench.tune with TuneOptions. A value of the wrong type or out of range is
one InputError naming the option as the API spells it (`RunSettings: timeout`), never another exception, a
traceback or a launch; a value that is right goes through (runs are dry, the search is stopped before it runs).


Reached through the modules it calls (compare and report from Python): tunebench/api/comparing.py."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tunebench
from tests.fixtures.harness import TINY_DEFAULTS, tiny_scenario, write_inputs
from tunebench.api.matrix import MatrixOptions
from tunebench.api.running import RunSettings
from tunebench.execution.executors.local import LocalSettings
from tunebench.telemetry.trackers import SidecarSettings

API = settings(max_examples=60, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large])


class Opaque:
    """An object of no type the API knows, whose repr is huge (a problem must not print it whole)."""

    def __repr__(self) -> str:
        return "x" * 10_000_000


# What a caller can hand an option by mistake: every type, the absurd numbers, near-misses of the right words.
hostile = st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.binary(max_size=8), st.just(Opaque()), st.just(Path("out")), st.just(object()),
    st.sampled_from(["", "cpu", "cuda", "gpu", "auto", "local", "rayy", "ray", "nvidia", "scanner", "80GiB", "0GiB",
                     "1e400GiB", "-5", "soon", "sdpa", "lora", "H100", "x" * 5000, "tokens_per_second"]),
    st.lists(st.one_of(st.integers(-3, 10**7), st.text(max_size=5), st.booleans(), st.none(), st.floats()),
             max_size=4),
    st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    st.frozensets(st.sampled_from(["scanner", "nvidia", "huggingface", "all", "x"]), max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), st.one_of(st.floats(), st.text(max_size=4),
                                                                             st.integers()), max_size=3),
    st.integers(1, 3000).map(lambda n: [[[]]] * n),
)


def _named(error: tunebench.InputError, source: str, name: str, value) -> None:
    """Some problem names `source: name` (or, for a file option, the file itself); every line stays short."""
    assert any((p.source == source and p.key == name) or str(value) == p.source or p.key == name
               for p in error.problems), (source, name, [str(p)[:300] for p in error.problems])
    assert all(len(str(p)) < 2000 for p in error.problems), [str(p)[:300] for p in error.problems]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-inputs")
    write_inputs(folder, [tiny_scenario(max_steps=8, max_seq_len=16, synthetic_num_samples=8)],
                 defaults={**TINY_DEFAULTS, "max_steps": 8})
    return {"scenarios": str(folder / "scenarios.yaml"), "defaults": str(folder / "defaults.yaml"),
            "framework_configs": str(folder / "framework_configs.yaml"), "device": "cpu"}


@pytest.fixture(scope="module")
def matrix(inputs):
    return tunebench.Matrix.from_yaml(**inputs)


class Traceback(logging.Handler):
    def __init__(self):
        super().__init__()
        self.found = []

    def emit(self, record):
        if record.exc_info:
            self.found.append(record.getMessage())


@pytest.fixture
def no_traceback():
    handler = Traceback()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)
    assert handler.found == []


@API
@given(name=st.sampled_from([f.name for f in dataclasses.fields(MatrixOptions)]), value=hostile)
def test_every_matrix_option(inputs, tmp_path, monkeypatch, name, value):
    monkeypatch.chdir(tmp_path)
    try:
        tunebench.Matrix.from_yaml(**{**inputs, name: value})
    except tunebench.InputError as error:
        event("refused")
        _named(error, "Matrix.from_yaml", name, value)
    else:
        event("accepted")


@API
@given(function=st.sampled_from(["plan", "fit_map"]), value=hostile)
def test_plan_and_fit_map_devices(matrix, function, value):
    try:
        frame = getattr(tunebench, function)(matrix, plan_device=value)
    except tunebench.InputError as error:
        event("refused")
        _named(error, function, "plan_device", value)
    else:
        event("accepted")
        assert len(frame) > 0


@API
@given(function=st.sampled_from(["plan", "fit_map"]), value=hostile)
def test_plan_and_fit_map_gpu_tables(matrix, function, value):
    """Issue AD: `gpu_table=5` returned a fit map; every value is a table read, or one problem naming it."""
    try:
        frame = getattr(tunebench, function)(matrix, plan_device="80GiB", gpu_table=value)
    except tunebench.InputError as error:
        event("refused")
        _named(error, function, "gpu_table", value)
    else:
        event("accepted")
        assert not value and len(frame) > 0  # no file is named by any generated value: only "no table" passes


@API
@given(argument=st.sampled_from(["matrix", "settings"]), value=hostile)
def test_run_arguments_of_the_wrong_type(matrix, tmp_path, argument, value):
    given_arguments = {"matrix": matrix, "settings": RunSettings(results_output_path=str(tmp_path / "o"), dry_run=True)}
    if argument == "settings" and value is None:
        return  # None: the default settings (a real run)
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.run(**{**given_arguments, argument: value})
    _named(raised.value, "run", argument, value)


def _settings_cases():
    run_fields = [("RunSettings", f.name) for f in dataclasses.fields(RunSettings)]
    plugin_fields = [
        (cls.__name__, f.name) for cls in (LocalSettings, SidecarSettings) for f in dataclasses.fields(cls)
    ]
    return st.sampled_from(run_fields + plugin_fields)


@API
@given(case=_settings_cases(), value=hostile)
def test_every_run_setting_and_plugin_setting(matrix, tmp_path, monkeypatch, no_traceback, case, value):
    """Each setting hostile, the run dry (a value that is right plans it and launches nothing)."""
    source, name = case
    monkeypatch.chdir(tmp_path)
    if name == "dry_run" and value in (False, 0):
        return  # a real run: not what this test is for
    base = {"results_output_path": str(tmp_path / f"out-{len(list(tmp_path.iterdir()))}"), "dry_run": True}
    if source == "RunSettings":
        settings_given = RunSettings(**{**base, name: value})
    else:
        plugin = {"LocalSettings": LocalSettings, "SidecarSettings": SidecarSettings}[source](**{name: value})
        settings_given = RunSettings(**base, plugin_settings=(plugin,))
    try:
        result = tunebench.run(matrix, settings_given)
    except tunebench.InputError as error:
        event("refused")
        _named(error, source, name, value)
    else:
        event("accepted")
        assert set(result.frame["status"]) <= {"dry_run"}


@pytest.fixture(scope="module")
def results_csv(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    rows = [{"experiment_id": "a1", "scenario": "s", "framework_config": "baseline", "model_name_or_path": "m",
             "num_gpus": 1, "status": "ok", "steady_nonpad_tokens_per_second": 100.0 + i, "steady_mfu": 0.1}
            for i in range(1)]
    pd.DataFrame(rows).to_csv(folder / "raw_summary.csv", index=False)
    return folder


def _compare_cases():
    return st.sampled_from([("CompareOptions", f.name) for f in dataclasses.fields(tunebench.CompareOptions)]
                           + [("compare", "reference"), ("compare", "results"), ("compare", "options"),
                              ("report", "results"), ("report", "out"), ("report", "reference")])


@API
@given(case=_compare_cases(), value=hostile)
def test_every_compare_and_report_option(results_csv, tmp_path, monkeypatch, no_traceback, case, value):
    source, name = case
    monkeypatch.chdir(tmp_path)
    if name == "charts" and value is True or (name == "options" and value is None):
        return  # charts drawn (seconds), or the default options: nothing hostile
    try:
        if source == "report":
            arguments = {"results": results_csv, "out": tmp_path / "r.html", "reference": None, name: value}
            tunebench.report(**arguments)
        else:
            options = tunebench.CompareOptions(charts=False, out=str(tmp_path / "c"))
            if source == "CompareOptions":
                options = dataclasses.replace(options, **{name: value})
            arguments = {"reference": results_csv, "results": results_csv, "options": options}
            tunebench.compare(**({**arguments, name: value} if source == "compare" else arguments))
    except tunebench.InputError as error:
        event("refused")
        _named(error, source, name, value)
    else:
        event("accepted")


class SearchReached(Exception):
    """The options passed every check: the search would start here."""


@API
@given(name=st.sampled_from([f.name for f in dataclasses.fields(tunebench.TuneOptions)]), value=hostile)
def test_every_tune_option(tmp_path, monkeypatch, name, value):
    from tunebench.tuning import command

    def stop(options):
        raise SearchReached

    monkeypatch.setattr(command, "_search", stop)
    monkeypatch.chdir(tmp_path)
    options = {"model": "preset:llama-tiny", "device": "cpu", "results_output_path": str(tmp_path / "t"), name: value}
    try:
        tunebench.tune(tunebench.TuneOptions(**options))
    except tunebench.InputError as error:
        event("refused")
        _named(error, "TuneOptions", name, value)
    except SearchReached:
        event("accepted")
        number = value if isinstance(value, float) else None
        assert number is None or math.isfinite(number), value


def test_the_issues_own_examples_name_the_option(matrix, tmp_path):
    """The first month's reports, each now one InputError in the API's words."""
    cases = [
        (lambda: tunebench.Matrix.from_scenarios([tiny_scenario()], device="cpu", max_seq_len=64),
         "Matrix.from_scenarios", "max_seq_len"),
        (lambda: tunebench.plan(matrix, plan_device=80), "plan", "plan_device"),
        # issue AD: a GPU table of no path type returned a DataFrame (fit_map) or "5: --gpu_table: file not found"
        (lambda: tunebench.fit_map(matrix, "80GiB", gpu_table=5), "fit_map", "gpu_table"),
        (lambda: tunebench.plan(matrix, "80GiB", gpu_table=5), "plan", "gpu_table"),
        # issue AD: a device list naming nothing (`ValueError: No objects to concatenate`), or several devices
        (lambda: tunebench.fit_map(matrix, ","), "fit_map", "plan_device"),
        (lambda: tunebench.plan(matrix, " , "), "plan", "plan_device"),
        (lambda: tunebench.plan(matrix, "80GiB,NVIDIA H200"), "plan", "plan_device"),
        (lambda: tunebench.run(matrix, "out"), "run", "settings"),
        (lambda: tunebench.run(matrix, RunSettings(timeout=-5, results_output_path=str(tmp_path / "a"))),
         "RunSettings", "timeout"),
        (lambda: tunebench.run(matrix, RunSettings(timeout="soon", results_output_path=str(tmp_path / "a"))),
         "RunSettings", "timeout"),
        (lambda: tunebench.run(matrix, RunSettings(executor="rayy", dry_run=True,
                                                   results_output_path=str(tmp_path / "a"))),
         "RunSettings", "executor"),
    ]
    for call, source, key in cases:
        with pytest.raises(tunebench.InputError) as raised:
            call()
        assert [(p.source, p.key) for p in raised.value.problems] == [(source, key)], raised.value.problems
        assert "command line" not in str(raised.value) and "--" not in str(raised.value)
    assert not (tmp_path / "a").exists()


def test_an_executor_whose_extra_is_missing_is_named_in_the_apis_words(matrix, tmp_path, monkeypatch):
    """Issue W2: from Python the error said "command line: --executor"."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a)
    )
    monkeypatch.delitem(__import__("sys").modules, "ray", raising=False)  # imported by an earlier test
    with pytest.raises(tunebench.InputError) as raised:
        tunebench.run(matrix, RunSettings(executor="ray", results_output_path=str(tmp_path / "o")))
    (problem,) = raised.value.problems
    assert (problem.source, problem.key) == ("RunSettings", "executor") and "--" not in problem.message
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("env", [{"": "1"}, {"A=B": "1"}, {"A": "x\0y"}, {"A\0": "1"}])
def test_an_environment_no_process_can_hold_is_refused_before_anything_starts(env):
    problems = RunSettings(extra_env=env).problems()
    assert [(p.source, p.key) for p in problems] == [("RunSettings", "extra_env")]
