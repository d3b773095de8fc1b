"""Which of Liger's kernels replace which of a model type's layers, read from liger-kernel's own monkey_patch source.

Liger patches a model type in a handful of ways, each an `if <flag>:` block of its `apply_liger_kernel_to_<type>`
that assigns a Liger object over a name of the type's modeling module (`modeling_llama.LlamaRMSNorm =
LigerRMSNorm`, `modeling_nemotron.ACT2FN["relu2"] = LigerReLUSquared`, `modeling_gemma.apply_rotary_pos_emb =
liger_rotary_pos_emb`). The patch set of a type is those assignments under the flags in force: the function's
defaults, with the trainer's config over them (TRL's SFTTrainer: `fused_linear_cross_entropy` False). Each patch's
kind follows from the Liger object assigned, and the plan replaces each replaced layer by that kind's stand-in
(planning.liger_kernels). Nothing is executed: liger's module-level state, and transformers', stay as they are.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# The Liger objects of each kind the plan has a stand-in for (planning.liger_kernels), by name; subclasses too.
KINDS = {
    "rms_norm": ("LigerRMSNorm",),
    "rope": ("liger_rotary_pos_emb",),
    "swiglu": ("LigerSwiGLUMLP", "LigerBlockSparseTop2MLP", "LigerQwen3MoeSwiGLUMLP", "LigerHunyuanV1SwiGLUMLP"),
    "swiglu_fused": ("LigerPhi3SwiGLUMLP",),  # gate and up in one projection (gate_up_proj), chunked
    "geglu": ("LigerGEGLUMLP",),
    "relu_squared": ("LigerReLUSquared",),
    "fused_linear_cross_entropy": ("lce_forward",),
}


@dataclass(frozen=True)
class Patch:
    """One replacement: `target` (a name of the modeling module, `ACT2FN[<key>]`, or `<Class>.forward`) by `liger`
    (the Liger object's name), of `kind` (a KINDS key, or `other`: no stand-in); `in_place`: an RMSNorm that writes
    its input gradient over the output's gradient (Liger's default) or allocates it."""

    kind: str
    target: str
    liger: str
    in_place: bool = True


def supported_types() -> tuple[str, ...]:
    """The model types Liger has an apply function for (empty without liger-kernel)."""
    module = _monkey_patch()
    return tuple(sorted(module.MODEL_TYPE_TO_APPLY_LIGER_FN)) if module is not None else ()


@functools.lru_cache(maxsize=1)
def _monkey_patch():
    try:
        from liger_kernel.transformers import monkey_patch
    except ImportError:  # no liger-kernel (or one whose import fails here): no patch can be read
        return None
    return monkey_patch


@functools.cache
def patches(model_type: str | None, fused_linear_cross_entropy: bool = False) -> tuple[Patch, ...]:
    """Liger's patches of `model_type` with the trainer's setting of its fused linear cross-entropy, in source order;
    () for a type Liger does not patch (or without liger-kernel)."""
    module = _monkey_patch()
    if module is None or model_type not in module.MODEL_TYPE_TO_APPLY_LIGER_FN:
        return ()
    function = inspect.unwrap(module.MODEL_TYPE_TO_APPLY_LIGER_FN[model_type])
    flags = {name: p.default for name, p in inspect.signature(function).parameters.items()
             if isinstance(p.default, bool)}
    if "fused_linear_cross_entropy" in flags:
        flags["fused_linear_cross_entropy"] = fused_linear_cross_entropy
    tree = ast.parse(inspect.cleandoc("\n" + inspect.getsource(function)))
    local_classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found: list[Patch] = []
    _visit(tree.body[0].body, flags, _scope(module, tree), local_classes, found, active=False)
    for node in ast.walk(tree):  # a type patched as another (gemma3 as gemma3_text): that type's patches too
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith(_APPLY):
            found.extend(patches(_TYPE_OF.get(node.func.id, node.func.id[len(_APPLY):]), fused_linear_cross_entropy))
    return tuple(dict.fromkeys(found))


_APPLY = "apply_liger_kernel_to_"
_TYPE_OF: dict[str, str] = {}  # an apply function's type where it is not its name's tail


def _scope(module, tree) -> dict:
    """liger's module globals, and the Liger names the apply function imports itself."""
    import importlib

    scope = dict(vars(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("liger_kernel"):
            try:
                imported = importlib.import_module(node.module)
            except ImportError:  # a Liger module this transformers cannot import: its names stay unknown (`other`)
                continue
            scope.update({a.asname or a.name: getattr(imported, a.name, None) for a in node.names})
    return scope


def _visit(body: list, flags: dict, scope: dict, local_classes: dict, found: list, active: bool) -> None:
    """Assignments of Liger objects over module names, inside the blocks of flags in force (a test on one of liger's
    own module-level booleans, such as its transformers-version checks, taken as it evaluates here)."""
    for node in body:
        if isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id in flags:
                if flags[test.id]:
                    _visit(node.body, flags, scope, local_classes, found, active=True)
                else:
                    _visit(node.orelse, flags, scope, local_classes, found, active)
            elif isinstance(test, ast.Name) and isinstance(scope.get(test.id), bool):
                _visit(node.body if scope[test.id] else node.orelse, flags, scope, local_classes, found, active)
            elif _tests_the_instance(test):  # the class-level branch only (the instance's is the same over again)
                _visit(node.orelse, flags, scope, local_classes, found, active)
            else:
                _visit(node.body + node.orelse, flags, scope, local_classes, found, active)
        elif active and isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                name = _target_name(target)
                if name is not None:
                    found.append(_patch(name, node.value.id, scope, local_classes))


def _tests_the_instance(test) -> bool:
    """`if model is not None:` (the instance's own layers, the same patches over again)."""
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "model"


def _target_name(target) -> str | None:
    """`modeling_x.Name` -> Name; `modeling_x.ACT2FN["relu2"]` -> ACT2FN[relu2]; `modeling_x.Class.forward` ->
    Class.forward; anything else (torch's cross_entropy) -> its dotted text."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        return target.attr if target.value.id.startswith("modeling_") else ast.unparse(target)
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute):
        return f"{target.value.attr}.{target.attr}"
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
        return f"{_target_name(target.value) or ast.unparse(target.value)}[{target.slice.value}]"
    return None


def _patch(target: str, liger: str, scope: dict, local_classes: dict) -> Patch:
    """The patch of `liger` over `target`, its kind from the object's name or its Liger base classes."""
    obj = scope.get(liger)
    names = [c.__name__ for c in inspect.getmro(obj)] if inspect.isclass(obj) else [getattr(obj, "__name__", liger)]
    in_place = True
    if liger in local_classes:  # a subclass defined in the apply function (exaone4's RMSNorm not in place)
        node = local_classes[liger]
        names = [ast.unparse(base) for base in node.bases]
        in_place = not any(isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.in_place"
                           and isinstance(n.value, ast.Constant) and n.value.value is False for n in ast.walk(node))
    elif inspect.isclass(obj) and "in_place" in inspect.signature(obj.__init__).parameters:
        in_place = inspect.signature(obj.__init__).parameters["in_place"].default is not False
    kind = kind_of(names)
    return Patch(kind, target, liger, in_place if kind == "rms_norm" else True)


def kind_of(names) -> str:
    """The patch kind of a Liger object known by `names` (its class and bases, or its function name)."""
    return next((k for k, liger_names in KINDS.items() for n in names if n in liger_names), "other")


@contextlib.contextmanager
def liger_applied(model, fused_linear_cross_entropy: bool = False, keep: tuple = tuple(KINDS)):
    """Liger's own patching of a model instance, as transformers' Trainer asks it (`_apply_liger_kernel_to_instance`
    on the base model, the trainer's kernel config): yields {name: (kind, owner)} of what it replaced (a layer's path,
    or `<module>.<function>` for a modeling module's function, `forward` for the model's). The module-level names
    it rewrites meanwhile (the model's modeling modules, transformers' ACT2FN, torch's cross_entropy) are put back
    after. A replacement of a kind not in `keep` (no stand-in for it) is undone at once."""
    import sys

    import torch
    from liger_kernel.transformers import _apply_liger_kernel_to_instance
    from transformers.activations import ACT2FN

    homes = {sys.modules[type(m).__module__] for m in model.modules() if type(m).__module__.startswith("transformers")}
    homes.add(torch.nn.functional)  # transformers' loss calls its cross_entropy (Liger's for granite by default)
    names = {home: dict(vars(home)) for home in homes}
    acts = {key: dict.__getitem__(ACT2FN, key) for key in ACT2FN}  # its classes (ACT2FN[key] makes an instance)
    try:
        before = dict(model.named_modules())
        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=fused_linear_cross_entropy)
        replaced = _replaced(model, homes, names)
        for name, (kind, owner) in replaced.items():
            if kind not in keep:
                _put_back(model, name, owner, before, names)
        yield replaced
    finally:
        for home, saved in names.items():
            for name, value in saved.items():
                setattr(home, name, value)
        for key, value in acts.items():
            dict.__setitem__(ACT2FN, key, value)


def _put_back(model, name: str, owner, before: dict, names: dict) -> None:
    """One of Liger's replacements undone: the layer's own module or forward, the module's own function."""
    if owner in names:  # a modeling module's function
        attribute = name.rsplit(".", 1)[1]
        setattr(owner, attribute, names[owner][attribute])
    elif type(owner).__module__.startswith("liger") and name in before:
        parent, _, attribute = name.rpartition(".")
        setattr(model.get_submodule(parent), attribute, before[name])
    else:
        del owner.forward


def _replaced(model, homes, names) -> dict:
    """What Liger's patching changed: layers given a Liger forward or made Liger modules, functions of the modeling
    modules replaced by Liger's."""
    out = {}
    for path, sub in model.named_modules():
        forward = vars(sub).get("forward")
        if type(sub).__module__.startswith("liger"):
            out[path or "forward"] = (kind_of([c.__name__ for c in inspect.getmro(type(sub))]), sub)
        elif forward is not None and (getattr(forward, "__module__", "") or "").startswith("liger"):
            owner = getattr(forward, "__qualname__", "").split(".")[0]
            out[path or "forward"] = (kind_of([owner, getattr(forward, "__name__", "")]), sub)
    for home in homes:
        for name, value in vars(home).items():
            if value is not names[home].get(name) and (getattr(value, "__module__", "") or "").startswith("liger") \
                    and callable(value) and not inspect.isclass(value):
                out[f"{home.__name__}.{name}"] = (kind_of([value.__name__]), home)
    return out
