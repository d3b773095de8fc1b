"""Loading and checking the YAML inputs: scenarios, defaults and framework configs (safe_load only)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunebench.bounds import SECONDS
from tunebench.errors import InputProblem
from tunebench.experiment.spec import BASELINE, FrameworkConfig
from tunebench.user_files import read_yaml, shown

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Scenario:
    name: str
    framework_configs: list[str | None]
    arguments: dict[str, Any]
    slow: bool = False
    exclusive: bool = False  # run alone on the machine (timing-critical), whatever --max_concurrent says
    timeout: float | None = None  # seconds each of its experiments may run, instead of --timeout
    # the GPU counts it runs at, of those --num_gpus_matrix asks for (None: all of them); e.g. one-GPU baselines
    # beside parallel scenarios in a `--num_gpus_matrix 1 2 4` matrix
    num_gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ScenarioFile:
    scenarios: list[Scenario]
    data_processing: dict[str, Any]


def load_yaml(path: str | Path, problems: list[InputProblem]) -> Any:
    """Parse a YAML input; a missing, oversized, unreadable, malformed or alias-bomb file becomes a problem (with
    its line), not a traceback (tunebench.user_files: the bounds, checked before the document is walked)."""
    return read_yaml(path, problems, what="tunebench input file")


def _expect_mapping(value: Any, source: str, key: str, problems: list[InputProblem]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(InputProblem(source, key, f"expected a mapping, got {type(value).__name__}",
                                     "write `key: value` pairs"))
        return {}
    return value


def load_scenarios(path: str | Path, problems: list[InputProblem]) -> ScenarioFile:
    """The scenarios of a YAML file; every problem names the file and the key."""
    known = len(problems)
    data = load_yaml(path, problems)
    if data is None and len(problems) > known:  # unreadable: a problem already
        return ScenarioFile([], {})
    return parse_scenarios(data, str(path), problems)


def parse_scenarios(data: Any, source: str, problems: list[InputProblem]) -> ScenarioFile:
    """Scenarios from their parsed form (a YAML file's, or built in Python); problems name `source` and the key."""
    if data is None:
        problems.append(InputProblem(source, "-", "the file is empty", "add `scenarios:` with `- name: ...` entries"))
        return ScenarioFile([], {})
    if not isinstance(data, dict):  # one line: what follows from it (no `scenarios:`) is no second problem
        problems.append(InputProblem(source, "<top level>", f"expected a mapping, got {type(data).__name__}",
                                     "write `scenarios:` with `- name: ...` entries (and `data_processing:`)"))
        return ScenarioFile([], {})
    unknown = set(data) - {"scenarios", "data_processing"}
    for key in sorted(unknown):
        problems.append(InputProblem(source, key, "unknown top-level key", "use `scenarios:` and `data_processing:`"))
    data_processing = _expect_mapping(data.get("data_processing"), source, "data_processing", problems)
    raw = data.get("scenarios")
    if not isinstance(raw, list) or not raw:
        problems.append(InputProblem(source, "scenarios", "expected a non-empty list of scenarios",
                                     "add `scenarios:` with `- name: ...` entries"))
        return ScenarioFile([], data_processing)
    scenarios, seen = [], set()
    for i, entry in enumerate(raw):
        scenario = _scenario(_expect_mapping(entry, source, f"scenarios[{i}]", problems), i, source, problems)
        if scenario is None:
            continue
        if scenario.name in seen:
            problems.append(InputProblem(source, f"scenarios[{i}] ({scenario.name}).name", "duplicate scenario name",
                                         "give each a unique name"))
        seen.add(scenario.name)
        scenarios.append(scenario)
    return ScenarioFile(scenarios, dict(data_processing))


FRAMEWORK_CONFIG_KEYS = ("description", "arguments", "min_gpus", "accelerate_args", "parity_baseline")
SCENARIO_KEYS = ("name", "framework_config", "arguments", "slow", "exclusive", "timeout", "num_gpus")


def _scenario(entry: dict, index: int, source: str, problems: list[InputProblem]) -> Scenario | None:
    """One `scenarios:` entry, its problems named `scenarios[<index>] (<name>).<key>`; None without a name."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        problems.append(InputProblem(source, f"scenarios[{index}].name", "missing scenario name", "add `name: <text>`"))
        return None
    key = f"scenarios[{index}] ({name})"
    for extra in sorted(set(entry) - set(SCENARIO_KEYS)):
        problems.append(InputProblem(source, f"{key}.{extra}", "unknown scenario key",
                                     "allowed: " + ", ".join(SCENARIO_KEYS)))
    fcs = entry.get("framework_config", [None])
    if fcs is None or isinstance(fcs, str):
        fcs = [fcs]
    if not isinstance(fcs, list) or not all(f is None or isinstance(f, str) for f in fcs):
        problems.append(InputProblem(source, f"{key}.framework_config",
                                     "expected a list of framework config names or null",
                                     "e.g. `framework_config: [null, gradient-checkpointing]`"))
        fcs = [None]
    slow, exclusive = entry.get("slow", False), entry.get("exclusive", False)
    for flag, value in (("slow", slow), ("exclusive", exclusive)):
        if not isinstance(value, bool):
            problems.append(InputProblem(source, f"{key}.{flag}", f"expected true/false, got {shown(value)}",
                                         "use true or false"))
    timeout = entry.get("timeout")
    # bool is an int: `timeout: true` must not become a 1-second limit.
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or SECONDS.problem(timeout)):
        problems.append(InputProblem(source, f"{key}.timeout", f"expected seconds {SECONDS.describe()}, got "
                                     f"{shown(timeout)}", "e.g. `timeout: 600`, or leave it out to use --timeout"))
        timeout = None
    arguments = _expect_mapping(entry.get("arguments"), source, f"{key}.arguments", problems)
    return Scenario(name, list(fcs), dict(arguments), slow is True, exclusive is True,
                    float(timeout) if timeout is not None else None, _gpu_counts(entry, source, key, problems))


def _gpu_counts(entry: dict, source: str, key: str, problems: list[InputProblem]) -> tuple[int, ...] | None:
    """A scenario's `num_gpus`: a positive count or a list of them (bool is an int: refused)."""
    if "num_gpus" not in entry:
        return None
    counts = entry["num_gpus"]
    counts = counts if isinstance(counts, list) else [counts]
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 1_048_576 for c in counts):
        text = repr(entry["num_gpus"])
        problems.append(InputProblem(source, f"{key}.num_gpus", f"expected a GPU count or a list of them (each "
                                     f"1-1048576), got {text if len(text) <= 60 else text[:57] + '...'}",
                                     "e.g. `num_gpus: [1]` (the scenario runs only at the counts it lists)"))
        return None
    return tuple(dict.fromkeys(counts))


def load_defaults(path: str | Path, problems: list[InputProblem]) -> dict[str, Any]:
    data = load_yaml(path, problems)
    return dict(_expect_mapping(data, str(path), "<top level>", problems))


def load_framework_configs(path: str | Path, problems: list[InputProblem]) -> dict[str, FrameworkConfig]:
    data = load_yaml(path, problems)
    source = str(path)
    configs = {BASELINE: FrameworkConfig(BASELINE, {}, "baseline: no acceleration overlay")}
    data = _expect_mapping(data, source, "<top level>", problems).get("framework_configs", {})
    for name, body in _expect_mapping(data, source, "framework_configs", problems).items():
        key = f"framework_configs.{name}"
        body = _expect_mapping(body, source, key, problems)
        for extra in sorted(set(body) - set(FRAMEWORK_CONFIG_KEYS)):
            problems.append(InputProblem(source, f"{key}.{extra}", "unknown framework config key",
                                         "allowed: " + ", ".join(FRAMEWORK_CONFIG_KEYS)))
        min_gpus = body.get("min_gpus", 1)
        if not isinstance(min_gpus, int) or min_gpus < 1:
            problems.append(InputProblem(source, f"{key}.min_gpus", f"expected a positive integer, got "
                                                                    f"{shown(min_gpus)}",
                                         "e.g. `min_gpus: 2`"))
            min_gpus = 1
        configs[name] = FrameworkConfig(
            name=name,
            arguments=dict(_expect_mapping(body.get("arguments"), source, f"{key}.arguments", problems)),
            description=str(body.get("description", "")),
            min_gpus=min_gpus,
            accelerate_args=dict(
                _expect_mapping(body.get("accelerate_args"), source, f"{key}.accelerate_args", problems)
            ),
            parity_baseline=body.get("parity_baseline"),
            source=source,
        )
    for name, config in configs.items():
        baseline = config.parity_baseline
        if baseline is not None and (not isinstance(baseline, str) or baseline not in configs):
            problems.append(InputProblem(source, f"framework_configs.{name}.parity_baseline",
                                         f"{shown(baseline)} is not a framework config of this file",
                                         "name one of: " + ", ".join(sorted(configs))))
    return configs
