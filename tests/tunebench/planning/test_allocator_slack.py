"""The allocator's slack at a GPU's edge (tunebench.planning.allocator_slack): read from measured sweeps, added to
the peak as `pred_mem_reserved`, judged by `fits`; CUDA experiments run with the allocator setting it assumes."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.planning import allocator_slack
from tunebench.planning.accelerations import bound_extra
from tunebench.planning.allocator_slack import EDGE_FILE, edge_slack, sweep_edges
from tunebench.planning.predict import CONTEXT_RESERVE, fit_columns, reserved_bytes, usable_bytes
from tunebench.planning.residuals import upper
from tunebench.telemetry.environment import DEFAULT_ALLOC_CONF

GIB = 1024**3


def _sweep(points, conf="expandable_segments:True", model="m", compiled=False):
    """points: (micro_batch, status, allocated, reserved)."""
    return [{"gpu_name": "G", "model_name_or_path": model, "gradient_checkpointing": False, "max_seq_len": 8,
             "cuda_alloc_conf": conf, "torch_compile": compiled, "per_device_train_batch_size": b, "status": s,
             "mem_peak_torch_max_allocated_bytes": a, "mem_peak_torch_max_reserved_bytes": r} for b, s, a, r in points]


def test_the_slack_is_reserved_minus_allocated_at_each_sweeps_last_point_that_ran():
    rows = _sweep([(1, "ok", 10, 50), (2, "ok", 20, 23), (3, "oom", None, None)]) + \
        _sweep([(4, "ok", 40, 47), (5, "oom", None, None)], model="n") + \
        _sweep([(1, "ok", 10, 90)], model="never-met-its-edge") + \
        _sweep([(1, "oom", None, None), (2, "ok", 20, 99), (3, "oom", None, None)], model="oom-below-a-run")
    edges = sweep_edges(pd.DataFrame(rows))
    assert sorted((e["model_name_or_path"], e["micro_batch"], e["slack"]) for e in edges) == [("m", 2, 3), ("n", 4, 7)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.sampled_from(["ok", "oom", "timeout"]), st.integers(0, 10**12),
                          st.integers(0, 10**12)), max_size=12))
def test_any_sweep_gives_edges_that_ran_below_an_oom_and_never_a_negative_slack(points):
    edges = sweep_edges(pd.DataFrame(_sweep(points)))
    for edge in edges:
        assert edge["slack"] >= 0
        assert any(b == edge["micro_batch"] and s == "ok" for b, s, _, _ in points)
        assert all(b > edge["micro_batch"] for b, s, _, _ in points if s == "oom")


def test_the_measured_h100_sweeps_verdicts_with_the_shipped_slack():
    """Every measured point of the shipped sweeps: `fits` (peak + the slack for its allocator setting, within the
    capacity less the context) is what happened (ran, or ran out of memory)."""
    data = pd.read_csv(EDGE_FILE)
    # llama-3.2-1b + checkpointing, micro-batch 22: reserved − the bound of its predicted peak (planning.residuals)
    assert edge_slack("expandable_segments:True") == 1_170_569_728
    assert edge_slack("expandable_segments:True", compiled=True) < 512 * 2**20  # inductor reuses its buffers
    for _, row in data.iterrows():
        compiled = bool(row.torch_compile)
        bound = upper(int(row.pred_mem_peak), "peak", row.gpu_name, row.cuda_alloc_conf) + \
            bound_extra(int(row.pred_mem_peak), "default" if compiled else None)
        verdict = fit_columns(bound, int(row.capacity_bytes), edge_slack(row.cuda_alloc_conf, compiled))
        assert verdict["pred_fits"] == (row.status == "ok"), (row.model_name_or_path, row.per_device_train_batch_size,
                                                               row.cuda_alloc_conf)


def test_a_compiled_step_takes_the_slack_of_compiled_sweeps_else_the_eager_one(tmp_path, monkeypatch):
    conf = "expandable_segments:True"
    eager = _sweep([(1, "ok", 10, 50), (2, "oom", None, None)])  # slack 40
    compiled = _sweep([(3, "ok", 30, 33), (4, "oom", None, None)], model="c", compiled=True)  # slack 3
    for rows, expected in ((eager + compiled, (40, 3)), (eager, (40, 40))):
        path = tmp_path / f"edge-{len(rows)}.csv"
        pd.DataFrame(rows).to_csv(path, index=False)
        monkeypatch.setattr(allocator_slack, "EDGE_FILE", path)
        edge_slack.cache_clear()
        assert (edge_slack(conf), edge_slack(conf, compiled=True)) == expected
    edge_slack.cache_clear()


def test_fit_columns_judge_the_reserved_figure_and_keep_the_usable_capacity():
    capacity = 80 * GIB
    usable = capacity - CONTEXT_RESERVE
    edge = fit_columns(usable - GIB, capacity, slack=GIB)
    assert edge["pred_mem_reserved"] == usable and edge["pred_fits"] and edge["pred_fit_margin_bytes"] == 0
    over = fit_columns(usable - GIB + 1, capacity, slack=GIB)
    assert not over["pred_fits"] and over["pred_fit_margin_bytes"] == -1
    prediction = {"pred_mem_peak": usable - GIB + 1, **over}
    assert reserved_bytes(prediction) == usable + 1 and usable_bytes(prediction) == usable
    assert reserved_bytes({"pred_mem_peak": 5}) == 5  # a row from before pred_mem_reserved
    assert fit_columns(7, None, slack=3) == {"pred_mem_reserved": 10, "pred_capacity_bytes": None,
                                             "pred_fits": None, "pred_fit_margin_bytes": None}


def test_an_unknown_allocator_setting_takes_the_largest_measured_slack(caplog):
    assert edge_slack("max_split_size_mb:128") == max(edge["slack"] for edge in sweep_edges(pd.read_csv(EDGE_FILE)))
    assert "no measured GPU edge" in caplog.text


@pytest.mark.parametrize("user", [None, "expandable_segments:False"])
def test_cuda_experiments_run_with_the_assumed_allocator_unless_the_user_chose(monkeypatch, user):
    from tunebench.execution.launchers.base import environment
    from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig
    from tunebench.telemetry.environment import environment_columns

    if user is None:
        monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    else:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", user)
    expected = user or DEFAULT_ALLOC_CONF
    gpu = ExperimentSpec("s", FrameworkConfig("fc"), 1, "cuda", {})
    env, repro = environment(gpu, [0], {})
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == repro["PYTORCH_CUDA_ALLOC_CONF"] == expected
    assert environment_columns("cuda", gpus=[])["cuda_alloc_conf"] == expected
    cpu = ExperimentSpec("s", FrameworkConfig("fc"), 1, "cpu", {})
    assert environment(cpu, [], {})[1].get("PYTORCH_CUDA_ALLOC_CONF") == user  # passed on, never added
    assert environment_columns("cpu", gpus=[])["cuda_alloc_conf"] is None


def test_an_evidence_sweep_appends_its_rows_once(tmp_path, monkeypatch, capsys):
    """docs/evidence/common/allocator_edge_rows.py: a sweep's summary becomes edge rows; appending it again changes
    nothing (rows of the same point are replaced), and the slack learned from them follows."""
    import shutil

    from tests.fixtures.harness import EVIDENCE, load_script

    edge_rows = load_script(EVIDENCE / "common" / "allocator_edge_rows.py")
    data = tmp_path / "edge.csv"
    shutil.copy(EDGE_FILE, data)
    monkeypatch.setattr(edge_rows, "EDGE_FILE", data)
    summary = tmp_path / "raw_summary.csv"
    pd.DataFrame([{"status": s, "per_device_train_batch_size": b, "pred_capacity_bytes": 80 * GIB,
                   "gpu_name": "G", "model_name_or_path": "m", "gradient_checkpointing": False, "max_seq_len": 8,
                   "pred_mem_peak": p, "mem_peak_torch_max_allocated_bytes": a,
                   "mem_peak_torch_max_reserved_bytes": r} for s, b, p, a, r in
                  [("ok", 1, 10, 11, 11 + 2 * GIB), ("oom", 2, 20, None, None), ("error", 3, 30, None, None)]]
                 ).to_csv(summary, index=False)
    before = len(pd.read_csv(data))
    edge_rows.main(str(summary), "doc.md")
    once = data.read_text()
    edge_rows.main(str(summary), "doc.md")
    assert data.read_text() == once and len(pd.read_csv(data)) == before + 2  # the error row is no edge point
    edges = sweep_edges(pd.read_csv(data))
    # reserved − the bound of the predicted peak (10 B, whose bound is one 512 B allocator block)
    assert {"model_name_or_path": "m", "micro_batch": 1, "slack": 11 + 2 * GIB - 512}.items() <= next(
        e for e in edges if e["model_name_or_path"] == "m").items()
