"""Unit tests: failure classification, command.sh quoting, the one parse of the arguments, the launchers,
process-group killing.

Reached through the modules it calls (the launchers and the preload server):
tunebench/execution/launchers/accelerate.py, tunebench/execution/launchers/torchrun.py,
tunebench/execution/launchers/ranks.py, tunebench/execution/launchers/forkserver.py,
tunebench/execution/preload.py, tunebench/lifetime/forkserver_setup.py, tunebench/experiment/preloaded.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.harness import REPO
from tunebench.execution.experiment_run import RunOptions
from tunebench.execution.failures import classify, last_traceback
from tunebench.execution.launchers import choose, command_script
from tunebench.execution.launchers.base import LaunchCommand
from tunebench.execution.launchers.python import PythonLauncher
from tunebench.execution.processes import run_process
from tunebench.experiment.entry_parser import build_entry, entry_parser
from tunebench.experiment.spec import ExperimentSpec, FrameworkConfig, read_entry
from tunebench.matrix.validation import typed

RANK_OOM = """noise
[rank1]: Traceback (most recent call last):
[rank1]:   File "train.py", line 3, in <module>
[rank1]:     main()
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
W1121 other noise after
"""


def test_last_traceback_strips_rank_prefix_and_detects_oom(tmp_path):
    trace = last_traceback(RANK_OOM)
    assert trace.startswith("Traceback (most recent call last):")
    assert trace.endswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert "[rank1]" not in trace
    assert classify(1, False, RANK_OOM, tmp_path) == ("oom", trace)


def test_classify_timeout_signal_and_rank_error_files(tmp_path):
    assert classify(-9, True, "", tmp_path)[0] == "timeout"
    status, message = classify(-9, False, "", tmp_path)
    assert status == "error" and "SIGKILL" in message
    (tmp_path / "error_rank0.json").write_text(json.dumps({"status": "error", "error_messages": "boom", "rank": 0}))
    (tmp_path / "error_rank1.json").write_text(json.dumps({"status": "oom", "error_messages": "OOM!", "rank": 1}))
    assert classify(1, False, "", tmp_path) == ("oom", "[rank1] OOM!")


def test_arguments_are_typed_once_and_rebuilt_without_parsing():
    args = {"output_dir": "/tmp/x y", "target_modules": ["q_proj", "v_proj"], "packing": False, "max_steps": 3,
            "learning_rate": "2e-5", "use_cpu": True, "gradient_checkpointing_kwargs": {"use_reentrant": False},
            "peft_method": "lora", "per_device_train_batch_size": 4}
    values = entry_parser().typed_values(args)
    assert values["training"]["learning_rate"] == 2e-5  # YAML's `2e-5` is a string until this one parse
    assert values["training"]["per_device_train_batch_size"] == 4 and values["peft"]["target_modules"] == [
        "q_proj",
        "v_proj",
    ]
    built = build_entry(json.loads(json.dumps(values)))  # what the child does: spec.json → objects
    peft, training = built[2], built[4]
    assert peft.target_modules == ["q_proj", "v_proj"] and training.packing is False
    assert training.max_steps == 3 and training.learning_rate == 2e-5 and training.per_device_train_batch_size == 4
    kwargs = getattr(training, "activation_checkpointing_kwargs", None) or training.gradient_checkpointing_kwargs
    assert kwargs == {"use_reentrant": False}


def test_command_sh_is_exactly_quoted(tmp_path):
    nasty = "it's a \"test\" $HOME `id` ; rm -rf /"
    command = LaunchCommand(argv=[sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", nasty,
                                  "a b"], env={}, repro_env={"CUDA_VISIBLE_DEVICES": "", "WEIRD": "x y'z"},
                            cwd=str(tmp_path), entry_argv=[])
    script = tmp_path / "command.sh"
    script.write_text(command_script(command))
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [nasty, "a b"]


def _spec(num_gpus, device, framework="none", **arguments):
    fc = FrameworkConfig(framework, {}, min_gpus=1)
    return typed([ExperimentSpec("s", fc, num_gpus, device, {"model_name_or_path": "preset:llama-tiny", **arguments})])[
        0
    ]


def test_launchers_single_and_multi_process(tmp_path):
    spec = _spec(1, "cpu", max_steps=10)
    launcher = choose(spec, RunOptions(Path("out"), accelerate_config_path=None, preload=False))
    command = launcher.command(spec, tmp_path / "spec.json", [], {})
    assert launcher.name == "python" and command.argv[1:] == ["-m", "tunebench.experiment.train", "--spec",
                                                               str((tmp_path / "spec.json").resolve())]
    assert command.repro_env["CUDA_VISIBLE_DEVICES"] == ""
    repo = str(REPO)
    assert command.repro_env["PYTHONPATH"].split(os.pathsep)[0] == repo  # the child imports this checkout's tunebench
    from tunebench.telemetry.environment import git_sha

    assert git_sha() is not None  # found this checkout's .git
    assert choose(spec, RunOptions(Path("out"), accelerate_config_path=None, preload=True)).name == "forkserver"
    multi = _spec(2, "cuda")
    launcher = choose(multi, RunOptions(Path("out"), accelerate_config_path="accelerate.yaml", preload=True))
    command = launcher.command(multi, tmp_path / "spec.json", [2, 3], {})
    assert launcher.name == "accelerate" and command.argv[1:3] == ["-m", "accelerate.commands.launch"]
    assert command.argv[command.argv.index("--num_processes") + 1] == "2"
    assert int(command.argv[command.argv.index("--main_process_port") + 1]) > 0
    assert command.repro_env["CUDA_VISIBLE_DEVICES"] == "2,3" and command.repro_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    ranks = _spec(2, "cpu")  # several processes on CPU: torchrun's ranks over gloo, the same entry after its layout
    launcher = choose(ranks, RunOptions(Path("out"), accelerate_config_path=None, preload=True))
    command = launcher.command(ranks, tmp_path / "spec.json", [], {})
    layout = command.argv[3:command.argv.index("-m", 3)]
    assert launcher.name == "torchrun" and command.argv[1:3] == ["-m", "torch.distributed.run"]
    # torchelastic's logs in the experiment's folder, not a torchelastic_* folder in the temporary directory
    assert layout[:2] == ["--log_dir", str(tmp_path.resolve() / "torchelastic")]
    assert layout[2:8] == ["--nproc_per_node", "2", "--nnodes", "1", "--master_addr", "127.0.0.1"]
    assert command.argv[-4:] == ["-m", "tunebench.experiment.train", "--spec", str((tmp_path / "spec.json").resolve())]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_fms_experiments_start_in_a_fresh_interpreter():
    """fms's plugins patch peft's and transformers' classes for the whole process: never a fork of the preload
    server, even when --launcher forkserver asks for it (tunebench.execution.launchers.needs_fresh_interpreter)."""
    bnb = {"peft": {"quantization": {"bitsandbytes": {"quant_type": "nf4", "no_peft_model": False}}}}
    spec = _spec(1, "cpu", max_steps=10, peft_method="lora", fms_plugins=bnb)
    preloading = RunOptions(Path("out"), accelerate_config_path=None, preload=True)
    assert choose(spec, preloading).name == "python"
    asked = RunOptions(Path("out"), accelerate_config_path=None, preload=True, launcher="forkserver")
    assert choose(spec, asked).name == "python"
    assert choose(_spec(1, "cpu", max_steps=10), asked).name == "forkserver"


LORA_ARGS = {"peft_method": "lora", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"],
             "debug": "underflow_overflow"}


def test_launchers_hand_the_spec_to_the_entry_and_the_spec_holds_every_argument(tmp_path):
    # LoRA's `--r` was an ambiguous abbreviation for torchrun's parser and `--debug` one of accelerate's own
    # options: now no training argument is on the launcher's command line at all, only the spec's path.
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    cpu = _spec(2, "cpu", **LORA_ARGS)
    command = choose(cpu, RunOptions(Path("out"), accelerate_config_path=None, preload=True)).command(
        cpu, tmp_path / "spec.json", [], {}
    )
    assert command.argv[1:3] == ["-m", "torch.distributed.run"]
    torchrun = get_args_parser().parse_args(command.argv[3:])
    assert torchrun.module and torchrun.training_script == "tunebench.experiment.train"
    assert torchrun.training_script_args == ["--spec", str((tmp_path / "spec.json").resolve())]
    cpu.write(tmp_path, command.argv)
    peft = build_entry(read_entry(tmp_path / "spec.json"))[2]
    assert peft.r == 8 and peft.target_modules == ["q_proj", "v_proj"]

    gpu = _spec(2, "cuda", **LORA_ARGS)
    command = choose(gpu, RunOptions(Path("out"), accelerate_config_path="accelerate.yaml", preload=True)).command(
        gpu, tmp_path / "g.json", [0, 1], {}
    )
    launch = launch_command_parser().parse_args(command.argv[3:])
    assert not launch.debug and launch.training_script == "tunebench.experiment.train"
    assert launch.training_script_args == ["--spec", str((tmp_path / "g.json").resolve())]


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
def test_timeout_kills_the_whole_process_group(tmp_path):
    # A parent that spawns a grandchild which ignores SIGTERM: both must be gone after the timeout.
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print(flush=True); time.sleep(60)']); "
            "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(60)")
    pid_file = tmp_path / "grandchild.pid"
    command = LaunchCommand([sys.executable, "-c", code, str(pid_file)], dict(os.environ), {}, str(tmp_path), [])
    start = time.monotonic()
    outcome = run_process(PythonLauncher(), command, tmp_path / "out", tmp_path / "err", timeout_seconds=2)
    assert outcome.timed_out and time.monotonic() - start < 30
    assert not process_alive(int(pid_file.read_text()))


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_signal_constant_names():
    assert signal.Signals(9).name == "SIGKILL"


def test_killed_rank_is_the_root_cause_not_its_peers_error(tmp_path):
    (tmp_path / "error_rank0.json").write_text(
        json.dumps({"status": "error", "rank": 0, "error_messages": "RuntimeError: Connection closed by peer"})
    )
    stderr = ("Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : localhost\n"
              "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 24970)  (SIGKILL)\n  error_file: <N/A>\n")
    status, message = classify(1, False, stderr, tmp_path)
    assert status == "error"
    assert message.startswith("rank 1 was killed by signal SIGKILL")
    assert "Connection closed by peer" in message


@pytest.mark.slow
def test_a_harness_started_by_another_harness_survives_its_inherited_preload_variable(tmp_path):
    """A harness started from inside another (bisect's runs, a test process that ran cli.main) inherits the outer
    harness's TUNEBENCH_HARNESS_PID. Only the preload server may act on it: the inner harness once imported the
    server's guard itself, found its parent was not that pid and exited 1 without a word."""
    from tests.fixtures.harness import tiny_scenario, write_inputs

    options = write_inputs(tmp_path, [tiny_scenario("inherited", max_steps=4)])
    env = {**os.environ, "TUNEBENCH_HARNESS_PID": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "benchmark.py", *options, "--results_output_path", str(tmp_path / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok" in (tmp_path / "out" / "raw_summary.csv").read_text()


def test_a_process_that_failed_before_opening_its_logs_says_so(tmp_path):
    """Issue W2: a forked experiment that failed while starting (before it opened stderr.log) was a row saying only
    `exit code 1`; it says where its cause went. With a stderr.log, its last traceback (or the code) as before."""
    from tunebench.execution.failures import classify

    status, message = classify(1, False, "", tmp_path)
    assert status == "error" and message.startswith("exit code 1 before the experiment opened its stderr.log")
    (tmp_path / "stderr.log").write_text("")
    assert classify(1, False, "", tmp_path) == ("error", "exit code 1")
