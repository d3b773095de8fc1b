"""A launcher from another package: the plain one-process launcher that leaves a mark in the experiment folder."""

from pathlib import Path

from tunebench.execution.launchers.python import PythonLauncher


class MarkedPythonLauncher(PythonLauncher):
    name = "marked_python"

    def start(self, command, stdout_path: Path, stderr_path: Path):
        Path(stdout_path).with_name("launched-by-marked-python").write_text(" ".join(command.argv))
        return super().start(command, stdout_path, stderr_path)
