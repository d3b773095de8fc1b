"""tunebench: a benchmark harness for LLM fine-tuning (throughput, memory, communication across a matrix).

The Python API (typed options in, DataFrames out; the CLI and `tune` are its clients):

    import tunebench
    matrix = tunebench.Matrix.from_yaml("scenarios-cpu.yaml", device="cpu")
    plan = tunebench.plan(matrix)                                    # benchmark.py plan
    result = tunebench.run(matrix, tunebench.RunSettings(results_output_path="out"))
    verdict = tunebench.compare("refs/cpu.csv", "out")               # benchmark.py compare
    projected = tunebench.project(tunebench.ProjectionOptions(project_from="out", plan_device="NVIDIA H200"))
    tunebench.report("out")                                          # benchmark.py report
    found = tunebench.tune(tunebench.TuneOptions(model="preset:llama-tiny", device="cpu"))

Bad input raises `tunebench.InputError`, whose `problems` each name the file and key (or the option) and a fix.
"""

from tunebench.library_noise import silence_known_noise

__version__ = "0.1.0"

silence_known_noise()

# The Python API, imported on first use (PEP 562): `import tunebench` stays as quick as the CLI's start-up.
_API = {name: module for module, names in {
    "tunebench.api.matrix": ("Matrix", "MatrixOptions"),
    "tunebench.api.planning": ("plan", "fit_map"),
    "tunebench.api.running": ("run", "RunSettings", "RunResult"),
    "tunebench.api.comparing": ("compare", "CompareOptions", "report"),
    "tunebench.api.projecting": ("project", "ProjectionOptions"),
    "tunebench.tuning.command": ("tune", "TuneResult"),
    "tunebench.tuning.options": ("TuneOptions",),
    "tunebench.errors": ("InputError", "InputProblem"),
}.items() for name in names}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        from importlib import import_module

        return getattr(import_module(_API[name]), name)
    raise AttributeError(f"module 'tunebench' has no attribute {name!r}")
