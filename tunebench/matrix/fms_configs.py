"""fms-acceleration sample configuration files as framework configs: fms's `--acceleration_framework_config_keypairs`.

fms's benchmark names each acceleration config by a short name (`accelerated-peft-autogptq`) mapped to a sample
configuration file (`plugins:` at its top). tunebench ships fms's own short names in framework_configs.yaml; a user's
own file, under a name of their choosing, becomes a framework config here whose `fms_plugins` argument is the file's
`plugins:` body, with the training arguments that body needs (GPTQ: float16), as fms's own scenarios give them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tunebench.errors import InputProblem
from tunebench.experiment.fms.settings import fms_plugins_of, needed_arguments
from tunebench.experiment.spec import BASELINE, FrameworkConfig
from tunebench.matrix.inputs import load_yaml

logger = logging.getLogger(__name__)

OPTION = "--acceleration_framework_config_keypairs"


def pairs_of(values: list[str], problems: list[InputProblem]) -> dict[str, str]:
    """`NAME FILE NAME FILE ...` as {name: file}; an odd count or a name given twice is a problem."""
    if len(values) % 2:
        problems.append(InputProblem("command line", OPTION, f"expected NAME FILE pairs, got {len(values)} value(s)",
                                     f"e.g. {OPTION} my-gptq my-gptq-sample-configuration.yaml"))
        return {}
    pairs: dict[str, str] = {}
    for name, path in zip(values[::2], values[1::2], strict=True):
        if not name.strip() or not path.strip():  # '' would be read as the current folder: "./: file not found"
            problems.append(InputProblem("command line", OPTION, f"the pair {name!r} {path!r} has an empty "
                                         f"{'name' if not name.strip() else 'file'}",
                                         f"e.g. {OPTION} my-gptq my-gptq-sample-configuration.yaml"))
            continue
        if name in pairs:
            problems.append(InputProblem("command line", OPTION, f"{name!r} is given twice", "name each file once"))
        pairs[name] = path
    return pairs


def fms_framework_configs(files: Mapping[str, str], shipped: Mapping[str, FrameworkConfig],
                          problems: list[InputProblem]) -> dict[str, FrameworkConfig]:
    """A framework config per (name, fms sample configuration file); problems name the file and key."""
    made: dict[str, FrameworkConfig] = {}
    for name, path in files.items():
        if name == BASELINE:
            problems.append(InputProblem("command line", OPTION, f"{name!r} is the baseline's name",
                                         "choose another name for the file"))
            continue
        data = load_yaml(path, problems)
        body = data.get("plugins") if isinstance(data, dict) else None
        if not isinstance(body, dict) or not body:
            if data is not None:
                problems.append(InputProblem(str(path), "plugins", "no `plugins:` mapping at the top of the file",
                                             "give an fms-acceleration sample configuration (plugins: {peft: ...})"))
            continue
        plugins = fms_plugins_of(body)
        if name in shipped:
            logger.info("%s: %s %s replaces the framework config of that name", OPTION, name, path)
        made[name] = FrameworkConfig(name, {"fms_plugins": dict(plugins.body), **needed_arguments(plugins)},
                                     f"fms-acceleration configuration {path}", source=str(path))
    return made
