"""tunebench/cli/bisect.py's own paths: a --store or --workdir that cannot be used is one line naming that option
(the store is named only for the store), before any candidate is checked out (issue AD: history separates the
store from the folder in every message; a name too long was a traceback from Path.exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunebench.cli import bisect

pytest.importorskip("duckdb")

CASES = {
    "store too long": (lambda t: ["--store", str(t / ("s" * 300))], "--store", "{}: File name too long"),
    "store a folder": (lambda t: ["--store", str(t)], "--store", "{} is not a file"),
    "workdir too long": (lambda t: ["--workdir", str(t / ("w" * 300))], "--workdir", "{}: File name too long"),
    "workdir under a file": (lambda t: ["--workdir", str(t / "afile" / "w")], "--workdir",
                             "{parent} is not a folder that exists"),
    "workdir in no folder": (lambda t: ["--workdir", str(t / "none" / "w")], "--workdir",
                             "{parent} is not a folder that exists"),
    "workdir exists": (lambda t: ["--workdir", str(t)], "--workdir", "{} exists"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_path_bisect_cannot_use_is_its_options_problem(tmp_path, capsys, case):
    (tmp_path / "afile").write_text("not a folder")
    words, option, message = CASES[case]
    given = words(tmp_path)
    store = [] if option == "--store" else ["--store", str(tmp_path / "h.duckdb")]
    code = bisect.main(["--repo", str(tmp_path), "--good", "a", "--bad", "b", *store, *given, "--",
                        "--num_gpus_matrix", "1"])
    err = capsys.readouterr().err
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    said = message.format(given[1], parent=Path(given[1]).parent)
    assert code == 2 and len(problems) == 1 and problems[0].startswith(f"  - command line: {option}: {said}"), err
    assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no store made
