"""The experiment's builders: torch's two views of the float32 matmul precision made to agree."""

import subprocess
import sys

from tests.fixtures.harness import REPO

# In a child process: the precision is torch's global state, which the test process must not keep.
CHECK = """
import torch
from tunebench.experiment.components import reconcile_matmul_precision
assert reconcile_matmul_precision() is None  # nothing set: nothing to reconcile
torch.backends.fp32_precision = {new!r}  # what transformers' enable_tf32 does (TF32 on for torch.compile)
try:
    torch.get_float32_matmul_precision()
    raise SystemExit("the mixed state did not raise: nothing to test")
except RuntimeError as exc:
    assert "mix of the legacy and new APIs" in str(exc)
assert reconcile_matmul_precision() == {legacy!r}
assert torch.get_float32_matmul_precision() == {legacy!r}
assert torch.backends.cuda.matmul.fp32_precision == {new!r}  # the precision itself is unchanged
assert torch.backends.cuda.matmul.allow_tf32 is {tf32}  # the legacy read inductor's max-autotune makes
assert reconcile_matmul_precision() is None
"""


def test_a_precision_set_through_the_new_api_reads_the_same_through_the_legacy_one():
    code = CHECK.format(new="tf32", legacy="high", tf32=True)  # torch.compile's TF32, as transformers sets it
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]


KEEP_TF32 = """
from types import SimpleNamespace
import torch
from transformers.utils.import_utils import enable_tf32
from tunebench.experiment.components import keep_explicit_tf32
enable_tf32(False)  # transformers, for tf32: false
torch.backends.cuda.matmul.allow_tf32 = True  # accelerate/state.py: a compiled run without mixed precision on CUDA
assert keep_explicit_tf32(SimpleNamespace(tf32=None)) is False  # unset: the libraries' choice stands
assert torch.backends.cuda.matmul.allow_tf32 is True
assert keep_explicit_tf32(SimpleNamespace(tf32=False)) is True
assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cuda.matmul.fp32_precision == "ieee"
assert torch.get_float32_matmul_precision() == "highest"
assert keep_explicit_tf32(SimpleNamespace(tf32=False)) is False  # already off: nothing to do
"""


def test_an_explicit_tf32_false_is_kept_when_accelerate_turns_tf32_on():
    done = subprocess.run([sys.executable, "-c", KEEP_TF32], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
