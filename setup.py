"""The wheel's build: the checkout's default input files ride inside the package, so an installed tunebench plans."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The files the harness reads by default (tunebench.api.matrix.INPUTS_ROOT): at the checkout's root, where users
# edit them; a wheel carries copies in tunebench/inputs/ (the build's, never a second copy in git).
INPUTS = ("defaults.yaml", "framework_configs.yaml", "accelerate.yaml", "scenarios.yaml", "scenarios-cpu.yaml")


class BuildWithInputs(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "tunebench" / "inputs"
        self.mkpath(str(target))
        for name in INPUTS:
            self.copy_file(str(Path(__file__).resolve().with_name(name)), str(target / name))


setup(cmdclass={"build_py": BuildWithInputs})
