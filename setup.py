"""Build hook: ship the top-level ``prompts/`` and ``names/`` folders inside the wheel.

The design card keeps templates and name lists at the top level of the repository so
that people can read and edit them; a non-editable ``pip install .`` copies them into
``lmra/_data/`` so that the installed package finds them (see ``lmra/resources.py``).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        for folder in ("prompts", "names", "examples"):
            src = ROOT / folder
            if src.is_dir():
                dst = Path(self.build_lib) / "lmra" / "_data" / folder
                if dst.exists():
                    shutil.rmtree(dst)
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithData})
