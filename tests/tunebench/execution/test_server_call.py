"""tunebench/execution/server_call.py, and through it tunebench/matrix/validation.py and preparation.py: a run that
spawned the preload server checks its matrix and tokenises its data in forks of it, so the harness never imports the
training stack, and the answer is the one the harness would give itself (typed experiments, problems, lines said)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures.harness import REPO, tiny_scenario, write_inputs
from tunebench.experiment.fms.compat import installed

# One interpreter: the matrices typed in the server's fork first (TRL not imported here), then, TRL imported, the
# same matrices typed here. Each side: the experiments as the CSVs describe them with their typed values, the
# problems of a scenario with four mistakes, and every warning logged.
SCRIPT = r"""
import json, logging, sys
import tunebench
from tunebench.execution import preload

said = []
class Said(logging.Handler):
    def emit(self, record):
        said.append(f"{record.name}: {record.getMessage()}")
logging.getLogger().addHandler(Said())
logging.getLogger().setLevel(logging.INFO)

TINY = {"model_name_or_path": "preset:llama-tiny"}
GOOD = [{"name": "lora", "arguments": {**TINY, "peft_method": "lora", "r": 4, "learning_rate": "2e-5",
                                       "loss_band_kind": "last_bit"}},
        {"name": "full", "arguments": {**TINY, "max_steps": 12, "gradient_checkpointing": True}}]
BAD = [{"name": "bad", "arguments": {**TINY, "peft_method": "qlora4", "max_step": 5, "r": "four",
                                     "learning_rate": -1}}]

def side():
    del said[:]
    matrix = tunebench.Matrix.from_scenarios(GOOD, device="cpu", num_gpus=[1, 2])
    experiments = [[e.describe(), e.entry] for e in matrix.experiments]
    try:
        tunebench.Matrix.from_scenarios(BAD, device="cpu")
        problems = None
    except tunebench.InputError as exc:
        problems = [str(p) for p in exc.problems]
    keys = ("optim", "lr_scheduler_type", "seed", "gradient_checkpointing")
    defaults = {k: repr(e.value("training", k)) for e in matrix.experiments for k in keys}
    return {"experiments": experiments, "problems": problems, "said": list(said), "defaults": defaults}

preload.spawn()
served = side()
served["imported"] = sorted(m for m in ("torch", "transformers", "trl", "peft") if m in sys.modules)
from tunebench.experiment import arguments
arguments.hand_over(None)  # what the fork handed over is forgotten: the defaults are read from the class again
import trl  # noqa: F401  - now the harness types the matrices itself
here = side()
print(json.dumps({"served": served, "here": here}, default=str))
"""


@pytest.mark.slow  # the server imports the training stack: over 8 s on 2 cores
def test_the_servers_fork_types_the_matrix_as_the_harness_would_without_the_harness_importing_trl(tmp_path):
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sides = json.loads(proc.stdout.strip().splitlines()[-1])
    served, here = sides["served"], sides["here"]
    assert served.pop("imported") == []
    assert served == here
    assert len(here["experiments"]) == 4 and len(here["problems"]) == 4  # every mistake of BAD, in one go
    assert any("loss_band_kind" in line for line in here["said"])  # the fork's warnings are said here


def _raises_with_a_log(text: str) -> None:
    import logging

    logging.getLogger("tunebench.test").warning("before raising: %s", text)
    raise KeyError(text)


def _raises_a_chain() -> None:
    try:
        raise ConnectionError("the hub did not answer")
    except ConnectionError as exc:
        raise OSError(2, "no model there") from exc


class _Strict(OSError):
    """An error that pickle cannot rebuild (its __init__ takes a keyword only)."""

    def __init__(self, *, where: str):
        super().__init__(5, f"failed at {where}")


def _raises_strict() -> None:
    raise _Strict(where="the tokenizer")


def _dies_unless_in(pid: int) -> str:
    if os.getpid() != pid:
        os._exit(3)
    return "answered here"


def _starts_a_child_and_waits(pid_file: str) -> None:
    import time

    child = subprocess.Popen(["sleep", "300"])
    with open(pid_file, "w") as handle:
        handle.write(str(child.pid))
    time.sleep(300)


CALLS = r"""
import logging, os, sys, time
import psutil
from tunebench.execution import preload, server_call
from tests.tunebench.execution.test_server_call import (_dies_unless_in, _raises_a_chain, _raises_strict,
                                                        _raises_with_a_log, _starts_a_child_and_waits)

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
preload.spawn()
print("answer", server_call.call(divmod, 17, 5))
try:
    server_call.call(_raises_with_a_log, "gone")
except KeyError as exc:
    print("raised", repr(exc))
try:
    server_call.call(_raises_a_chain)
except OSError as exc:
    print("chain", repr(exc), repr(exc.__cause__))
try:
    server_call.call(_raises_strict)
except OSError as exc:
    print("rebuilt", repr(exc))
try:
    server_call.call(os._exit, 3)
except server_call.ServerUnavailable as exc:
    print("unavailable", exc)
print("answer again", server_call.call(sum, [1, 2, 3]))
unimported = "tunebench.a_module_this_process_never_imported"
print("in a fork", server_call.run_in_server(unimported, "asking", os.getpid) != os.getpid())
print("here, where the module is imported", server_call.run_in_server("os", "asking", os.getpid) == os.getpid())
print(server_call.run_in_server(unimported, "asking", _dies_unless_in, os.getpid()))
import signal, threading
threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT)).start()
started = time.monotonic()
try:
    server_call.call(_starts_a_child_and_waits, sys.argv[1])
except KeyboardInterrupt:
    print("interrupted at once", time.monotonic() - started < 30)
child = int(open(sys.argv[1]).read())
for _ in range(50):
    gone = not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    if gone:
        break
    time.sleep(0.1)
print("its child is gone", gone)
"""


@pytest.mark.slow  # the server imports the training stack: over 8 s on 2 cores
def test_a_call_answers_raises_logs_here_and_says_when_its_fork_died(tmp_path):
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CALLS, str(tmp_path / "child.pid")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "answer (3, 2)",
        "WARNING tunebench.test: before raising: gone",
        "raised KeyError('gone')",
        "chain FileNotFoundError(2, 'no model there') ConnectionError('the hub did not answer')",
        "rebuilt OSError(5, 'failed at the tokenizer')",
        "unavailable the fork of the preload server exited with 3 before answering",
        "answer again 6",
        "in a fork True",
        "here, where the module is imported True",
        "WARNING tunebench.execution.server_call: asking here instead: the fork of the preload server exited with 3 "
        "before answering",
        "answered here",
        "interrupted at once True",  # the fork was killed, not waited for (the script ends well before its 300 s)
        "its child is gone True",  # and what it started, with its group
    ]


FMS = r"""
import json, sys
import tunebench
from tunebench.execution import preload
from tunebench.experiment import acceleration
from tunebench.experiment.fms import checks

GPTQ = {"plugins": {"peft": {"quantization": {"auto_gptq": {"kernel": "triton_v2", "from_quantized": True,
                                                            "use_external_lib": False}}}}}
open(sys.argv[1], "w").write(json.dumps(GPTQ))
scenario = {"name": "gptq", "framework_config": ["my-gptq"],
            "arguments": {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora"}}
preload.spawn()
[experiment] = tunebench.Matrix.from_scenarios([scenario], device="cuda",
                                             fms_configs={"my-gptq": sys.argv[1]}).experiments
reason = acceleration.skip_reason(experiment.entry, experiment.model_name_or_path, "cuda")
print(json.dumps({"known": len(checks.known()), "probed_here": checks.probe.cache_info().misses,
                  "trl": "trl" in sys.modules}))
"""


@pytest.mark.slow  # the server imports the training stack: over 8 s on 2 cores
@pytest.mark.skipif(not installed("fms_acceleration_peft"), reason="fms-acceleration is not installed")
def test_fms_s_answers_come_back_with_the_typed_matrix_and_are_not_asked_again(tmp_path):
    """The fork asks fms (a child interpreter, 5-10 s) while it checks the matrix; the run's skip reasons then read
    the answers here instead of asking fms a second time."""
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", FMS, str(tmp_path / "gptq.yaml")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"known": 1, "probed_here": 0, "trl": False}


RUN = r"""
import sys
from tunebench.cli import main
code = main(sys.argv[1:])
print(code, sorted(m for m in ("torch", "transformers", "trl", "peft", "datasets") if m in sys.modules))
"""


@pytest.mark.slow  # a whole run: the server's imports and one experiment
def test_a_whole_run_leaves_the_training_stack_out_of_the_harness(tmp_path):
    """Checking the inputs and tokenising the data both ran in forks of the server: the harness process itself never
    imported torch, transformers, TRL, PEFT or datasets, and the experiment still ran. Its accelerator_config is
    checked again in the row on disk as the CSVs are rebuilt (on an H200 that imported transformers' trainer stack in
    the harness after the first row: 6.9 s between two experiments)."""
    options = write_inputs(tmp_path, [tiny_scenario(accelerator_config={"non_blocking": True})])
    env = {**os.environ, "TUNEBENCH_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", RUN, *options, "--results_output_path", str(tmp_path / "out"),
                           "--memory_logging", "none"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.stdout.strip().splitlines()[-1] == "0 []", proc.stderr[-3000:]
    import pandas as pd

    assert pd.read_csv(tmp_path / "out" / "raw_summary.csv")["status"].tolist() == ["ok"]
