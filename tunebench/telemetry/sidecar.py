"""A GPU memory/power poller run as a separate process (nvidia-smi or NVML) that can never be orphaned."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from tunebench.lifetime.parent_death import preexec_dying_with_parent
from tunebench.telemetry.gpus import QUERY_TIMEOUT_S, GpuInfo
from tunebench.telemetry.poll_log import POLL_FIELDS, empty_summary, parse_poll_text, summarize_poll_log

logger = logging.getLogger(__name__)

BACKENDS = ("nvidia-smi", "nvml")
POLL_LOG_NAME = "nvidia_smi.csv"


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    # The poller leads its own group (setpgid(0, 0)), so its pgid is its pid. Only called while the
    # process is not yet reaped, so the id cannot have been recycled.
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:  # group not formed yet (exec race); fall back to the process itself
        proc.send_signal(sig)


class NvidiaSmiSidecar:
    """Context manager: baseline per GPU, poll while the body runs, always stop and reap the poller.

    Usage:
        with NvidiaSmiSidecar(gpus, experiment_dir) as sidecar:
            run_experiment()
        row.update(sidecar.summary(nonpad_tokens))
    Never raises into the harness because of nvidia-smi: failures log a warning and yield None columns.
    """

    def __init__(
        self,
        gpus: list[GpuInfo],
        out_dir: Path,
        loop_ms: int = 100,
        backend: str = "nvidia-smi",
        *,
        stop_timeout_s: float = 5.0,
        query_timeout_s: float = QUERY_TIMEOUT_S,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"sidecar backend {backend!r} is not one of {BACKENDS}")
        if isinstance(loop_ms, bool) or not isinstance(loop_ms, int) or loop_ms < 1:
            raise ValueError(f"--loop-ms must be a positive integer (milliseconds), got {loop_ms!r}")
        self.gpus = list(gpus)
        self.out_dir = Path(out_dir)
        self.loop_ms = loop_ms
        self.backend = backend
        self.stop_timeout_s = stop_timeout_s
        self.query_timeout_s = query_timeout_s
        self.poll_csv = self.out_dir / POLL_LOG_NAME
        self.baseline_mib: dict[str, float] = {}
        self.failure: str | None = None  # why the columns are empty, if they are
        self.poller_pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._partial = self.out_dir / (POLL_LOG_NAME + ".partial")
        self._exited = False

    # -- commands ---------------------------------------------------------------------------------------
    def _command(self, loop: bool) -> list[str] | None:
        ids = ",".join(g.uuid for g in self.gpus)  # UUIDs: unambiguous whatever the enumeration order
        if self.backend == "nvml":
            # Run by file path so the child needs neither tunebench installed nor the harness's cwd.
            script = str(Path(__file__).with_name("nvml_sidecar.py"))
            cmd = [sys.executable, script, "--ids", ids]
            return cmd + (["--loop-ms", str(self.loop_ms)] if loop else [])
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return None
        cmd = [exe, f"--query-gpu={','.join(POLL_FIELDS)}", "--format=csv,noheader,nounits", "-i", ids]
        return cmd + (["-lms", str(self.loop_ms)] if loop else [])

    def _fail(self, reason: str) -> None:
        self.failure = reason
        logger.warning("GPU sidecar disabled: %s; nvidia-smi columns will be empty", reason)

    def _read_baseline(self, cmd: list[str]) -> bool:
        """One sample per GPU before launch: memory.used that is not the experiment's."""
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=self.query_timeout_s,
                check=False,
                preexec_fn=preexec_dying_with_parent(new_session=False),
            )
        except subprocess.TimeoutExpired:
            self._fail(f"baseline query hung for more than {self.query_timeout_s:.0f} s")
            return False
        except OSError as exc:
            self._fail(f"baseline query could not start ({exc})")
            return False
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            self._fail(f"baseline query exited {proc.returncode}: {tail[-1] if tail else ''}")
            return False
        frame = parse_poll_text(proc.stdout).frame
        for gpu in self.gpus:
            used = frame.loc[frame["uuid"] == gpu.uuid, "memory.used"]
            if used.empty:
                self._fail(f"baseline query returned nothing for GPU {gpu.uuid}")
                return False
            self.baseline_mib[gpu.uuid] = float(used.iloc[0])
        return True

    # -- lifecycle --------------------------------------------------------------------------------------
    def __enter__(self) -> NvidiaSmiSidecar:
        if not self.gpus:
            self._fail("no GPUs to poll (nvidia-smi missing or no GPU visible)")
            return self
        once, loop = self._command(loop=False), self._command(loop=True)
        if once is None or loop is None:
            self._fail("nvidia-smi not found on PATH")
            return self
        if not self._read_baseline(once):
            return self
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            # Streamed to a .partial file and renamed after the poller is reaped, so nvidia_smi.csv only
            # ever exists complete. The header is ours: the poller runs with `noheader`.
            with open(self._partial, "w", encoding="utf-8") as log:
                log.write(",".join(POLL_FIELDS) + "\n")
                log.flush()
                self._stderr = tempfile.TemporaryFile()
                self._proc = subprocess.Popen(
                    loop,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=self._stderr,
                    preexec_fn=preexec_dying_with_parent(new_session=False),
                    close_fds=True,
                )
            self.poller_pid = self._proc.pid
            logger.info("GPU poller pid %d: %s", self._proc.pid, " ".join(loop))
        except (OSError, subprocess.SubprocessError) as exc:
            self._fail(f"poller could not start ({exc})")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop and reap the poller (SIGTERM to its group → wait → SIGKILL → wait). Idempotent."""
        self._exited = True
        proc, self._proc = self._proc, None
        if proc is None:
            return
        early_exit = proc.poll()
        try:
            if early_exit is None:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "GPU poller %d ignored SIGTERM for %.0f s: killing", proc.pid, self.stop_timeout_s
                    )
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
        finally:
            # Reached with the poller unreaped only if the wait was interrupted (e.g. a second Ctrl-C).
            if proc.returncode is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            self._finish_files(proc, early_exit)

    def _finish_files(self, proc: subprocess.Popen, early_exit: int | None) -> None:
        stderr_tail = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
            stderr_tail = lines[-1] if lines else ""
            self._stderr.close()
            self._stderr = None
        if early_exit is not None:
            # A poller that stopped before the experiment ended saw only part of it: no partial numbers.
            self._fail(f"poller exited on its own with code {early_exit} before the run ended: {stderr_tail}")
        if self._partial.exists():
            os.replace(self._partial, self.poll_csv)
        logger.debug("GPU poller %d reaped (exit %s)", proc.pid, proc.returncode)

    def summary(
        self, nonpad_tokens: int | None, *, energy_window: tuple[float, float] | None = None
    ) -> dict[str, float | int | None]:
        """Sidecar columns (see poll_log.summarize_poll_log); all None if the sidecar failed."""
        if not self._exited:
            raise RuntimeError("NvidiaSmiSidecar.summary() called before the with-block ended")
        if self.failure is not None or not self.poll_csv.exists():
            return empty_summary(len(self.gpus))
        try:
            summary = summarize_poll_log(
                self.poll_csv,
                self.baseline_mib,
                nonpad_tokens,
                gpu_uuids=[g.uuid for g in self.gpus],
                energy_window=energy_window,
            )
        except Exception as exc:  # a parsing bug must not crash the matrix: report empty columns
            logger.warning("could not summarise %s: %s", self.poll_csv, exc, exc_info=True)
            return empty_summary(len(self.gpus))
        if not summary.get("nvidia_smi_samples"):
            logger.warning("%s holds no valid samples: nvidia-smi columns will be empty", self.poll_csv)
        return summary
