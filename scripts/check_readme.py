"""Run every ```bash block of README.md and of the docs pages as written, in order, in a copy of the repository
and a fresh environment, and check each command's exit code (issue Q: a newcomer's commands must all work).

  python3 scripts/check_readme.py [--skip-suite] [--keep] [--timeout 3600] [--readme PAGE ...]

The pages are README.md, then the docs pages in the order of FIRST (the guides first: their set-up makes the
environment the later pages use); docs/evidence/ holds GPU commands and is never run here. A command whose text
(its comment aside) already ran earlier in the session is not run again. tests/test_doc_commands.py checks every
command of the same pages statically in the suite (each benchmark.py command parses, each file it names exists).

Each command line (continuation lines joined) runs in one bash session, so `. .venv/bin/activate` holds for
the lines after it, exactly as in a terminal. The session starts outside any virtual environment (this
interpreter's venv is taken off PATH), with a HOME of its own (Ray writes its token there) and the real pip cache.
A line is skipped, with the reason printed, only where the page's own comment on it says it cannot run here:

- `GPU only`: where `nvidia-smi -L` lists no GPU;
- `on every other node`: always (it is meant for another machine);
- `on a Slurm login node`: where `sinfo` does not answer;
- `needs <program>`: where <program> is not on PATH;
- `tox -e test` with --skip-suite (CI runs the suite itself right after).

`HEAD_IP` (the Ray head's address in the README) is this machine, 127.0.0.1. A Ray head the README started is
stopped at the end whatever happened. Two checks on one machine (two CI jobs) take turns (a lock in the temp
folder): the README's Ray head has a fixed port. Where `unshare` may make a PID namespace (root), the session runs
in one, so the README's `ray stop`, which kills every Ray process it can see, sees only the session's own, and
nothing the session started outlives it. Exit 0 when every command that ran exited 0, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The pages whose ```bash blocks run, in this order: README.md, the set-up (guides/running.md makes .venv), the other
# guides, then every other page of docs/ (docs/evidence/ excepted). A page left out here still runs, last.
FIRST = ("README.md", "docs/guides/running.md", "docs/guides/inputs.md", "docs/guides/plan.md", "docs/guides/tune.md",
         "docs/guides/results.md", "docs/compare.md", "docs/guides/history.md", "docs/guides/clusters.md",
         "docs/python-api.md", "docs/from-fms.md")


def doc_pages(repo: Path = REPO) -> list[Path]:
    """README.md and the docs pages whose commands are checked, in the order they run."""
    rest = sorted(p.relative_to(repo).as_posix() for p in (repo / "docs").rglob("*.md")
                  if "evidence" not in p.relative_to(repo / "docs").parts)
    return [repo / name for name in dict.fromkeys([*FIRST, *rest]) if (repo / name).is_file()]


@dataclass
class Command:
    line: int      # line of its page where the command starts
    text: str      # as written, continuation lines joined with their backslashes
    comment: str   # the trailing comment of its last line, lower case ("" when none)
    page: str = "README.md"  # the page it is on, relative to the repository where it is in it

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def bare(self) -> str:
        """The command without its comments and continuation backslashes, whitespace collapsed: what runs."""
        lines = [line.split("  # ", 1)[0].rstrip().removesuffix("\\") for line in self.text.splitlines()]
        return " ".join(" ".join(lines).split())


def page_name(page: Path) -> str:
    try:
        return page.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return page.name


def readme_commands(readme: Path, fence: str = "bash") -> list[Command]:
    """Every command of every ```bash block (or ```<fence> block) of one page, in page order."""
    commands: list[Command] = []
    in_block, pending, start = False, [], 0
    for number, line in enumerate(readme.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("```"):
            in_block = line.strip() == f"```{fence}"
            continue
        if not in_block or (not pending and (not line.strip() or line.lstrip().startswith("#"))):
            continue
        if not pending:
            start = number
        pending.append(line)
        if not line.rstrip().endswith("\\"):
            comment = line.split("  # ", 1)[1] if "  # " in line else ""
            commands.append(Command(start, "\n".join(pending), comment.strip().lower(), page_name(readme)))
            pending = []
    return commands


def has_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def slurm_answers() -> bool:
    try:
        found = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0 and bool(found.stdout.strip())


def skip_reason(command: Command, skip_suite: bool, ran: dict[str, str] | None = None) -> str | None:
    """Why this command does not run on this machine, from its page's own words, or because the same command ran
    earlier in the session (`ran`: command → where); None: it runs."""
    if "on every other node" in command.comment:
        return "meant for another machine"
    if "gpu only" in command.comment and not has_gpu():
        return "GPU only, and nvidia-smi lists no GPU here"
    if "on a slurm login node" in command.comment and not slurm_answers():
        return "for a Slurm login node, and sinfo does not answer here"
    needs = re.search(r"needs ([\w.-]+)", command.comment)
    if needs and shutil.which(needs.group(1)) is None:
        return f"needs {needs.group(1)}, which is not on PATH"
    if skip_suite and re.search(r"\btox -e test\b", command.text):
        return "the test suite: CI runs it itself (--skip-suite)"
    if ran is not None and command.bare in ran:
        return f"the same command ran above ({ran[command.bare]})"
    return None


def skips_of(commands: list[Command], skip_suite: bool) -> dict[int, str]:
    """index → why that command does not run; the first of identical commands runs, the others are skipped."""
    skips, ran = {}, {}
    for index, command in enumerate(commands):
        reason = skip_reason(command, skip_suite, ran)
        if reason:
            skips[index] = reason
        else:
            ran[command.bare] = command.where
    return skips


def copy_repository(target: Path) -> None:
    """The working tree as git sees it (tracked and untracked-but-not-ignored files): no venvs, no results."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # deleted-but-tracked files are listed too
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def fresh_environment(home: Path) -> dict[str, str]:
    """This environment without the running interpreter's venv: the pages' commands start from nothing."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    ours = os.path.join(sys.prefix, "bin") if sys.prefix != sys.base_prefix else None
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours)
    real_home = Path.home()
    env.update(HOME=str(home), PIP_CACHE_DIR=env.get("PIP_CACHE_DIR", str(real_home / ".cache" / "pip")),
               TUNEBENCH_CACHE=str(home / "tunebench-cache"), RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    return env


def session_script(commands: list[Command], skips: dict[int, str], logs: Path, codes: Path) -> str:
    """One bash session: each command as written, its output to its own log, its exit code to `codes`."""
    parts = ["set +e", f"exec 3>>{shlex.quote(str(codes))}"]
    for index, command in enumerate(commands):
        if index in skips:
            continue
        text = command.text.replace("HEAD_IP", "127.0.0.1")
        parts.append(f"echo '[{command.where}]' >&2")
        parts.append("started=$EPOCHREALTIME")
        parts.append(f"{{\n{text}\n}} >{shlex.quote(str(logs / f'{index}.log'))} 2>&1")
        parts.append(f"echo {index} $? $started $EPOCHREALTIME >&3")  # its exit code and its wall time
    return "\n".join(parts) + "\n"


def isolated(command: list[str]) -> list[str]:
    """`command` in a PID namespace of its own where this machine allows one, else as it is."""
    wrap = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    try:
        usable = subprocess.run([*wrap, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        usable = False
    if not usable:
        print("README check: no PID namespace here (unshare needs root): the cluster guide's `ray stop` stops every "
              "Ray process of this user on the machine", flush=True)
    return [*wrap, *command] if usable else command


def take_turn() -> None:
    """Wait for any other README check on this machine to finish; the lock is held until this process ends."""
    global _turn
    try:
        from filelock import FileLock, Timeout  # tox's own dependency: CI installs tox first (.ci/run)
    except ImportError:
        sys.exit("README check: needs filelock, which tox installs (python3 -m pip install tox)")

    _turn = FileLock(os.path.join(tempfile.gettempdir(), "tunebench-readme-check.lock"))
    try:
        _turn.acquire(blocking=False)
    except Timeout:
        print("README check: another one runs on this machine; waiting for it", flush=True)
        _turn.acquire()


_turn = None  # the README check's turn on this machine (take_turn), kept for the life of the process


def stop_ray(repo_copy: Path, env: dict[str, str]) -> None:
    """A Ray head the pages started must not outlive the check (with whichever ray the session installed)."""
    ray = repo_copy / ".venv" / "bin" / "ray"
    if ray.exists():
        subprocess.run([str(ray), "stop", "--force"], env=env, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-suite", action="store_true", help="skip `tox -e test` (CI runs it itself)")
    parser.add_argument("--keep", action="store_true", help="keep the working copy and logs")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for all the commands together")
    parser.add_argument("--readme", type=Path, nargs="+", default=None,
                        help="the markdown pages to check, in order (default: README.md and the docs pages)")
    args = parser.parse_args(argv)

    commands = [command for page in (args.readme or doc_pages()) for command in readme_commands(page)]
    skips = skips_of(commands, args.skip_suite)
    work = Path(tempfile.mkdtemp(prefix="readme-check-"))
    repo_copy, home, logs = work / "tunebench", work / "home", work / "logs"
    for folder in (repo_copy, home, logs):
        folder.mkdir()
    copy_repository(repo_copy)
    env = fresh_environment(home)
    codes = work / "codes.txt"
    codes.touch()
    script = work / "session.sh"
    script.write_text(session_script(commands, skips, logs, codes))
    take_turn()
    print(f"README check in {work}: {len(commands)} commands, {len(skips)} skipped here", flush=True)
    session = subprocess.Popen(isolated(["bash", str(script)]), cwd=repo_copy, env=env, start_new_session=True)
    try:
        session.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(session.pid, signal.SIGKILL)
        session.wait()
        print(f"README check: the commands did not finish within {args.timeout:g} s", file=sys.stderr)
    finally:
        stop_ray(repo_copy, env)

    exit_codes, seconds = {}, {}
    for line in codes.read_text().splitlines():
        if line.strip():
            index, code, started, ended = line.split()
            exit_codes[int(index)], seconds[int(index)] = int(code), float(ended) - float(started)
    failed = 0
    for index, command in enumerate(commands):
        first = command.text.splitlines()[0]
        if index in skips:
            print(f"  skip  {command.where}: {first}\n        ({skips[index]})")
            continue
        code = exit_codes.get(index)
        mark = "ok" if code == 0 else f"FAIL ({'did not run to the end' if code is None else f'exit {code}'})"
        took = f"{seconds[index]:6.1f} s" if index in seconds else " " * 8
        print(f"  {mark:5} {took} {command.where}: {first}")
        if code != 0:
            failed += 1
            log = logs / f"{index}.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else ["(no output)"]
            print("\n".join(f"        | {line}" for line in tail))
    print(f"README check: {len(commands) - len(skips) - failed} ok, {failed} failed, {len(skips)} skipped; "
          f"the commands took {sum(seconds.values()):.0f} s")
    if not args.keep and not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
