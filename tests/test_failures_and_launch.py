"""Unit tests: failure classification, command.sh quoting, argv round trip, process-group killing."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tunebench.execution.failures import classify, last_traceback
from tunebench.execution.launch import LaunchSpec, build_launch, command_script, run_process, to_argv
from tunebench.experiment.arguments import StrictArgumentParser
from tunebench.matrix.expansion import Experiment
from tunebench.matrix.inputs import FrameworkConfig

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


def test_argv_round_trips_through_the_entry_parser():
    args = {"output_dir": "/tmp/x y", "target_modules": ["q_proj", "v_proj"], "packing": False, "max_steps": 3,
            "learning_rate": 2e-5, "use_cpu": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}, "peft_method": "lora"}
    parsed = StrictArgumentParser().parse_argv(to_argv(args))
    peft, training = parsed[2], parsed[4]
    assert peft.target_modules == ["q_proj", "v_proj"] and training.packing is False
    assert training.max_steps == 3 and training.learning_rate == 2e-5
    assert training.gradient_checkpointing_kwargs == {"use_reentrant": False}


def test_command_sh_is_exactly_quoted(tmp_path):
    nasty = "it's a \"test\" $HOME `id` ; rm -rf /"
    spec = LaunchSpec(argv=[sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", nasty, "a b"],
                      env={}, repro_env={"CUDA_VISIBLE_DEVICES": "", "WEIRD": "x y'z"}, cwd=str(tmp_path))
    script = tmp_path / "command.sh"
    script.write_text(command_script(spec))
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [nasty, "a b"]


def test_build_launch_single_and_multi_process(tmp_path):
    exp = Experiment("s", FrameworkConfig("none"), 1, "cpu", {"model_name_or_path": "preset:llama-tiny", "max_steps": 2})
    spec = build_launch(exp, tmp_path, [], None)
    assert spec.argv[:3] == [sys.executable, "-m", "tunebench.experiment.train"]
    assert "--use_cpu" in spec.argv and spec.repro_env["CUDA_VISIBLE_DEVICES"] == ""
    repo = str(Path(__file__).resolve().parents[1])
    assert spec.repro_env["PYTHONPATH"].split(os.pathsep)[0] == repo  # the child imports this checkout's tunebench
    from tunebench.telemetry.environment import git_sha

    assert git_sha() is not None  # found this checkout's .git
    multi = Experiment("s", FrameworkConfig("ddp"), 2, "cuda", {"model_name_or_path": "preset:llama-tiny"})
    spec = build_launch(multi, tmp_path, [2, 3], "accelerate.yaml")
    assert spec.argv[1:3] == ["-m", "accelerate.commands.launch"]
    assert spec.argv[spec.argv.index("--num_processes") + 1] == "2"
    assert int(spec.argv[spec.argv.index("--main_process_port") + 1]) > 0
    assert spec.repro_env["CUDA_VISIBLE_DEVICES"] == "2,3" and spec.repro_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


LORA_ARGS = {"model_name_or_path": "preset:llama-tiny", "peft_method": "lora", "r": 8, "lora_alpha": 16,
             "target_modules": ["q_proj", "v_proj"], "debug": "underflow_overflow"}


def _entry_args_after_launcher(script_args: list[str]) -> tuple:
    """What tunebench.experiment.train does with the arguments a launcher hands it (argparse keeps or drops the `--`
    separator depending on the Python version; the entry accepts both)."""
    return StrictArgumentParser().parse_argv(script_args[1:] if script_args[:1] == ["--"] else script_args)


def test_launchers_hand_every_training_argument_to_the_entry(tmp_path):
    # LoRA's `--r` is an ambiguous abbreviation for torchrun's parser (--rdzv-*, --role, --run-path) and
    # `--debug` is one of accelerate's own options: both must reach the training entry untouched.
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    cpu = build_launch(Experiment("s", FrameworkConfig("none"), 2, "cpu", dict(LORA_ARGS)), tmp_path, [], None)
    assert cpu.argv[1:3] == ["-m", "torch.distributed.run"]
    torchrun = get_args_parser().parse_args(cpu.argv[3:])
    assert torchrun.module and torchrun.training_script == "tunebench.experiment.train"
    peft = _entry_args_after_launcher(torchrun.training_script_args)[2]
    assert peft.r == 8 and peft.target_modules == ["q_proj", "v_proj"]

    gpu = build_launch(Experiment("s", FrameworkConfig("ddp"), 2, "cuda", dict(LORA_ARGS)), tmp_path, [0, 1],
                       "accelerate.yaml")
    launch = launch_command_parser().parse_args(gpu.argv[3:])
    assert not launch.debug and launch.training_script == "tunebench.experiment.train"
    script_args = launch.training_script_args
    script_args = script_args[1:] if script_args[:1] == ["--"] else script_args
    assert script_args[script_args.index("--r") + 1] == "8"
    assert script_args[script_args.index("--debug") + 1] == "underflow_overflow"


def test_timeout_kills_the_whole_process_group(tmp_path):
    # A parent that spawns a grandchild which ignores SIGTERM: both must be gone after the timeout.
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)']); "
            "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(60)")
    pid_file = tmp_path / "grandchild.pid"
    spec = LaunchSpec([sys.executable, "-c", code, str(pid_file)], dict(os.environ), {}, str(tmp_path))
    start = time.monotonic()
    outcome = run_process(spec, tmp_path / "out", tmp_path / "err", timeout_seconds=2)
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
    (tmp_path / "error_rank0.json").write_text(json.dumps({"status": "error", "rank": 0,
                                                           "error_messages": "RuntimeError: Connection closed by peer"}))
    stderr = ("Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : localhost\n"
              "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 24970)  (SIGKILL)\n  error_file: <N/A>\n")
    status, message = classify(1, False, stderr, tmp_path)
    assert status == "error"
    assert message.startswith("rank 1 was killed by signal SIGKILL")
    assert "Connection closed by peer" in message
