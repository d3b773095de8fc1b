"""tunebench/experiment/deferred_module.py: a deferred module runs its code once, on first use, and not before;
the preload server leaves bitsandbytes unexecuted (issue AE: 8-9 s of every row's start-up)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

from tests.fixtures.harness import REPO
from tunebench.experiment.deferred_module import DeferredModule, defer, loaded


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package whose __init__ and submodule count their executions in `runs.txt`."""
    root = tmp_path / "deferred_probe_pkg"
    root.mkdir()
    log = tmp_path / "runs.txt"
    record = f"open({str(log)!r}, 'a').write(__name__ + '\\n')\n"
    (root / "__init__.py").write_text(record + "VALUE = 42\n")
    (root / "sub.py").write_text(record + "from deferred_probe_pkg import VALUE\nDOUBLE = 2 * VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield log
    for name in [m for m in sys.modules if m.startswith("deferred_probe_pkg")]:
        del sys.modules[name]


def runs(log) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_the_module_runs_once_on_first_attribute_and_not_on_import_or_inspection(package):
    assert defer("deferred_probe_pkg")
    import deferred_probe_pkg as bound  # what `import bitsandbytes as bnb` in PEFT binds

    assert isinstance(bound, DeferredModule) and not loaded("deferred_probe_pkg")
    assert bound.__file__.endswith("__init__.py") and bound.__spec__.name == "deferred_probe_pkg"
    inspect.getmodule(test_the_module_runs_once_on_first_attribute_and_not_on_import_or_inspection)  # walks sys.modules
    assert runs(package) == [] and not loaded("deferred_probe_pkg")
    assert bound.VALUE == 42 and loaded("deferred_probe_pkg")
    assert bound.VALUE == 42 and runs(package) == ["deferred_probe_pkg"]
    assert sys.modules["deferred_probe_pkg"] is not bound and sys.modules["deferred_probe_pkg"].VALUE == 42


def test_a_submodule_import_runs_the_package_first(package):
    assert defer("deferred_probe_pkg")
    from deferred_probe_pkg import sub

    assert sub.DOUBLE == 84 and runs(package) == ["deferred_probe_pkg", "deferred_probe_pkg.sub"]
    import deferred_probe_pkg

    assert deferred_probe_pkg.sub is sub and runs(package) == ["deferred_probe_pkg", "deferred_probe_pkg.sub"]


def test_nothing_is_deferred_that_is_imported_already_missing_or_a_submodule(package):
    assert not defer("no_such_module_anywhere_xyz")
    assert not defer("deferred_probe_pkg.sub")
    import deferred_probe_pkg  # noqa: F401

    assert not defer("deferred_probe_pkg") and runs(package) == ["deferred_probe_pkg"]
    assert "no_such_module_anywhere_xyz" not in sys.modules


# The server's own imports, on any machine (a GPU machine's forks need it; without GPUs it is start-up saved): PEFT,
# TRL and the training entry are imported, transformers' conversion table built, bitsandbytes held, and a QLoRA
# layer still resolves.
SERVER = textwrap.dedent("""
    import sys
    import tunebench.experiment.preloaded
    from transformers import conversion_mapping
    from tunebench.experiment.deferred_module import loaded
    wanted = ["peft", "trl", "scanner.callback", "tunebench.experiment.train", "tunebench.experiment.trainer"]
    print("imported", all(name in sys.modules for name in wanted))
    print("conversions built", conversion_mapping._checkpoint_conversion_mapping_cache is not None)
    print("bitsandbytes ran", loaded("bitsandbytes"), [m for m in sys.modules if m.startswith("bitsandbytes.")])
    from peft.tuners.lora import bnb
    import bitsandbytes
    print("qlora layer", bnb.Linear4bit.__name__, bitsandbytes.nn.Linear4bit.__module__, loaded("bitsandbytes"))
""")


@pytest.mark.slow  # a fresh interpreter importing PEFT and TRL: over 8 s
@pytest.mark.skipif(not __import__("importlib").util.find_spec("bitsandbytes"), reason="bitsandbytes not installed")
def test_the_preload_server_imports_peft_and_trl_and_holds_bitsandbytes():
    proc = subprocess.run([sys.executable, "-c", SERVER], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "imported True", "conversions built True", "bitsandbytes ran False []",
        "qlora layer Linear4bit bitsandbytes.nn.modules True"]


# On a GPU machine, the server's imports must leave CUDA usable in its forks: a fork of a process that initialised
# CUDA cannot use it, and each experiment then falls back to a new interpreter (startup_preloaded false). A CPU build
# of torch cannot show this (an H200 run did: importing torch.compile's modules in the server poisoned every fork).
FORKED = textwrap.dedent("""
    import os, sys
    import tunebench.experiment.preloaded
    import torch
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0 if torch.ones(1, device="cuda").item() == 1 else 4)
    print("fork exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")


@pytest.mark.gpu
def test_a_fork_of_the_preload_server_s_imports_can_use_cuda():
    proc = subprocess.run([sys.executable, "-c", FORKED], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "fork exit 0"
