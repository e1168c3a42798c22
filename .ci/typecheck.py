#!/usr/bin/env python3
"""Type-check `pagesim` as it is installed: mypy -p pagesim, settings in pyproject's [tool.mypy].

The distribution maps top-level folders to subpackages of one import name (pyproject's
[tool.setuptools.package-dir]: simulator/ installs as pagesim.simulator, calibration/ as
pagesim.calibration, ...). mypy cannot follow that mapping, and the editable install resolves it
with an import hook that mypy never runs. So this script lays the package out as installed, as a
tree of symlinks under build/typecheck/ (gitignored, remade on every run), points MYPYPATH at it
and runs mypy over the package; error paths are rewritten back to the checkout's own files.

usage: python .ci/typecheck.py [more mypy options]      (from any folder; exit status is mypy's)
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = Path("build") / "typecheck"  # relative to ROOT: mypy prints paths as it found them


def lay_out() -> dict[str, str]:
    """Build the tree; returns {path prefix in the tree: path prefix in the checkout}."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    shutil.rmtree(ROOT / TREE, ignore_errors=True)
    prefixes: dict[str, str] = {}
    for package in sorted(mapping, key=len):  # parents before the packages mapped inside them
        folder = mapping[package]
        link = TREE / package.replace(".", "/")
        nested = [p for p in mapping if p.startswith(package + ".")]
        if nested:  # a real folder: links to its files, beside the nested packages' links
            (ROOT / link).mkdir(parents=True)
            taken = {p.split(".")[package.count(".") + 1] for p in nested}
            for entry in sorted((ROOT / folder).iterdir()):
                if entry.name not in taken and entry.name != "__pycache__":
                    os.symlink(os.path.relpath(entry, ROOT / link), ROOT / link / entry.name)
        else:
            os.symlink(os.path.relpath(ROOT / folder, (ROOT / link).parent), ROOT / link)
        prefixes[f"{link.as_posix()}/"] = f"{Path(folder).as_posix()}/"
    return prefixes


def main() -> int:
    from mypy import api

    os.chdir(ROOT)
    prefixes = lay_out()
    os.environ["MYPYPATH"] = str(TREE)
    stdout, stderr, status = api.run(["-p", "pagesim", *sys.argv[1:]])
    longest_first = sorted(prefixes, key=len, reverse=True)
    for line in stdout.splitlines():
        prefix = next((p for p in longest_first if line.startswith(p)), None)
        print(line if prefix is None else prefixes[prefix] + line[len(prefix) :])
    sys.stderr.write(stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
