"""tunebench/api/projecting.py: `tunebench.project(ProjectionOptions(...))`, the typed edge of `plan --project_from`."""

import pytest

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
