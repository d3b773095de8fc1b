"""Build an experiment's command (argv + env, never a shell string) and run it in its own process group."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.lifetime import LAUNCHED_GROUP_ENV, preexec_dying_with_parent
from tunebench.matrix.expansion import Experiment

logger = logging.getLogger(__name__)

# Variables a repro needs: they change what runs or how it is measured. Anything else in the harness's
# environment is inherited but not written into command.sh (it would leak unrelated, possibly secret, values).
_REPRO_ENV_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "HF_", "TRANSFORMERS_", "ACCELERATE_", "OMP_",
                       "TOKENIZERS_", "SCANNER_", "TUNEBENCH_", "MASTER_", "NVSHMEM_")


def to_argv(arguments: dict[str, Any]) -> list[str]:
    """`{key: value}` → `--key value` in the form HfArgumentParser reads back (bools as true/false, lists
    as separate values, dicts as JSON)."""
    argv: list[str] = []
    for key, value in arguments.items():
        if value is None:
            continue
        argv.append(f"--{key}")
        if isinstance(value, bool):
            argv.append("true" if value else "false")
        elif isinstance(value, (list, tuple)):
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            argv.append(json.dumps(value, sort_keys=True))
        else:
            argv.append(str(value))
    return argv


def free_port() -> int:
    """An unused TCP port for torch.distributed's rendezvous (one per experiment: runs never collide)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # complete environment of the child
    repro_env: dict[str, str]  # the subset written into command.sh
    cwd: str
    entry_argv: list[str] | None = None  # single process: the training entry's own arguments (for preloading)


def entry_arguments(experiment: Experiment, output_dir: Path) -> dict[str, Any]:
    args = dict(experiment.arguments)
    args["output_dir"] = str(output_dir / "trainer_output")
    args["results_json"] = str(output_dir / "results.json")
    if experiment.device_type == "cpu":
        args["use_cpu"] = True
    return args


def build_launch(
    experiment: Experiment,
    output_dir: Path,
    gpu_ids: list[int],
    accelerate_config_path: str | None,
    extra_env: dict[str, str] | None = None,
) -> LaunchSpec:
    """One process: `python -m tunebench.experiment.train`; N processes: `accelerate launch` with a free port."""
    training_argv = to_argv(entry_arguments(experiment, output_dir))
    entry = ["-m", "tunebench.experiment.train", *training_argv]
    # A launcher parses its own options out of the whole command line before it hands the rest to the script:
    # torchrun's parser accepts abbreviations, so LoRA's `--r 8` read as an ambiguous `--rdzv-*`/`--role`, and
    # a training key equal to a launcher option (`--role`, `--debug`) would be taken by the launcher. `--`
    # ends the launcher's options; the entry drops it.
    launched_entry = ["-m", "tunebench.experiment.train", "--", *training_argv]
    nproc = experiment.num_gpus
    if nproc > 1 and experiment.device_type == "cpu":
        # `accelerate launch --cpu` starts a single process (multi-CPU there means MPI). torchrun is what
        # accelerate's multi-GPU launcher runs underneath; on CPU the Trainer then uses gloo.
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--nnodes", "1",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *launched_entry]
    elif nproc > 1:
        launcher = [sys.executable, "-m", "accelerate.commands.launch"]
        if accelerate_config_path:
            launcher += ["--config_file", str(Path(accelerate_config_path).resolve())]
        launcher += ["--num_processes", str(nproc), "--num_machines", "1", "--main_process_port", str(free_port())]
        for key, value in experiment.framework_config.accelerate_args.items():
            launcher += [f"--{key}", str(value)]
        argv = [*launcher, *launched_entry]
    else:
        argv = [sys.executable, *entry]

    repro_env: dict[str, str] = {}
    if experiment.device_type == "cuda":
        # nvidia-smi numbers GPUs in PCI bus order; CUDA's default order ranks by speed. Pinning CUDA to PCI
        # order makes "GPU 3" mean the same device to CUDA, to nvidia-smi and to the user.
        repro_env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        repro_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
        repro_env.setdefault("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE", "0"))
    else:
        repro_env["CUDA_VISIBLE_DEVICES"] = ""
    repro_env.update(extra_env or {})
    # The harness's own package must be importable by the child even when tunebench is not installed.
    repo_root = str(Path(__file__).resolve().parents[2])  # tunebench/execution/ → the repository
    python_path = [p for p in [repro_env.get("PYTHONPATH"), repo_root, os.environ.get("PYTHONPATH")] if p]
    repro_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.pathsep.join(python_path).split(os.pathsep)))
    for key, value in os.environ.items():
        if key.startswith(_REPRO_ENV_PREFIXES) and key not in repro_env:
            repro_env[key] = value
    # Not in command.sh: only under the harness does every rank die with the launcher that leads its group.
    env = {**os.environ, **repro_env, LAUNCHED_GROUP_ENV: "1"}
    return LaunchSpec(argv=argv, env=env, repro_env=repro_env, cwd=os.getcwd(),
                      entry_argv=training_argv if nproc == 1 else None)


def command_script(spec: LaunchSpec) -> str:
    """A runnable, exactly quoted repro: `bash command.sh` reruns the experiment."""
    lines = ["#!/usr/bin/env bash", "# Re-runs this experiment exactly as tunebench launched it.", "set -euo pipefail",
             f"cd {shlex.quote(spec.cwd)}"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec.repro_env.items()))
    lines.append(f"env {env} \\\n  {shlex.join(spec.argv)}")
    return "\n".join(lines) + "\n"


@dataclass
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    wall_seconds: float
    started_unix: float = 0.0  # wall clock when the process was spawned


def kill_process_group(proc, grace_seconds: float = 10.0) -> None:
    """SIGTERM the whole group (launcher + every rank), then SIGKILL what is left: no orphans.

    `proc` is a Popen or a PreloadedProcess; its pid is its process group id (both start a new session).
    """
    if proc.poll() is not None and not _group_alive(proc.pid):
        return
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            if proc.poll() is not None:
                return
            os.kill(proc.pid, sig)  # a fork not yet in its own session: signal the process itself
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.05)
    proc.wait(timeout=5)


class PreloadedProcess:
    """A Popen-like view (pid, poll, wait, returncode) of an experiment forked from the preload server."""

    def __init__(self, process):
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"preloaded experiment {self.pid}", timeout)
        return self.process.exitcode


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in the group. Zombies count as gone: they hold no
    memory or GPU and are reaped by whoever inherited them."""
    proc_root = "/proc"
    if not os.path.isdir(proc_root):
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc_root}/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def run_process(spec: LaunchSpec, stdout_path: Path, stderr_path: Path, timeout_seconds: float | None,
                preload: bool = False) -> ProcessOutcome:
    """Run to completion or timeout; on timeout or Ctrl-C the whole process group is killed.

    `preload`: a single-process experiment is forked from the preload server instead of a new interpreter
    (same entry, arguments and environment; see tunebench.execution.preload).
    """
    start, started_unix = time.monotonic(), time.time()
    if preload and spec.entry_argv is not None:
        from tunebench.execution import preload as preloader

        proc = PreloadedProcess(preloader.start(spec.entry_argv, spec.env, spec.cwd, str(stdout_path),
                                                str(stderr_path)))
        return _wait(proc, start, started_unix, timeout_seconds)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(spec.argv, env=spec.env, cwd=spec.cwd, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=preexec_dying_with_parent())
        return _wait(proc, start, started_unix, timeout_seconds)


# Every experiment process group currently running in this harness (the executors' worker threads start
# them): `stop_all()` ends them all when the harness is interrupted or terminated, and records why, so each
# interrupted experiment's row names the cause.
_RUNNING: set = set()
_RUNNING_LOCK = threading.Lock()
_STOP = {"reason": None}


def stop_description(exc: BaseException) -> str:
    """What stopped the harness, for the rows of the experiments it interrupted."""
    signum = getattr(exc, "signum", None)
    if signum is not None:
        return signal.Signals(signum).name
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT (Ctrl-C)"
    return f"a harness error ({type(exc).__name__}: {str(exc)[:200]})"


def stop_reason() -> str | None:
    """Why the harness is stopping (set by stop_all), or None while it runs normally."""
    return _STOP["reason"]


def reset_stop() -> None:
    _STOP["reason"] = None


def stop_all(grace_seconds: float = 3.0, reason: str = "a stop request") -> int:
    """Kill every running experiment's process group; returns how many there were."""
    _STOP["reason"] = reason
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        kill_process_group(proc, grace_seconds=grace_seconds)
    return len(running)


def _wait(proc, start: float, started_unix: float, timeout_seconds: float | None) -> ProcessOutcome:
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    try:
        returncode = proc.wait(timeout=timeout_seconds)
        # Ranks can outlive a launcher that exited early; reap the group either way.
        kill_process_group(proc, grace_seconds=2.0)
        return ProcessOutcome(returncode, False, time.monotonic() - start, started_unix)
    except subprocess.TimeoutExpired:
        logger.warning("experiment timed out after %.0f s; killing its process group", timeout_seconds)
        kill_process_group(proc)
        return ProcessOutcome(proc.returncode, True, time.monotonic() - start, started_unix)
    except BaseException:  # Ctrl-C, SIGTERM/SIGHUP turned into exceptions: stop the experiment first
        kill_process_group(proc, grace_seconds=3.0)
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
