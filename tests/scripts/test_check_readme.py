"""scripts/check_readme.py, the runner of the README's command blocks (issue Q): what it reads as a command,
what it skips and why, and that one failing command fails the check while the session carries on."""

import re
import sys
import tempfile

import pytest

from tests.fixtures.harness import REPO

sys.path.insert(0, str(REPO / "scripts"))
import check_readme  # noqa: E402

SAMPLE = '''# Title

```bash
python3 -m venv x && echo made   # first
# a comment line, not a command
long --option a \\
    --option b  # two lines, one command
```

```python
print("not bash")
```

```bash
run --everywhere                 # GPU only: 8 GPUs
ray start --address HEAD_IP:1    # on every other node
ray stop
```
'''


def test_commands_are_read_as_a_terminal_would(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(SAMPLE)
    commands = check_readme.readme_commands(readme)
    assert [c.line for c in commands] == [4, 6, 15, 16, 17]
    assert commands[1].text == "long --option a \\\n    --option b  # two lines, one command"
    assert commands[0].comment == "first" and commands[4].comment == ""


def test_skips_only_where_the_readme_says_so(monkeypatch):
    monkeypatch.setattr(check_readme, "has_gpu", lambda: False)
    monkeypatch.setattr(check_readme, "slurm_answers", lambda: False)
    Command = check_readme.Command
    reason = check_readme.skip_reason
    assert reason(Command(1, "x", "gpu only: 2 nodes"), False) == "GPU only, and nvidia-smi lists no GPU here"
    assert reason(Command(1, "x", "on every other node (gpus)"), False) == "meant for another machine"
    assert "Slurm" in reason(Command(1, "x", "on a slurm login node"), False)
    assert reason(Command(1, "x", "needs no-such-program-here (apt)"), False).startswith("needs no-such-program")
    assert reason(Command(1, "x", "needs bash"), False) is None
    assert reason(Command(1, "tox -e test", ""), True) and reason(Command(1, "tox -e test", ""), False) is None
    monkeypatch.setattr(check_readme, "has_gpu", lambda: True)
    assert reason(Command(1, "x", "gpu only: 2 nodes"), False) is None


def test_the_real_pages_run_everything_but_marked_and_repeated_lines(monkeypatch):
    monkeypatch.setattr(check_readme, "has_gpu", lambda: False)
    monkeypatch.setattr(check_readme, "slurm_answers", lambda: False)
    pages = check_readme.doc_pages()
    assert [p.name for p in pages[:2]] == ["README.md", "running.md"]  # the set-up before what needs it
    assert not any("evidence" in p.parts for p in pages)
    commands = [c for page in pages for c in check_readme.readme_commands(page)]
    skips = check_readme.skips_of(commands, skip_suite=True)
    assert len(commands) >= 30
    # The suite, the other node's join, the 16-GPU line, Slurm's two, (without chromium) the screenshot, and the
    # commands a later page repeats.
    marked = [commands[i].text for i, why in skips.items() if not why.startswith("the same command ran above")]
    assert len(marked) <= 6, marked


def test_a_repeated_command_runs_once():
    Command = check_readme.Command
    commands = [Command(1, "python benchmark.py --results_output_path out   # here", "here", "a.md"),
                Command(5, "python benchmark.py  --results_output_path out", "", "b.md"),
                Command(6, "python benchmark.py --results_output_path other", "", "b.md")]
    assert check_readme.skips_of(commands, skip_suite=False) == {1: "the same command ran above (a.md:1)"}


@pytest.mark.slow
def test_one_failure_fails_the_check_and_the_session_goes_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(check_readme, "has_gpu", lambda: False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a failed check keeps its copy: keep it in here
    readme = tmp_path / "README.md"
    readme.write_text("```bash\nexport GREETING=hello\nfalse   # fails\ntest \"$GREETING\" = hello\n"
                      "never-run-here   # GPU only\ntest -f README.md && test -f benchmark.py\n```\n")
    assert check_readme.main(["--readme", str(readme), "--timeout", "120"]) == 1
    out = capsys.readouterr().out
    took = r" +\d+\.\d s "  # each command's wall time
    assert re.search("ok    " + took + "README.md:2: export GREETING=hello", out), out
    assert re.search(r"FAIL \(exit 1\)" + took + "README.md:3: false", out), out
    # the session kept its variable and went on
    assert re.search("ok    " + took + "README.md:4:", out) and re.search("ok    " + took + "README.md:6:", out)
    assert re.search(r"the commands took \d+ s$", out.strip()), out
    assert "skip  README.md:5: never-run-here" in out
    assert "3 ok, 1 failed, 1 skipped" in out


def test_what_the_recipes_write_in_the_clone_is_ignored_by_git():
    """Issue W2: the recipes' outputs (the history store, its lock, its report and Parquet, the Python example's
    folder) showed up as untracked files. Every relative output path the README and the docs pages name is
    ignored."""
    import re
    import shutil
    import subprocess

    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git checkout here")
    texts = "\n".join(p.read_text() for p in check_readme.doc_pages())
    named = set(re.findall(r"(?:--results_output_path|--parquet|--workdir) ([A-Za-z][\w.-]*)", texts))
    outputs = {f"{name}/file" for name in named} | {
        "history.duckdb", "history.duckdb.lock", "history.duckdb.wal", "history.html", "out-example/run/x.csv",
        "results-tune/tune.csv", "bisect-20260101-000000/log.txt"}
    done = subprocess.run(["git", "check-ignore", "--no-index", *sorted(outputs)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert set(done.stdout.split()) == outputs, sorted(outputs - set(done.stdout.split()))
