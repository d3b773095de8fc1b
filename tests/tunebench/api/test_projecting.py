"""tunebench/api/projecting.py: `tunebench.project(ProjectionOptions(...))`, the typed edge of `plan --project_from`."""

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import tunebench
from tests.fixtures.projection import H100, make_results


def test_the_python_api_projects_from_typed_options_and_names_their_fields(tmp_path):
    """tunebench.project is `plan --project_from`'s projection (the same function), its problems named by the
    ProjectionOptions field the caller set."""
    import tunebench

    results = tmp_path / "measured"
    make_results(results)
    options = tunebench.ProjectionOptions(project_from=str(results), plan_device="NVIDIA H200", gpu_hour_usd=3.5)
    row = tunebench.project(options).iloc[0]
    assert row["proj_device"] == "NVIDIA H200" and row["proj_source_device"] == H100
    assert row["pred_capacity_bytes"] == 143771 * 1024**2 and bool(row["proj_fits"]) is True
    for wrong, field in (({"num_gpus": 4}, "parallelism"), ({"gpu_hour_usd": float("nan")}, "gpu_hour_usd"),
                         ({"plan_device": "80GiB"}, "plan_device"), ({"project_from": str(tmp_path)}, "project_from"),
                         ({"parallelism": "tp"}, "parallelism")):
        with pytest.raises(tunebench.InputError) as found:
            tunebench.project(tunebench.ProjectionOptions(**{**vars(options), **wrong}))
        assert [(p.source, p.key) for p in found.value.problems] == [("ProjectionOptions", field)], wrong
    with pytest.raises(tunebench.InputError) as found:
        tunebench.project(str(results))
    assert [(p.source, p.key) for p in found.value.problems] == [("project", "options")]


@pytest.mark.parametrize("extra, key, message", [
    ({"steady_tokens_per_second": -100.0, "steady_nonpad_tokens_per_second": -100.0}, "steady_tokens_per_second",
     "-100.0 is negative: a rate (tokens/s) is never below 0"),
    ({"scan_time_forward": -1.6e-3}, "scan_time_forward", "-0.0016 is negative: a time (s) is never below 0"),
    ({"num_gpus": 2, "fsdp": True, "fsdp_config": '{"version": "x"}'}, "fsdp_config.version",
     'expected 1 or 2, got "x"'),
])
def test_a_row_no_run_produces_is_refused_before_it_is_projected(tmp_path, capsys, extra, key, message):
    """Issue AD: a row at -100 tokens/s projected to -112.6, a negative phase time to -11 168, and a row whose
    fsdp_config version is "x" raised ValueError. Now exit 2, one line naming the file and the key, nothing written."""
    from tunebench.cli import main

    folder, _ = make_results(tmp_path / "measured", **extra)
    out = tmp_path / "out"
    assert main(["plan", "--project_from", str(tmp_path / "measured"), "--plan_device", "NVIDIA H200",
                 "--results_output_path", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"  - {folder / 'results.json'}: {key}: {message} (fix: " in err
    assert not (out / "projection.csv").exists()


@pytest.mark.parametrize("devices, message", [
    (",", "',' holds an empty entry between or around its commas"),
    (" , ", "' , ' holds an empty entry between or around its commas"),
    ("NVIDIA H200,,NVIDIA L40S", "'NVIDIA H200,,NVIDIA L40S' holds an empty entry between or around its commas"),
    ("NVIDIA H200, NVIDIA H200", "'NVIDIA H200' is listed twice"),
    ("80GiB,NVIDIA H200", "'80GiB' is a size: --project_from projects onto a GPU kind"),
])
def test_a_device_list_naming_nothing_or_a_size_is_one_line(tmp_path, capsys, devices, message):
    """Issue AD: `--plan_device ","` raised `ValueError: No objects to concatenate` (exit 1)."""
    from tunebench.cli import main

    make_results(tmp_path / "measured")
    assert main(["plan", "--project_from", str(tmp_path / "measured"), "--plan_device", devices,
                 "--results_output_path", str(tmp_path / "out")]) == 2
    assert f"  - command line: --plan_device: {message}" in capsys.readouterr().err
    with pytest.raises(tunebench.InputError) as found:
        tunebench.project(tunebench.ProjectionOptions(project_from=str(tmp_path / "measured"), plan_device=devices))
    assert [(p.source, p.key) for p in found.value.problems] == [("ProjectionOptions", "plan_device")]


def test_several_gpu_kinds_are_each_projected(tmp_path):
    make_results(tmp_path / "measured")
    frame = tunebench.project(tunebench.ProjectionOptions(project_from=str(tmp_path / "measured"),
                                                          plan_device="NVIDIA H200, NVIDIA L40S", memory=False))
    assert list(frame["proj_device"]) == ["NVIDIA H200", "NVIDIA L40S"]


# ---------------------------------------------------------------- generated (hypothesis): every field, hostile
PROJECTION = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
hostile = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True,
                    allow_infinity=True), st.text(max_size=12), st.just(Path("nowhere")),
                    st.sampled_from(["NVIDIA H200", " , ", ",", "80GiB", "NVIDIA H200,,", "H100, H100", "ddp",
                                     "fsdp2", "tp", "x" * 300, "NVIDIA H200, NVIDIA L40S", "1e400"]),
                    st.lists(st.integers(), max_size=2))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("projection") / "measured"
    make_results(root)
    return root


@PROJECTION
@given(field=st.sampled_from([f.name for f in dataclasses.fields(tunebench.ProjectionOptions)]), value=hostile)
def test_every_projection_field_is_projected_or_one_problem_naming_it(measured, field, value):
    """Issue AD: the API's projection fields (new since 27072a4), each hostile in turn: a frame, or an InputError
    whose problems all name `ProjectionOptions: <field>` (a GPU table file names itself), never another error."""
    base = {"project_from": str(measured), "plan_device": "NVIDIA H200", "memory": False}
    try:
        frame = tunebench.project(tunebench.ProjectionOptions(**{**base, field: value}))
    except tunebench.InputError as error:
        event("refused")
        named = {field, "--gpu_table", *(("parallelism",) if field == "num_gpus" else ())}  # N GPUs need a sharing
        assert all(p.key in named or p.source == str(value) for p in error.problems), error.problems
    else:
        event("accepted")
        assert len(frame) >= 1 and frame["proj_steady_tokens_per_second"].map(math.isfinite).all()
