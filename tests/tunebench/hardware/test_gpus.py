"""The projection's GPU table: shipped figures with sources, a user's YAML merged in, hostile files -> InputError."""

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tunebench.errors import InputError
from tunebench.hardware.gpus import FIGURES, REQUIRED, load_table, resolve


def test_every_shipped_gpu_has_the_rates_and_a_source_for_each_figure():
    table = load_table()
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA H200"} <= set(table.names())
    for gpu in table.gpus:
        assert all(gpu.value(k) for k in REQUIRED), gpu.name
        assert set(gpu.sources) == set(gpu.figures) and all(gpu.sources.values()), gpu.name
    h100, h200 = table.lookup("NVIDIA H100 80GB HBM3"), table.lookup("NVIDIA H200")
    # the figures measured on the lent machines, and said to be measured
    assert (h100.value("bf16_tflops"), h100.value("memory_tb_per_s")) == (798, 3.0)
    assert (h200.value("bf16_tflops"), h200.value("memory_tb_per_s")) == (788, 4.3)
    assert h100.sources["bf16_tflops"].startswith("measured") and h200.sources["memory_tb_per_s"].startswith("measured")
    # device names as nvidia-smi and torch give them
    assert table.lookup("NVIDIA L40S").name == "NVIDIA L40S" and table.lookup("NVIDIA L4").name == "NVIDIA L4"
    assert table.lookup("NVIDIA H100 PCIe").name == "NVIDIA H100 PCIe"
    assert table.lookup("NVIDIA GH200 480GB") is None  # not an H200
    assert table.lookup("nvidia h200").name == "NVIDIA H200"


def test_a_user_file_overrides_figure_by_figure_and_adds_gpus_that_win_lookups(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"gpus": [
        {"name": "NVIDIA H200", "memory_tb_per_s": {"value": 4.5, "source": "my stream benchmark"}},
        {"name": "Rented H100", "match": ["H100 SXM5"], "bf16_tflops": 700, "memory_tb_per_s": 2.9,
         "power_w": 650},
    ]}))
    table = load_table(path)
    h200 = table.lookup("NVIDIA H200")
    assert h200.value("memory_tb_per_s") == 4.5 and h200.sources["memory_tb_per_s"] == "my stream benchmark"
    assert h200.value("bf16_tflops") == 788 and h200.sources["bf16_tflops"].startswith("measured")  # kept
    # a name no entry has exactly: the user's entry is tried before the shipped ones (whose "H100 SXM" matches too)
    mine = table.lookup("NVIDIA H100 SXM5 80GB")
    assert mine.name == "Rented H100" and mine.sources["bf16_tflops"] == f"your file {path}"
    assert mine.value("power_w") == 650
    assert table.lookup("NVIDIA H100 80GB HBM3").value("bf16_tflops") == 798  # an exact name wins over a match


@pytest.mark.parametrize("text, key, message", [
    ("gpus: [{name: X, bf16_tflops: 100}]", "X", "no memory_tb_per_s"),
    ("gpus: [{name: X, bf16_tflops: -5, memory_tb_per_s: 1}]", "gpus[0].bf16_tflops", "-5 is not a number > 0"),
    ("gpus: [{name: X, bf16_tflops: .nan, memory_tb_per_s: 1}]", "gpus[0].bf16_tflops", "nan is not a number"),
    ("gpus: [{name: X, bf16_tflops: '9', memory_tb_per_s: 1}]", "gpus[0].bf16_tflops", "'9' is not a number"),
    ("gpus: [{name: X, bf16_tflop: 9, memory_tb_per_s: 1}]", "gpus[0].bf16_tflop", "unknown figure"),
    ("gpus: [{name: X, bf16_tflops: {value: 9, cite: a}, memory_tb_per_s: 1}]", "gpus[0].bf16_tflops",
     "expected {value, source}"),
    ("gpus: [{name: '', bf16_tflops: 9}]", "gpus[0].name", "expected a GPU name"),
    ("gpus: [{name: X, match: H100, bf16_tflops: 9, memory_tb_per_s: 1}]", "gpus[0].match", "name fragments"),
    ("gpus: [{name: X, bf16_tflops: 9, memory_tb_per_s: 1}, {name: x, bf16_tflops: 9, memory_tb_per_s: 1}]",
     "gpus", "'x' is listed twice"),
    ("gpu: []", "gpus", "expected a mapping with one key"),
    ("gpus: [1, 2", "line 1, column 12", "malformed YAML"),
])
def test_bad_entries_are_reported_with_file_key_and_fix(tmp_path, text, key, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_table(path)
    problem = next(p for p in caught.value.problems if p.key == key)
    assert problem.source == str(path) and message in problem.message and problem.fix


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("gpus: [{name: A, bf16_tflops: -1, memory_tb_per_s: 1, watts: 3}, {name: B, power_w: 0}]")
    with pytest.raises(InputError) as caught:
        load_table(path)
    assert [p.key for p in caught.value.problems] == ["gpus[0].watts", "gpus[0].bf16_tflops", "gpus[1].power_w"]


def test_missing_file_and_unknown_gpu_name_their_option(tmp_path):
    with pytest.raises(InputError, match="--gpu_table: file not found"):
        load_table(tmp_path / "absent.yaml")
    with pytest.raises(InputError, match=r"--plan_device: 'TPU v5' is not in the GPU table \(fix: one of NVIDIA H100"):
        resolve(load_table(), "TPU v5", "--plan_device")


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                     st.text(max_size=12))
_figure = st.one_of(_scalars, st.dictionaries(st.sampled_from(["value", "source", "x"]), _scalars, max_size=3))
_entry = st.dictionaries(st.sampled_from(["name", "match", *FIGURES, "extra"]),
                         st.one_of(_figure, st.lists(_scalars, max_size=3)), max_size=8)


@pytest.mark.slow  # over 8 s: the submission tier, not the unit tier (issue AC)
@given(document=st.one_of(_scalars, st.lists(_entry, max_size=3), st.fixed_dictionaries({"gpus": st.lists(_entry,
       max_size=4)}), st.dictionaries(st.text(max_size=5), _scalars, max_size=3)))
@settings(max_examples=300, deadline=None)
def test_hostile_files_load_or_raise_input_error_never_anything_else(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("hostile") / "gpus.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        table = load_table(path)
    except InputError as exc:
        assert exc.problems and all(p.source == str(path) and p.fix for p in exc.problems)
        return
    for gpu in table.gpus:  # whatever loaded is usable: the rates are positive finite numbers
        assert all(0 < gpu.value(k) < 1e7 for k in REQUIRED)


def _alias_bomb(width: int, depth: int, where: str) -> str:
    """A small YAML file whose anchors nest `depth` levels of `width` copies each: width**depth values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    entry = {"name": f"{{name: X, bf16_tflops: 1, memory_tb_per_s: 1, match: *a{depth}}}",
             "figure": f"{{name: X, bf16_tflops: *a{depth}, memory_tb_per_s: 1}}",
             "top": f"*a{depth}"}[where]
    return "\n".join(lines) + (f"\ngpus: [{entry}]\n" if where != "top" else f"\ngpus: {entry}\n")


_hostile_texts = st.one_of(
    st.builds(_alias_bomb, st.integers(2, 12), st.integers(1, 9), st.sampled_from(["name", "figure", "top"])),
    st.sampled_from([40, 2000, 100_000, 300_000]).map(lambda n: "gpus: " + "[" * n + "]" * n),
    st.sampled_from([1, 10, 1001]).map(lambda n: "gpus:\n" + "".join(
        f"  - {{name: G{i}, bf16_tflops: 9, memory_tb_per_s: 1}}\n" for i in range(n))),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.just("gpus: []\n" + "#" * (300 * 1024)),  # over the size bound, every byte a comment
    st.just("gpus: [{name: '" + "x" * 100_000 + "', bf16_tflops: 1, memory_tb_per_s: 1}]"),
)


@given(text=_hostile_texts)
@settings(max_examples=20, deadline=None, derandomize=True, database=None)
def test_hostile_gpu_table_texts_are_bounded_and_one_problem_each(tmp_path_factory, text):
    """Issue W2: a 50 MB table was still loading after 580 s, and a 608-byte file of nested anchors took 4 min and
    15 GB: its error message built the value's whole repr. Every file now loads or is refused quickly, each problem
    a short line naming the file."""
    import time

    path = tmp_path_factory.mktemp("bomb") / "gpus.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    started = time.monotonic()
    try:
        load_table(path)
    except InputError as exc:
        assert 0 < len(exc.problems) <= 20 and all(p.source == str(path) and len(str(p)) < 1000
                                                   for p in exc.problems), str(exc)[:2000]
    assert time.monotonic() - started < 10


def test_the_issues_alias_bomb_is_refused_at_once(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(10, 9, "name"))
    assert len(path.read_bytes()) < 700
    with pytest.raises(InputError) as caught:
        load_table(path)
    assert [p.message for p in caught.value.problems] == ["expands to more than 50,000 values (aliases?)"]
