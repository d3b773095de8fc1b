"""fms configs checked before anything runs, by fms itself: each plugin's own config check, the architectures it
restricts itself to, the packages it requires, and whether each plugin package imports on this machine.

fms cannot be imported into the harness: `import fms_acceleration` imports every installed plugin (one broken
package fails them all) and fms patches classes process-wide. The check runs once per matrix in a child interpreter
(`python -m tunebench.experiment.fms.checks <body JSON>...`), which answers in one JSON line on stdout.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import subprocess
import sys
from typing import Any

logger = logging.getLogger(__name__)

PROBE_TIMEOUT = 300  # seconds: imports torch, transformers, peft and the fms packages once


_FACTS: dict[str, dict[str, Any]] = {}  # body text -> what the probe found for it (and its packages' status)


def prefetch(bodies: list[str]) -> None:
    """Probe every body not probed yet in one child interpreter (a matrix's bodies at once)."""
    wanted = tuple(sorted(set(bodies) - set(_FACTS)))
    if not wanted:
        return
    answer = probe(wanted)
    for body in wanted:
        facts = dict(answer.get("bodies", {}).get(body) or {})
        facts["packages"] = answer.get("packages", {})
        if answer.get("error"):
            facts["error"] = answer["error"]
        _FACTS[body] = facts


def known() -> dict[str, dict[str, Any]]:
    """Every body probed in this process, with its facts (for `remember` in another process of this machine)."""
    return dict(_FACTS)


def remember(found: dict[str, dict[str, Any]]) -> None:
    """Take the facts another process of this machine probed (the preload server's fork that checked the matrix):
    they are not probed again here."""
    _FACTS.update(found)


def facts(body: str) -> dict[str, Any]:
    """The probe's facts of one body (probing it now when no prefetch did)."""
    prefetch([body])
    return _FACTS[body]


@functools.lru_cache(maxsize=32)
def probe(bodies: tuple[str, ...]) -> dict[str, Any]:
    """What fms says of each body (JSON text of a `plugins:` body) here: {"packages": {package: None | why it
    cannot import}, "bodies": {body: {"config_errors": [...], "restricted_archs": [...], "requires": [...],
    "gptq_model_types": [...]}}}. A probe that cannot run at all says why under "error"."""
    command = [sys.executable, "-m", __name__, *bodies]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"the fms check could not run: {exc}"}
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        answer = json.loads(last[0])
    except json.JSONDecodeError:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"the fms check failed (exit {done.returncode}): {tail[0][:300]}"}
    return answer


def _import_what_imports(packages: set[str]) -> dict[str, str | None]:
    """Import fms with `packages`, dropping each plugin package that fails (its error kept), until the rest import."""
    from tunebench.experiment.fms import compat

    status: dict[str, str | None] = {}
    remaining = set(packages)
    while True:
        try:
            compat.import_framework(remaining)
            status.update(dict.fromkeys(remaining))
            return status
        except ImportError as exc:
            culprit = compat.culprit(exc.__cause__ or exc, remaining)
            status[culprit] = str(exc)
            remaining.discard(culprit)
            for name in [n for n in sys.modules if n.startswith("fms_acceleration")]:
                del sys.modules[name]
            sys.modules[culprit] = None
            if culprit == compat.FRAMEWORK_PACKAGE:
                return {**status, **dict.fromkeys(remaining, str(exc))}


def _body_facts(body: dict) -> dict[str, Any]:
    """fms's own verdict on one body: its plugins' config checks, restricted architectures, required packages."""
    from fms_acceleration.framework_plugin import get_relevant_configuration_sections
    from transformers.utils.import_utils import _is_package_available

    facts: dict[str, Any] = {"config_errors": [], "restricted_archs": [], "requires": [], "plugins": []}
    for section, plugin_class in get_relevant_configuration_sections(body):
        facts["plugins"].append(plugin_class.__name__)
        try:
            plugin_class(section)
        except Exception as exc:  # noqa: BLE001 - the plugin's own check, whatever it raises
            facts["config_errors"].append(f"{plugin_class.__name__}: {exc}")
        if plugin_class.restricted_model_archs:
            facts["restricted_archs"].append([plugin_class.__name__, sorted(plugin_class.restricted_model_archs)])
        for package in plugin_class.require_packages or []:
            if not _is_package_available(package):
                facts["requires"].append(f"{plugin_class.__name__} needs {package}, which is not installed")
    if "AutoGPTQAccelerationPlugin" in facts["plugins"]:
        facts["gptq_model_types"] = _gptq_model_types()
    return facts


def _gptq_model_types() -> list[str]:
    """fms's GPTQ loader's SUPPORTED_MODELS, read from its file: importing the gptqmodel package needs a CUDA GPU."""
    import importlib.util
    from pathlib import Path

    root = Path(importlib.util.find_spec("fms_acceleration_peft").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location("_fms_gptq_const", root / "gptqmodel" / "models" / "_const.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.SUPPORTED_MODELS)


def main(argv: list[str]) -> int:
    from tunebench.experiment.fms.settings import fms_plugins_of

    bodies = {text: fms_plugins_of(text) for text in argv}
    needed = {package for plugins in bodies.values() for package in plugins.packages}
    status = _import_what_imports(needed)
    answer: dict[str, Any] = {"packages": status, "bodies": {}}
    if status.get("fms_acceleration") is None:
        importlib.import_module("fms_acceleration")
        for text, plugins in bodies.items():
            answer["bodies"][text] = _body_facts(dict(plugins.body))
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main(sys.argv[1:]))
