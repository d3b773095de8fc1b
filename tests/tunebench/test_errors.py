"""tunebench/errors.py: an input error crosses processes whole (a fork of the preload server checks the inputs and
hands its problems back): its class, its problems and its text, a subclass with an __init__ of its own included."""

from __future__ import annotations

import pickle

from tunebench.errors import InputError, InputProblem
from tunebench.plugins import PluginError, Registry

PROBLEMS = [InputProblem("scenarios.yaml", "scenario 'a': arguments.max_step", "unknown argument",
                         "did you mean 'max_steps'?"), InputProblem("command line", "--repeats", "must be >= 1")]


def test_an_input_error_comes_back_with_its_problems_and_its_text():
    error = InputError(PROBLEMS)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is InputError and back.problems == PROBLEMS and str(back) == str(error)


def test_a_plugin_error_comes_back_as_a_plugin_error():
    registry = Registry("tracker", "tunebench.trackers", {"none": "tunebench.no:Such"})
    error = PluginError(registry, "none", "to import", ImportError("No module named 'tunebench.no'"))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is PluginError and back.problems == error.problems and str(back) == str(error)
