"""torch.compile's training step under fake tensors: AOTAutograd's partition and inductor's memory plan, replayed.

A compiled step keeps different tensors from the eager one in two ways, and both are decided before any kernel runs:
  * what the forward saves for backward: AOTAutograd traces the joint forward-backward graph and inductor's min-cut
    partitioner chooses the tensors to save (cheap pointwise results are recomputed in backward instead);
  * what each graph allocates while it runs: inductor fuses pointwise chains and reductions into kernels whose
    intermediates never exist, reuses freed buffers of the same size, and frees each buffer after its last use.
The fake step therefore compiles the real model with torch.compile and inductor (dynamo, AOTAutograd, the joint-
graph passes, the partitioner, lowering and scheduling as a run does, on fake tensors) and stops where inductor would
write kernels: its wrapper code, the allocations, reuses and frees in order, runs under the step's tracker with fake
buffers, and the kernels are not run (they only write into buffers already allocated).

A CUDA target's kernels are Triton's, which a CPU-only torch cannot generate: its nodes are scheduled with the Triton
backend's rules instead (`PlanScheduling`: its fusion decisions, a kernel's local buffers never allocated, every
kernel's dead buffers freed after it), on CPU-device nodes. A CPU target runs inductor's own C++ scheduling and
codegen, the plan the CPU run executes (tests/tunebench/planning/test_accelerations.py checks it against a real
compiled CPU step).
"""

from __future__ import annotations

import contextlib
import logging
import types
import warnings

logger = logging.getLogger(__name__)

# inductor's settings for a plan: nothing cached across predictions (a cache hit would skip the patched codegen),
# no autotuning (it benchmarks kernels on real data), C++ kernels never compiled in a pool of processes.
_CONFIG = {"fx_graph_cache": False, "fx_graph_remote_cache": False, "autotune_local_cache": False,
           "autotune_remote_cache": False, "max_autotune": False, "max_autotune_gemm": False,
           "max_autotune_pointwise": False, "compile_threads": 1, "freezing": False, "cpp_wrapper": False}


class _NoKernels:
    """inductor's AsyncCompile for a plan: every kernel it would compile is a no-op (kernels only write into
    buffers the wrapper allocated)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: _no_op

    def wait(self, scope) -> None:
        return None


def _no_op(*args, **kwargs) -> None:
    return None


def _empty_strided(size, stride, dtype, *args, **kwargs):
    import torch

    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")


class _Step1Autotune:
    """max-autotune's step 1, as a plan replays it: each compiled graph is autotuned when it is first called, with
    everything alive at its entry, and the benchmark of a matmul's candidates allocates that matmul's inputs and
    output afresh (select_algorithm's get_inputs: random example values), plus, for a decompose-K candidate, its
    float32 partial sums. The peak of that is max over graphs of (entry + the graph's costliest matmul)."""

    def __init__(self) -> None:
        self.alive_now = None  # () -> bytes alive now as step 1 holds them; None: not watching
        self.split_k = False  # a Triton target that autotunes matmuls (decompose-K candidates offered)
        self.graph_matmul = 0  # the costliest matmul of the graph being replayed
        self.peak = 0

    def matmul(self, name: str, tensors: list) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors)
        if self.split_k and name == "mm" and len(tensors) >= 2:
            size += split_k_partials(tensors[0].shape, tensors[1].shape)
        self.graph_matmul = max(self.graph_matmul, size)


STEP1 = _Step1Autotune()


def split_k_partials(a_shape, b_shape) -> int:
    """Bytes of float32 partial sums that max-autotune's decompose-K candidate for mm(a, b) allocates while it is
    benchmarked: inductor offers it when K is at least `decompose_k_threshold` x M and x N (kernel/mm.py
    tuned_mm), and its largest split S holds S x M x N float32 (decomposeK's bmm). H100, qwen3-1.7b's LM head
    input gradient [4096, 151936] @ [151936, 2048]: one 1 024 MiB block (S = 32), allocator history."""
    try:
        from torch._inductor import config
        from torch._inductor.utils import get_k_splits
    except ImportError:  # an inductor without decompose-K
        return 0
    (m, k), n = tuple(a_shape), b_shape[-1]
    threshold = getattr(config.triton, "decompose_k_threshold", 0)
    if getattr(config.triton, "num_decompose_k_splits", 0) <= 0 or threshold <= 0 or k < threshold * max(m, n):
        return 0
    splits = [s for s in get_k_splits(m, n, k) if isinstance(s, int) and k % s == 0]
    return max(splits, default=0) * m * n * 4


@contextlib.contextmanager
def step1_autotune(alive_now, split_k: bool):
    """While it lasts, every replayed graph's entry (`alive_now()`) and its costliest matmul are watched: STEP1.peak
    is max-autotune's step-1 peak over the graphs called."""
    STEP1.alive_now, STEP1.split_k, STEP1.peak = alive_now, split_k, 0
    try:
        yield STEP1
    finally:
        STEP1.alive_now = None


class _MeasuredExternKernels:
    """inductor's extern kernels, each matmul's operand and output bytes recorded (the kernels themselves run on
    fake tensors: no arithmetic)."""

    MATMULS = ("mm", "bmm", "addmm", "baddbmm")

    def __init__(self, kernels):
        self.kernels = kernels

    def __getattr__(self, name: str):
        kernel = getattr(self.kernels, name)
        if name not in self.MATMULS:
            return kernel

        def measured(*args, **kwargs):
            import torch

            STEP1.matmul(name, [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)])
            return kernel(*args, **kwargs)

        return measured


def _watched(call):
    """A replayed graph's `call`, its entry and costliest matmul handed to STEP1 while a step is watched."""

    def watched(args):
        if STEP1.alive_now is None:
            return call(args)
        entry, STEP1.graph_matmul = STEP1.alive_now(), 0
        out = call(args)
        STEP1.peak = max(STEP1.peak, entry + STEP1.graph_matmul)
        return out

    return watched


def replay_module(wrapper_code: str):
    """inductor's wrapper module with its kernels as no-ops and its buffers fake: calling `call(args)` allocates,
    reuses and frees exactly as the compiled graph does."""
    import torch

    namespace: dict = {"__name__": "tunebench_inductor_plan", "_NO_KERNELS": _NoKernels()}
    text = wrapper_code.replace("async_compile = AsyncCompile()", "async_compile = _NO_KERNELS")
    exec(compile(text, "<inductor memory plan>", "exec"), namespace)  # noqa: S102 - inductor's own generated code
    for name in ("empty_strided_cpu", "empty_strided_cuda", "empty_strided_cpu_pinned"):
        namespace[name] = _empty_strided
    namespace["reinterpret_tensor"] = lambda tensor, size, stride, offset: torch.as_strided(
        tensor, size, stride, offset
    )
    namespace["assert_size_stride"] = namespace["assert_alignment"] = _no_op
    if "extern_kernels" in namespace:
        namespace["extern_kernels"] = _MeasuredExternKernels(namespace["extern_kernels"])
    return types.SimpleNamespace(call=_watched(namespace["call"]), __file__="<inductor memory plan>", runner=None,
                                 wrapper_code=wrapper_code)


def plan_scheduling():
    """The Triton backend's scheduling rules for CPU-device nodes, writing a memory plan instead of kernels."""
    from torch._inductor.codegen.common import BackendFeature, Kernel, OpOverrides
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch.utils._ordered_set import OrderedSet

    class PlanKernel(Kernel):
        overrides = OpOverrides  # never used: no op is generated

    class PlanScheduling(SIMDScheduling):
        """SIMDScheduling's fusion (Triton's), and per fused kernel what TritonScheduling's codegen does to the
        wrapper: in-place updates decided, outputs allocated, buffers that never leave the kernel removed, the
        buffers the kernel used last freed after it."""

        backend_features = OrderedSet([  # TritonScheduling's, less templates (no autotuning in a plan)
            BackendFeature.FOREACH, BackendFeature.BUCKETIZE, BackendFeature.INPLACE_BUFFERS,
            BackendFeature.MASKED_SCATTER_WITH_INDEX, BackendFeature.SCAN, BackendFeature.SORT,
            BackendFeature.TUPLE_REDUCTION])

        @classmethod
        def get_backend_features(cls, device):
            return cls.backend_features

        def codegen_node(self, node) -> None:
            nodes = [n for n in node.get_nodes() if n.get_name() not in self.scheduler.removed_ops]
            if nodes:
                _plan_kernel(PlanKernel(), nodes)
                self.free_buffers_in_scheduler()

        def codegen_template(self, *args, **kwargs):
            raise NotImplementedError("no templates in a memory plan (no autotuning)")

        def flush(self) -> None:
            return None

        def ready_to_flush(self) -> bool:
            return False

        def codegen_sync(self) -> None:
            return None

        def codegen_comment(self, *args, **kwargs) -> None:
            return None

    return PlanScheduling


def _plan_kernel(kernel, nodes: list) -> None:
    """One fused kernel's effect on the wrapper, as TritonScheduling's codegen has it: in-place updates decided,
    outputs allocated, the buffers that never leave the kernel removed (Kernel.remove_kernel_local_buffers, on
    leaving the kernel), no source."""
    from torch._inductor.virtualized import V
    from torch.utils._ordered_set import OrderedSet

    with kernel:
        for n in nodes:
            n.decide_inplace_update()
        for n in nodes:
            n.mark_run()
        stored = OrderedSet(buf.get_name() for n in nodes for buf in n.get_outputs())
        kernel.store_buffer_names |= stored
        for n in nodes:
            for dep in n.read_writes.reads:
                if dep.name not in stored:
                    kernel.args.input(dep.name)
    V.graph.removed_buffers |= kernel.removed_buffers
    V.graph.inplaced_to_remove |= kernel.inplaced_to_remove
    V.graph.wrapper_code.writeline(f"# kernel: {', '.join(n.get_name() for n in nodes)}")


@contextlib.contextmanager
def inductor_plans(cuda: bool):
    """While it lasts, torch.compile with inductor compiles to memory plans (replay_module) on fake tensors; for a
    CUDA target, scheduled as Triton schedules (plan_scheduling). dynamo starts and ends empty (no cached graph of
    another prediction is reused)."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor import scheduler
    from torch._inductor.graph import GraphLowering

    original_lines = GraphLowering._compile_to_module_lines
    original_scheduling = scheduler.get_scheduling_for_device
    planned = plan_scheduling() if cuda else None
    GraphLowering._compile_to_module_lines = lambda self, code: replay_module(code.value)
    if planned is not None:
        scheduler.get_scheduling_for_device = lambda device: planned if device == "cpu" else original_scheduling(device)
    torch._dynamo.reset()
    try:
        with inductor_config.patch(_CONFIG), _causal_mask_kept(), warnings.catch_warnings():
            # the tracker's module hooks are global ones: torch warns they fire once more for the compiled wrapper
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
            yield
    finally:
        GraphLowering._compile_to_module_lines = original_lines
        scheduler.get_scheduling_for_device = original_scheduling
        torch._dynamo.reset()


@contextlib.contextmanager
def _causal_mask_kept():
    """transformers drops the causal mask when SDPA's `is_causal` can stand in for it, but not while dynamo traces
    under torch <= 2.12, whose `torch.compiler.is_exporting()` traces as True: the compiled step keeps the mask, and
    with it grouped-query keys and values are expanded to every query head before SDPA (H100, torch 2.11: the
    llama-3.2-1b LoRA step at 8 x 1024 kept 0.80 GiB more than the step without it, llama-3.1-8b at 4 x 1024
    1.53 GiB: 48 MiB a layer of expanded keys and values, and one mask). A plan keeps it on every stack: on a stack
    that drops it the prediction is that much higher, never lower."""
    from unittest import mock

    try:
        from transformers import masking_utils
    except ImportError:
        masking_utils = None
    if masking_utils is None or not hasattr(masking_utils, "_ignore_causal_mask_sdpa"):
        yield
        return
    with mock.patch.object(masking_utils, "_ignore_causal_mask_sdpa", lambda *args, **kwargs: False):
        yield


def ignoring_compile(tracker_class):
    """The tracker class, told to stay out of torch.compile's tracing (it sees the compiled graphs' runtime: the
    replayed plan) — a dispatch mode that does not would make dynamo skip the frame and run it eagerly."""

    class CompiledStepTracker(tracker_class):
        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

    return CompiledStepTracker
