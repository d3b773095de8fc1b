"""The house rules a newcomer relies on, checked from the source: purpose docstrings, module sizes, no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository
PACKAGES = ("tunebench", "scanner")
# Code outside the packages: what users and CI run (scripts/), and the code beside the evidence it produced
# (docs/evidence/<page>/ and docs/evidence/common/: runners, probes, doc generators). Each file runs as a script
# and imports its neighbours by file name.
SCRIPT_FOLDERS = ("scripts", "docs/evidence")
MAX_LINES = 400
# Modules allowed past MAX_LINES, each with the reason it stays whole. Empty today: keep it that way.
OVERSIZED: dict[str, str] = {}


def _modules(folder: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `folder` of the checkout."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _runtime_nodes(tree: ast.AST, type_checking: bool = False):
    """Every node that can execute; `if TYPE_CHECKING:` blocks (annotations only, never run) only when asked."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(child for child in ast.iter_child_nodes(node) if type_checking or not _is_type_checking(child))


def _imports(path: Path, name: str, known: dict[str, Path], type_checking: bool = False) -> set[str]:
    """Known modules that `name` imports anywhere in its file (function-level imports too: a lazy import
    hides a cycle, it does not remove it)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _runtime_nodes(tree, type_checking):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    resolved = set()
    for target in targets:
        while target and target not in known:  # `from a.b import c` where c is a function: the module is a.b
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _graph(modules: dict[str, Path], type_checking: bool = True) -> dict[str, set[str]]:
    """Who imports whom; `if TYPE_CHECKING:` imports count (a cycle through annotations is still a cycle in the
    design: the shared types belong below both)."""
    return {name: _imports(path, name, modules, type_checking) for name, path in modules.items()}


def test_cycle_finder_finds_a_planted_cycle():
    """The cycle check can fail: two modules that import each other (through a lazy import) are reported."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_resolves_relative_and_lazy_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""p."""\n')
    (pkg / "a.py").write_text('"""a."""\nfrom .b import thing\n')
    (pkg / "b.py").write_text('"""b."""\ndef f():\n    from pkg.a import g\n')
    (pkg / "c.py").write_text(
        '"""c."""\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import g\n'
    )
    known = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py", "pkg.c": pkg / "c.py"}
    assert _imports(pkg / "a.py", "pkg.a", known) == {"pkg.b"}
    assert _imports(pkg / "c.py", "pkg.c", known) == set()  # annotation-only imports never run
    assert _imports(pkg / "b.py", "pkg.b", known) == {"pkg.a"}
    assert _cycles({n: _imports(p, n, known) for n, p in known.items()}) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("folder", [*PACKAGES, *SCRIPT_FOLDERS])
def test_no_import_cycles(folder):
    modules = _modules(folder)
    if folder in SCRIPT_FOLDERS:  # scripts import each other by file name (their folder is on sys.path)
        modules = {path.stem: path for path in modules.values()}
    cycles = _cycles(_graph(modules))
    assert cycles == [], f"import cycles in {folder}/: {cycles}"


# tunebench's layers, top to bottom (docs/explanations/data-flow.md): a module imports only from its own layer or
# the ones below it, `if TYPE_CHECKING:` imports included (an annotation that points up is a design that points
# up). Root modules (errors, fileio), the lifetime/ package and hardware/ (the one GPU table every layer resolves
# names in) are the base.
# Planning sits below verify and results: a prediction stands on the experiment's typed settings alone (as scanner/
# does on the Trainer), and the verify oracle and the report's prediction section read its rules (peak_rules,
# prediction_errors), never the other way. Projection (measured rows onto another GPU) plans nothing: it stands on
# planning (a spec re-planned for the target) and is called from above (api, tuning), never from below.
LAYERS = ("cli", "history", "tuning", "api", "matrix", "execution", "verify", "results", "projection", "planning",
          "experiment", "telemetry", "base")


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "base"


def _upward(modules: dict[str, Path], type_checking: bool = True) -> list[tuple[str, str]]:
    """(module, imported module) pairs where the import goes to a higher layer."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    found = []
    for name, path in modules.items():
        for target in _imports(path, name, modules, type_checking=type_checking):
            if rank[_layer(target)] < rank[_layer(name)]:
                found.append((name, target))
    return sorted(found)


def test_layer_check_finds_a_planted_upward_import(tmp_path):
    pkg = tmp_path / "tunebench" / "results"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text('"""x."""\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tunebench.cli '
                              'import main\n')
    (tmp_path / "tunebench" / "cli.py").write_text('"""cli."""\n')
    known = {"tunebench.results.x": pkg / "x.py", "tunebench.cli": tmp_path / "tunebench" / "cli.py"}
    assert _upward(known) == [("tunebench.results.x", "tunebench.cli")]
    assert _upward(known, type_checking=False) == []


def test_layers_import_only_downward():
    assert _upward(_modules("tunebench")) == []


def test_scanner_stands_alone():
    """scanner/ is a standalone TrainerCallback: it must not import the harness."""
    offenders = {
        name: sorted(
            t
            for t in _imports(path, name, {**_modules("scanner"), **_modules("tunebench")})
            if t.startswith("tunebench")
        )
        for name, path in _modules("scanner").items()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("folder", [*PACKAGES, *SCRIPT_FOLDERS])
def test_every_module_says_its_purpose(folder):
    missing = [
        str(path.relative_to(ROOT))
        for path in _modules(folder).values()
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert missing == [], f"modules without a one-line purpose docstring: {missing}"


@pytest.mark.parametrize("folder", [*PACKAGES, *SCRIPT_FOLDERS])
def test_modules_stay_small(folder):
    too_long = {
        str(path.relative_to(ROOT)): n
        for path in _modules(folder).values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
        and str(path.relative_to(ROOT)) not in OVERSIZED
    }
    assert too_long == {}, f"modules over {MAX_LINES} lines (split them, or say why in OVERSIZED): {too_long}"


MAX_FUNCTION_LINES = 60


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`name (lines)` of every function or method in the file longer than `limit` lines, decorators aside."""
    tree = ast.parse(path.read_text())
    return [f"{node.name} ({node.end_lineno - node.lineno + 1})" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_the_function_length_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f'"""m."""\n\ndef long():\n{body}\n\n\ndef short():\n    return 1\n')
    assert _long_functions(tmp_path / "m.py") == [f"long ({MAX_FUNCTION_LINES + 1})"]


@pytest.mark.parametrize("folder", PACKAGES)
def test_functions_stay_short(folder):
    """A function longer than a screen does several things: each gets its name."""
    found = {str(path.relative_to(ROOT)): long for path in _modules(folder).values() if (long := _long_functions(path))}
    assert found == {}, f"functions over {MAX_FUNCTION_LINES} lines: {found}"


# Settings with one reader: every other module asks it (a new reader of the same key is a second meaning waiting to
# drift). key -> the module that reads it.
ONE_READER = {**dict.fromkeys(("load_in_4bit", "load_in_8bit", "llm_int8_threshold", "bnb_4bit_quant_type",
                               "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"),
                              "tunebench.experiment.quantization")}
_READS = ("get", "value", "group_value", "getattr", "pop", "setting")


def _setting_reads(path: Path) -> set[str]:
    """The ONE_READER keys a file reads: `x.get(key)`, `x.value(group, key)`, `getattr(x, key)`, `x[key]`,
    `setting(key)`; `model.key` attributes of the typed arguments count too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in _READS:
                found |= {a.value for a in node.args if isinstance(a, ast.Constant) and a.value in ONE_READER}
        elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
              and node.slice.value in ONE_READER):
            found.add(node.slice.value)
        elif isinstance(node, ast.Attribute) and node.attr in ONE_READER and isinstance(node.ctx, ast.Load):
            found.add(node.attr)
    return found


def test_the_one_reader_check_finds_a_second_reader(tmp_path):
    (tmp_path / "m.py").write_text('"""m."""\ndef f(spec, model):\n    return spec.value("model", "load_in_4bit") or '
                                   'model.load_in_8bit or model["bnb_4bit_quant_type"]\n')
    assert _setting_reads(tmp_path / "m.py") == {"load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type"}


def test_a_setting_is_read_by_its_one_reader():
    modules = _modules("tunebench")
    found = {name: sorted(keys) for name, path in modules.items()
             if (keys := {k for k in _setting_reads(path) if ONE_READER[k] != name})}
    assert found == {}, f"read these through their one reader ({ONE_READER}): {found}"


# Below the command line no argparse Namespace: the command lines (tunebench/cli/) read their options into typed
# settings and hand those down. Modules outside tunebench/cli/ that may still import argparse, each with its reason:
ARGPARSE_OUTSIDE_CLI = {
    "tunebench.experiment.entry_parser": "HfArgumentParser's errors are argparse's: the training entry's arguments "
                                         "are typed once there (into dataclasses, never a Namespace)",
    "tunebench.telemetry.nvml_sidecar": "the command line of its own process (python -m ...nvml_sidecar)",
}


def _namespace_uses(path: Path) -> list[str]:
    """What ties a module to argparse: importing it, a parameter annotated Namespace, a parameter named ns or
    namespace, or `options` without a type (an untyped options bag)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names) or (
                isinstance(node, ast.ImportFrom) and node.module == "argparse"):
            found.append(f"imports argparse (line {node.lineno})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for argument in arguments:
                annotation = ast.unparse(argument.annotation) if argument.annotation else ""
                untyped = argument.arg == "options" and not annotation
                if "Namespace" in annotation or argument.arg in ("ns", "namespace") or untyped:
                    found.append(f"{node.name}({argument.arg}{': ' + annotation if annotation else ''})")
    return found


def test_the_namespace_check_finds_a_planted_namespace(tmp_path):
    (tmp_path / "m.py").write_text('"""m."""\nimport argparse\n\ndef f(options: argparse.Namespace):\n    pass\n\n'
                                   'def g(ns):\n    pass\n\ndef h(options: dict):\n    pass\n\ndef k(options):\n'
                                   '    pass\n')
    assert _namespace_uses(tmp_path / "m.py") == ["imports argparse (line 2)", "f(options: argparse.Namespace)",
                                                  "g(ns)", "k(options)"]


def test_below_the_command_line_no_argparse_namespace():
    found = {name: uses for name, path in _modules("tunebench").items()
             if not (name == "tunebench.cli" or name.startswith("tunebench.cli.")) and name not in ARGPARSE_OUTSIDE_CLI
             and (uses := _namespace_uses(path))}
    assert found == {}, f"below tunebench/cli/ the options are typed settings, not argparse's Namespace: {found}"


def test_each_subcommand_is_a_module_of_the_cli_named_after_it():
    """`benchmark.py X` runs tunebench/cli/X.py (plan and the bare run: plan.py, run.py), and every module of the
    command line with a main() is one of them."""
    import importlib

    from tunebench.cli import SUBCOMMANDS

    cli = ROOT / "tunebench" / "cli"
    assert all((cli / f"{name}.py").is_file() for name in (*SUBCOMMANDS, "plan", "run"))
    assert all(
        callable(getattr(importlib.import_module(f"tunebench.cli.{name}"), "main", None)) for name in SUBCOMMANDS
    )
    with_main = {path.stem for path in cli.glob("*.py") if any(isinstance(node, ast.FunctionDef) and node.name == "main"
                                                               for node in ast.parse(path.read_text()).body)}
    assert with_main - {"__init__"} == set(SUBCOMMANDS)


# ---------------------------------------------------------------- the tests' house
# tests/ is laid out like the code: the tests of tunebench/x/y.py are in tests/tunebench/x/, a file named after the
# module it tests (test_y.py, or test_y_<aspect>.py); scripts/ and docs/evidence/ likewise (tests/scripts/,
# tests/docs/evidence/<page>/). Shared helpers live in tests/fixtures/ (pytest's hooks and fixtures in
# tests/conftest.py); the folders below are what other processes run or read, not tests. The root holds the tests
# of the repository as a whole.
CODE_FOLDERS = ("tunebench", "scanner", *SCRIPT_FOLDERS)
SUPPORT_FOLDERS = {"fixtures": "shared helpers", "data": "files tests read", "fakes": "fake nvidia-smi and pynvml",
                   "fault": "a sitecustomize that plants faults", "dist": "workers run under torchrun"}
ROOT_TESTS = {"test_layout.py": "the house rules of the whole repository",
              "test_doc_commands.py": "the commands of README.md and the docs pages, read statically",
              "test_suite_cleanup.py": "the suite's own watchdog (tests/conftest.py)",
              "test_worker_groups.py": "the suite's worker groups (tests/fixtures/parallel.py)",
              "test_packaging.py": "the wheel the repository builds",
              "test_benchmark_py.py": "benchmark.py, the entry point, as a process"}


def _stems(folder: Path) -> set[str]:
    """Names a test in the mirror of `folder` may be named after: its modules, files and subpackages."""
    return {p.stem if p.is_file() else p.name for p in folder.iterdir()
            if not p.name.startswith((".", "_")) and p.name != "__pycache__"}


def _test_layout_problems(tests: Path, repo: Path) -> list[str]:
    """Test files placed or named outside the house rules above, and Python files in tests/ that are neither
    tests, fixtures, package markers nor support files."""
    problems = []
    for path in sorted(tests.rglob("*.py")):
        relative = path.relative_to(tests)
        if relative.parts[0] in SUPPORT_FOLDERS or path.name in ("__init__.py", "conftest.py"):
            if relative.parts[0] != "fixtures" and path.name == "conftest.py" and len(relative.parts) > 1:
                problems.append(f"{relative}: one conftest.py, at the root of tests/")
            continue
        if not path.name.startswith("test_"):
            problems.append(f"{relative}: a helper outside tests/fixtures/")
        elif len(relative.parts) == 1:
            if path.name not in ROOT_TESTS:
                problems.append(f"{relative}: at the root, but not a test of the whole repository")
        elif not any(relative.parent.as_posix() == f or relative.parent.as_posix().startswith(f"{f}/")
                     for f in CODE_FOLDERS) or not (repo / relative.parent).is_dir():
            problems.append(f"{relative}: {relative.parent}/ mirrors no folder of the code")
        else:
            name = path.stem.removeprefix("test_")
            if not any(name == s or name.startswith(f"{s}_") or s.startswith(f"{name}_")
                       for s in _stems(repo / relative.parent)):
                problems.append(f"{relative}: named after nothing in {relative.parent}/")
    return problems


def test_the_tests_layout_check_finds_planted_misplacements(tmp_path):
    (tmp_path / "tunebench" / "results").mkdir(parents=True)
    (tmp_path / "tunebench" / "results" / "folder.py").write_text('"""f."""\n')
    (tmp_path / "docs" / "evidence" / "page").mkdir(parents=True)
    (tmp_path / "docs" / "evidence" / "page" / "page_doc.py").write_text('"""d."""\n')
    tests = tmp_path / "tests"
    for name in ("tunebench/results/test_folder_links.py", "tunebench/results/test_summary.py",
                 "docs/evidence/page/test_page_doc.py", "docs/guides/test_page_doc.py",
                 "tunebench/nothing/test_x.py", "test_everything.py", "helpers.py", "fixtures/shared.py",
                 "tunebench/conftest.py", "test_layout.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text('"""t."""\n')
    assert _test_layout_problems(tests, tmp_path) == [
        "docs/guides/test_page_doc.py: docs/guides/ mirrors no folder of the code",
        "helpers.py: a helper outside tests/fixtures/",
        "test_everything.py: at the root, but not a test of the whole repository",
        "tunebench/conftest.py: one conftest.py, at the root of tests/",
        "tunebench/nothing/test_x.py: tunebench/nothing/ mirrors no folder of the code",
        "tunebench/results/test_summary.py: named after nothing in tunebench/results/",
    ]


def test_the_tests_are_laid_out_like_the_code():
    assert _test_layout_problems(ROOT / "tests", ROOT) == []


def _prefix_groups(names: list[str], subjects: set[str]) -> list[str]:
    """Sibling files sharing a name's first word where a folder should say what they share: a group of two or
    more whose members are not each named after a subject (a module the tests mirror: test_page_layout.py is an
    aspect of page.py). Code modules have no subjects among their siblings: compare.py beside compare_io.py is
    a compare/ package written as a prefix."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if "_" in name:
            groups.setdefault(name.split("_")[0], []).append(name)
    for name in names:  # the prefix's own module (compare.py) belongs to its group
        if name in groups:
            groups[name].append(name)
    return [f"{prefix}_*: {', '.join(sorted(members))}" for prefix, members in sorted(groups.items())
            if len(members) > 1 and not all(any(m == s or m.startswith(f"{s}_") for s in subjects) for m in members)]


def _prefix_problems(tests: Path, repo: Path, code: str = "tunebench/results") -> list[str]:
    """Prefix groups in every folder of `code` and of tests/ (where a test's subjects are the modules of the
    folder it mirrors)."""
    problems = []
    for folder in sorted([repo / code, *(p for p in (repo / code).rglob("*") if p.is_dir())]):
        names = sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))
        problems += [f"{folder.relative_to(repo)}/ {group}" for group in _prefix_groups(names, set())]
    for folder in sorted([tests, *(p for p in tests.rglob("*") if p.is_dir())]):
        names = sorted(p.stem.removeprefix("test_") for p in folder.glob("test_*.py"))
        mirrored = repo / folder.relative_to(tests)
        subjects = _stems(mirrored) if folder != tests and mirrored.is_dir() else set()
        problems += [f"{folder.relative_to(repo)}/ test_{group}" for group in _prefix_groups(names, subjects)]
    return problems


def test_the_prefix_check_finds_planted_groups(tmp_path):
    results = tmp_path / "tunebench" / "results"
    report = tmp_path / "tests" / "tunebench" / "results" / "report"
    for path in (results / "compare.py", results / "compare_io.py", results / "folder.py", results / "column_docs.py",
                 results / "report" / "page.py", report / "test_page.py", report / "test_page_layout.py",
                 tmp_path / "tests" / "test_history_store.py", tmp_path / "tests" / "test_history_e2e.py"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('"""x."""\n')
    assert _prefix_problems(tmp_path / "tests", tmp_path) == [
        "tunebench/results/ compare_*: compare, compare_io", "tests/ test_history_*: history_e2e, history_store"]


def test_no_file_in_results_or_tests_is_grouped_by_a_name_prefix():
    """tunebench/results/ and tests/ show their parts as folders (results/compare/, tests/tunebench/results/), not
    as runs of files named compare_*, report_*, test_history_*."""
    assert _prefix_problems(ROOT / "tests", ROOT) == []


def _named_modules(test: Path, modules: dict[str, Path]) -> set[str]:
    """The modules a test file names: those it imports, and those whose repository path (tunebench/x/y.py) or
    dotted name its text holds (a module reached only through a subprocess is named in the test's docstring)."""
    text = test.read_text()
    found = _imports(test, "tests", modules, type_checking=True)
    return found | {name for name, path in modules.items()
                    if str(path.relative_to(ROOT)) in text or f"{name}." in text or f"{name} " in text}


def _unnamed_modules(tests: list[Path], modules: dict[str, Path]) -> list[str]:
    named = set().union(*(_named_modules(test, modules) for test in tests))
    for test in tests:  # a test file named after a module of its mirrored folder names it
        folder = ".".join(test.relative_to(ROOT / "tests").parent.parts)
        stem = test.stem.removeprefix("test_")
        named |= {name for name in modules if name.rpartition(".")[0] == folder and
                  (stem == name.rpartition(".")[2] or stem.startswith(name.rpartition(".")[2] + "_"))}
    return sorted(name for name, path in modules.items() if name not in named and path.name != "__init__.py")


def test_the_unnamed_module_check_finds_a_planted_module(tmp_path):
    modules = {"tunebench.results.folder": ROOT / "tunebench/results/folder.py",
               "tunebench.results.summaries": ROOT / "tunebench/results/summaries.py",
               "tunebench.results.scaling": ROOT / "tunebench/results/scaling.py"}
    test = ROOT / "tests" / "tunebench" / "results" / "test_folder.py"
    assert _unnamed_modules([test], modules) == ["tunebench.results.scaling"]


def test_every_module_is_named_by_a_test():
    """Every module of tunebench/ and scanner/ is findable from its tests: a test file named after it in its
    mirrored folder, or one that imports it or names its path (tests/tunebench/x/test_y.py, or a docstring)."""
    modules = {**_modules("tunebench"), **_modules("scanner")}
    tests = sorted((ROOT / "tests").rglob("test_*.py"))
    assert _unnamed_modules(tests, modules) == []
