"""The results folder: whether tunebench may write into a folder, what it may remove there, its experiment folders.

The promise to the user (docs/guides/running.md, "What tunebench does with your files"): tunebench writes only
inside the results folder, deletes only what it made, and never adopts a folder that holds someone else's files.

* A folder is tunebench's when it holds the ownership marker (written only into folders tunebench creates or
  finds empty) or when every entry in it is something tunebench writes (results from before the marker).
* An experiment folder is recognised by its own files: a `spec.json` (`config.json` before it) or
  `results.json` object whose `experiment_id` ends the folder's name. Nothing else is ever removed, and removing one
  takes only the files the harness writes there (a user's note left in it survives, and so does the folder holding it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from tunebench.errors import InputError, InputProblem
from tunebench.lifetime.run_lock import held_while_running, lock_holder, started_by_holder
from tunebench.readback import Unreadable, load_experiment_file

logger = logging.getLogger(__name__)

MARKER = ".tunebench-results"
LOCK_FILE = ".tunebench.lock"
RAW_SUMMARY = "raw_summary.csv"
BENCHMARKS = "benchmarks.csv"
PLAN = "plan.csv"
FIT_MAP = "fit_map.csv"  # benchmark.py plan --fit_map
PROJECTION = "projection.csv"  # benchmark.py plan --project_from
# Top-level files and folders the harness and its subcommands write (the experiment folders aside).
SUMMARY_FILES = (RAW_SUMMARY, BENCHMARKS, PLAN, FIT_MAP, PROJECTION, "report.html", "pip-freeze.txt", "tune.csv",
                 "tune-scenarios.yaml")
SUMMARY_FOLDERS = ("compare",)
OWN_TOP_LEVEL = {MARKER, LOCK_FILE, *SUMMARY_FILES, *SUMMARY_FOLDERS}
# What the harness and the training entry write inside an experiment folder (globs), and the trees it owns.
EXPERIMENT_FILES = ("command.sh", "config.json", "spec.json", "stdout.log", "stderr.log", "results.json",
                    "steps.json", "scan*.json", "kernels*.csv.gz", "error_rank*.json", "nvidia_smi.csv",
                    "nvidia_smi.csv.partial", "environment.json", ".*.tmp")
# nodes/: the other nodes' part of an experiment spanning machines; slurm/: submitit's job files (executors/);
# torchelastic/: the multi-process launchers' logs (execution/launchers/ranks.py).
EXPERIMENT_TREES = ("trainer_output", "nodes", "slurm", "torchelastic")
_REPO = Path(__file__).resolve().parents[2]
REPEAT_SUFFIX = re.compile(r"-r\d+$")  # the k-th repeat's folder: <scenario>_<id>-r<k>
_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9._+-]+_[0-9a-f]{12}(-r\d+)?")  # ExperimentSpec.folder_name's form
IDENTITY_FILES = ("spec.json", "config.json", "results.json")  # config.json: folders of earlier versions


def _is_temp_leftover(name: str) -> bool:
    """A temp file of an atomic write that was interrupted (tunebench.fileio.write_atomic's naming)."""
    return name.startswith(".") and name.endswith(".tmp") and any(name[1:].startswith(f"{own}.") for own in
                                                                    OWN_TOP_LEVEL)


def _identity(folder: Path) -> dict | None:
    """The experiment a folder holds, read from its own files; None when it is not an experiment folder."""
    if folder.is_symlink() or not folder.is_dir():
        return None
    for name in IDENTITY_FILES:
        try:
            data = load_experiment_file(folder / name)
        except (OSError, Unreadable):
            continue
        if REPEAT_SUFFIX.sub("", folder.name).endswith("_" + data["experiment_id"]):
            return data
    return None


def _damage(folder: Path) -> str | None:
    """Why a folder named as an experiment's, holding its files, is not recognised as one; None when it is fine or
    is not an experiment's folder at all."""
    if folder.is_symlink() or not folder.is_dir() or not _EXPERIMENT_NAME.fullmatch(folder.name) \
            or _identity(folder) is not None:
        return None
    for name in IDENTITY_FILES:
        try:
            data = load_experiment_file(folder / name)
        except FileNotFoundError:
            continue
        except (OSError, Unreadable) as exc:
            return str(exc)
        return f"{folder / name}: experiment_id: {data['experiment_id']!r} is not the one the folder name ends with"
    return None


def damaged_experiment_folders(root: Path) -> dict[Path, str]:
    """{folder: reason} for every folder of `root` named as an experiment's whose spec.json / results.json cannot
    say which experiment it holds (never adopted: nothing in them is removed or overwritten)."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return {}
    return {entry: reason for entry in entries if (reason := _damage(entry))}


def is_experiment_folder(folder: Path) -> bool:
    return _identity(folder) is not None


def experiment_folders(root: Path) -> list[Path]:
    """Experiment folders directly inside `root` (symbolic links are never followed), sorted by name."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    return [entry for entry in entries if is_experiment_folder(entry)]


def is_owned(root: Path) -> bool:
    return (root / MARKER).is_file() and not (root / MARKER).is_symlink()


def foreign_entries(root: Path) -> list[str]:
    """Entries of `root` that tunebench did not write (empty when the folder is tunebench's or empty)."""
    foreign = []
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name in OWN_TOP_LEVEL and not entry.is_symlink() or _is_temp_leftover(name):
            continue
        if is_experiment_folder(entry):
            continue
        foreign.append(name)
    return foreign


def _protected(resolved: Path) -> str | None:
    """Why a folder can never be a results folder: the filesystem root, or home / the repository / an
    ancestor of either (whatever is in them would be at risk)."""
    if resolved == Path(resolved.anchor):
        return "the filesystem root"
    home = Path(os.path.expanduser("~")).resolve()
    for what, place in (("your home directory", home), ("the tunebench repository", _REPO)):
        if resolved == place:
            return what
        if resolved in place.parents:
            return f"an ancestor of {what} ({place})"
    return None


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def check(path_text: str, option: str = "--results_output_path") -> list[InputProblem]:
    """Every reason the folder cannot be used, without writing anything: nothing is created when it fails."""
    fix = "choose a new or empty folder, e.g. --results_output_path results"
    if not str(path_text).strip():
        return [InputProblem("command line", option, "empty path (it would mean the current directory)", fix)]
    path = Path(path_text)
    if path.exists() and not path.is_dir():
        return [InputProblem("command line", option, f"{path} exists and is not a directory",
                             "give a folder (new or one tunebench wrote), not a file")]
    resolved = path.resolve()
    protected = _protected(resolved)
    if protected:
        return [InputProblem("command line", option, f"{path} is {protected}", fix)]
    if path.is_dir():
        try:
            foreign = [] if is_owned(path) else foreign_entries(path)
        except OSError as exc:
            return [InputProblem("command line", option, f"cannot list {path}: {exc.strerror}", fix)]
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            return [InputProblem("command line", option, f"{path} holds files tunebench did not write ({shown}); "
                                 "it would never delete them, but it does not mix its results with them", fix)]
    return _writable(path, option)


def _writable(path: Path, option: str) -> list[InputProblem]:
    """Read-only or full filesystems, and folders this user may not write, found before anything is written."""
    where = _nearest_existing(path)
    try:
        stats = os.statvfs(where)
    except OSError:
        return []
    fix = "choose a folder on a writable filesystem with free space"
    if stats.f_flag & os.ST_RDONLY:
        return [InputProblem("command line", option, f"{path}: {where} is on a read-only filesystem", fix)]
    if stats.f_bavail == 0 or (stats.f_favail == 0 and stats.f_files):
        return [InputProblem("command line", option, f"{path}: no space left on the filesystem of {where}", fix)]
    if not os.access(where, os.W_OK | os.X_OK):
        return [InputProblem("command line", option, f"{path}: {where} is not writable by this user", fix)]
    return []


def claim(root: Path) -> None:
    """Create the results folder if needed; mark it as tunebench's when it was created or found empty."""
    existed = root.is_dir()
    empty = existed and not any(root.iterdir())
    root.mkdir(parents=True, exist_ok=True)
    if not existed or empty:
        from tunebench.fileio import write_atomic

        write_atomic(root / MARKER, json.dumps({"created_by": "tunebench", "since": time.strftime(
            "%Y-%m-%d %H:%M:%S"), "note": "tunebench writes and removes only its own files in this folder"}))


def _in_use(folder: Path, note: str) -> InputError:
    """The refusal of a folder another harness holds, naming it from its lock's note."""
    problem = InputProblem(str(folder), LOCK_FILE, f"results folder in use by {lock_holder(note)}",
                           "wait for that harness to finish, or choose another --results_output_path")
    if started_by_holder(note):
        problem = InputProblem(str(folder), LOCK_FILE, "this process was started by the harness that holds "
                               "the folder: the script that runs tunebench ran again inside it",
                               'put the script\'s calls under `if __name__ == "__main__":`')
    return InputError([problem])


@contextlib.contextmanager
def results_lock(folder: Path):
    """Claim `folder` and hold its lock (tunebench.lifetime.run_lock) for the whole run; a second harness gets a
    clear InputError naming the one that holds it."""
    claim(folder)
    with held_while_running(folder / LOCK_FILE, refused=lambda note: _in_use(folder, note)):
        yield


def _remove_experiment_files(folder: Path) -> bool:
    """The harness's own files in one experiment folder; the folder too when nothing else is left in it."""
    for pattern in EXPERIMENT_FILES:
        for path in folder.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    for tree in EXPERIMENT_TREES:
        target = folder / tree
        if target.is_symlink():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
    try:
        folder.rmdir()
        return True
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        logger.warning("kept %s: it holds files tunebench did not write", folder)
        return False


def remove_previous_results(root: Path) -> int:
    """`--overwrite`: remove the experiment folders and summaries of earlier runs, never anything else (the
    results folder itself stays). Returns how many experiment folders were removed."""
    removed = 0
    for folder in experiment_folders(root):
        removed += _remove_experiment_files(folder)
    for name in SUMMARY_FILES:
        target = root / name
        if target.is_file() and not target.is_symlink():
            target.unlink()
    compare = root / "compare"
    if compare.is_dir() and not compare.is_symlink():
        for path in compare.iterdir():  # compare's own outputs only (outliers.csv, summary.md, charts)
            if path.is_file() and path.suffix in (".csv", ".md", ".png") and not path.is_symlink():
                path.unlink()
        try:
            compare.rmdir()
        except OSError:
            logger.warning("kept %s: it holds files tunebench did not write", compare)
    return removed


def folders_by_id(root: Path) -> dict[tuple[str, int], Path]:
    """(experiment_id, repeat) → its experiment folder, for every experiment folder directly inside `root`."""
    found = {}
    for folder in experiment_folders(root):
        stem = REPEAT_SUFFIX.sub("", folder.name)
        repeat = REPEAT_SUFFIX.search(folder.name)
        found[(stem.rpartition("_")[2], int(repeat.group(0)[2:]) if repeat else 1)] = folder
    return found
