"""`bisect`'s candidates: those between a good and a bad ref (git commits or package versions), the code of one
candidate made importable, and one harness run of the experiment with it (the search over them: search.py).

A git candidate is exported with `git archive` into a folder of the bisect's own (the user's repository is only
read) and put first on the experiment's PYTHONPATH: the code under test (a library checkout, a package's source
folder with --subdir) is what the experiment imports. `--harness` runs the candidate's own benchmark.py instead,
to bisect tunebench itself. A package candidate is `pip install --no-deps --target` into a folder of its own, put
first on the path the same way. Each run is a `benchmark.py` subprocess in a session of its own that dies with
this process (PR_SET_PDEATHSIG; its own watchdog takes its experiments along), and on SIGINT/SIGTERM its group
is stopped before bisect exits.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tunebench.errors import InputError, InputProblem
from tunebench.execution.processes import kill_process_group
from tunebench.lifetime.parent_death import preexec_dying_with_parent
from tunebench.lifetime.stop_signals import HarnessStopped, stop_on_signals

logger = logging.getLogger(__name__)

GIT_TIMEOUT_S = 120
BENCHMARK = Path(__file__).resolve().parents[3] / "benchmark.py"


def git(repo: Path, *args: str, binary: bool = False):
    """A git command's output; InputError naming the repository when it fails."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S,
                              check=False, text=not binary)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError([InputProblem("command line", "--repo", f"git could not run in {repo} ({exc})",
                                       "give the path of a git repository")]) from None
    if proc.returncode != 0:
        message = (proc.stderr.decode(errors="replace") if binary else proc.stderr).strip().splitlines()
        raise InputError([InputProblem("command line", "--repo", f"git {args[0]} failed in {repo}: "
                                       f"{message[-1] if message else proc.returncode}",
                                       "give a git repository and refs that exist in it")])
    return proc.stdout


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """[good, ..., bad]: the good commit and every commit on the path from it to bad, oldest first."""
    shas = []
    for option, ref in (("--good", good), ("--bad", bad)):
        try:
            shas.append(git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip())
        except InputError:
            raise InputError([InputProblem("command line", option, f"{ref!r} is not a commit of {repo}",
                                           "give a branch, tag or commit id of that repository")]) from None
    good_sha, bad_sha = shas
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except InputError:
        raise InputError([InputProblem("command line", "--good", f"{good} is not an ancestor of {bad}",
                                       "the good ref must come before the bad one in history")]) from None
    between = git(repo, "rev-list", "--ancestry-path", "--reverse", f"{good_sha}..{bad_sha}").split()
    return [good_sha, *between]


def export_commit(repo: Path, sha: str, folder: Path) -> Path:
    """The commit's files in `folder` (made here), from `git archive`: the repository is only read."""
    data = git(repo, "archive", "--format=tar", sha, binary=True)
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(folder, filter="data")  # no links out, no absolute paths, no devices
    return folder


def install_version(package: str, version: str, folder: Path, pip_args: list[str]) -> Path:
    """`package==version` alone (no dependencies) in `folder` (made here)."""
    folder.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder),
               f"{package}=={version}", *pip_args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise InputError([InputProblem("command line", "--package", f"pip could not install {package}=={version}: "
                                       f"{tail[-1] if tail else proc.returncode}",
                                       "check the version exists (or give --pip_args with --find-links)")])
    return folder


def run_harness(arguments: list[str], results: Path, path_entry: Path | None, benchmark: Path,
                log: Path) -> int:
    """One `benchmark.py` run into `results`, with `path_entry` first on PYTHONPATH; its exit code."""
    env = dict(os.environ)
    if path_entry is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path_entry), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, str(benchmark), *arguments, "--results_output_path", str(results)]
    with open(log, "w", encoding="utf-8") as output, stop_on_signals():
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                preexec_fn=preexec_dying_with_parent(new_session=True))
        try:
            return proc.wait()
        except (KeyboardInterrupt, HarnessStopped):
            kill_process_group(proc, grace_seconds=10.0)
            raise

