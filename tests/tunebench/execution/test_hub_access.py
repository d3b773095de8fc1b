"""A hub model id that cannot be loaded here is one line naming the cause and the fix, exit 2, before any download
(issue W: 80 s of retries printed twice, then "cannot write … free space"); machine faults name theirs."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.api.diagnosis import environment_line
from tunebench.execution import hub_access
from tunebench.execution.hub_access import hub_problems


def _response(status: int):
    return SimpleNamespace(status_code=status, headers={}, request=None)


def _raising(exc):
    def probe(model, **kwargs):
        raise exc
    return probe


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: a connection is refused at once


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_an_unreachable_hub_is_exit_2_in_one_line_without_retries(tmp_path):
    """The real command, the real huggingface_hub, a hub endpoint nothing listens on."""
    options = write_inputs(tmp_path, [tiny_scenario(model_name_or_path=["org/name"])])
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}", "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": str(REPO)}
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, str(REPO / "benchmark.py"), *options, "--results_output_path",
                           str(tmp_path / "out"), "--log_level", "ERROR"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    problems = [line for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [f"  - model: org/name: cannot connect to the hub (network, proxy or firewall): "
                        f"{env['HF_ENDPOINT']} (fix: connect to {env['HF_ENDPOINT']}, or use a local folder with "
                        "config.json, or a preset:<name>)"]
    assert "Retry" not in proc.stderr and "cannot write" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("exc,expected", [
    (GatedRepoError("gated", response=_response(403)),
     "model: org/name: gated on the hub: its licence must be accepted by a logged-in user (fix: accept it at "
     "https://huggingface.co/org/name, then `hf auth login` or set HF_TOKEN)"),
    (RepositoryNotFoundError("nope", response=_response(404)),
     "model: org/name: not found on the hub (or private) (fix: check the id at https://huggingface.co/org/name; if "
     "private, `hf auth login` or set HF_TOKEN; or use a local folder with config.json, or a preset:<name>)"),
    (HfHubHTTPError("busy", response=_response(503)),
     "model: org/name: the hub answered HTTP 503 (fix: try again later, or use a local folder with config.json, or "
     "a preset:<name>)"),
    (TimeoutError("timed out"),
     "model: org/name: no answer from the hub in time (network, proxy or firewall): https://huggingface.co (fix: "
     "connect to https://huggingface.co, or use a local folder with config.json, or a preset:<name>)"),
])
def test_each_cause_is_named_with_its_fix(monkeypatch, exc, expected):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_access, "_endpoint", lambda: "https://huggingface.co")
    monkeypatch.setattr(hub_access, "_cached", lambda model: False)
    assert [str(p) for p in hub_problems(["org/name"], probe=_raising(exc))] == [expected]


def test_offline_uses_the_cache_and_names_a_model_missing_from_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_access, "_cached", lambda model: model == "org/cached")
    asked = []
    problems = hub_problems(["org/cached", "org/absent"], probe=asked.append)
    assert asked == []  # offline: no request at all
    assert [p.key for p in problems] == ["org/absent"]
    assert problems[0].message.startswith("HF_HUB_OFFLINE is set and it is not in the hub cache")


def test_an_unreachable_hub_with_a_cached_copy_points_at_offline_mode(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_access, "_cached", lambda model: True)
    (problem,) = hub_problems(["org/name"], probe=_raising(socket.gaierror(-2, "Name or service not known")))
    assert problem.message.startswith("cannot resolve the hub's host name (no network or no DNS)")
    assert problem.fix == "it is in the hub cache: set HF_HUB_OFFLINE=1 to use that copy"


def test_a_reachable_hub_passes_and_a_repository_without_config_is_named(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    files = {"org/model": ["config.json", "model.safetensors"], "org/dataset-like": ["README.md", "data.csv"]}

    def probe(model):
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=f) for f in files[model]])

    problems = hub_problems(list(files), probe=probe)
    assert [(p.key, p.message) for p in problems] == [
        ("org/dataset-like", "has no config.json on the hub (not a transformers model)")]


@pytest.mark.parametrize("exc,start", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/raw_summary.csv"),
     "tunebench: disk full: /r/raw_summary.csv: No space left on device (fix: free space"),
    (OSError(errno.EACCES, os.strerror(errno.EACCES), "/r/x"), "tunebench: permission denied: /r/x: Permission denied"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS), "/r/x"), "tunebench: read-only filesystem: /r/x"),
    (OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
             "cached files."), "tunebench: cannot load a model or dataset from the hub: We couldn't connect to"),
    (OSError(errno.EMFILE, os.strerror(errno.EMFILE)), "tunebench: system error: Too many open files"),
])
def test_a_machine_fault_names_its_cause(exc, start):
    line = environment_line(exc)
    assert line.startswith(start) and "\n" not in line
    assert ("free space" in line) == (exc.errno == errno.ENOSPC)


def test_a_hub_dataset_is_asked_about_too(monkeypatch):
    from tunebench.execution.hub_access import dataset_problems

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_access, "_endpoint", lambda: "https://huggingface.co")
    (problem,) = dataset_problems(["org/data"], probe=_raising(RepositoryNotFoundError("no", response=_response(404))))
    assert str(problem) == ("data: org/data: not found on the hub (or private) (fix: check the id at "
                            "https://huggingface.co/datasets/org/data; if private, `hf auth login` or set HF_TOKEN; "
                            "or use 'synthetic' or a local .json/.jsonl/.parquet file)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the datasets library reads its own cache
    assert dataset_problems(["org/data"], probe=_raising(AssertionError("asked"))) == []


def test_an_unreachable_hub_dataset_stops_a_run_before_anything_runs(tmp_path, capsys, monkeypatch):
    from tunebench import cli

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.dataset_info", _raising(ConnectionRefusedError(111, "refused")))
    options = write_inputs(tmp_path, [tiny_scenario(training_data_path="org/data")])
    assert cli.main([*options, "--results_output_path", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "  - data: org/data: cannot connect to the hub (network, proxy or firewall): " in err
    assert not (tmp_path / "out").exists()
