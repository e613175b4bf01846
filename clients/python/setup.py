"""Build hook of lease-fence: ship the repository's Lua scripts as package data.

The client-side mode (lease_fence.client_side) runs the very scripts the C
library runs, the repository's ``scripts/*.lua`` — one copy, never committed
under clients/. This hook copies them at build time:

- into the wheel (build_py: ``lease_fence/scripts/*.lua``), from
  ``../../scripts`` (this directory inside the repository), or, when building
  from an sdist, from the copy the sdist carries;
- into the sdist (``src/lease_fence/scripts/*.lua``), so that it builds on its
  own.

A build that finds neither fails: no package without its scripts.
Everything else is in pyproject.toml.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ("acquire.lua", "renew.lua", "release.lua", "check.lua")
REPO_SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
SDIST_SCRIPTS = os.path.join(HERE, "src", "lease_fence", "scripts")


def scripts_dir() -> str:
    """Where the scripts are: an sdist's own copy (it has PKG-INFO), else the
    repository's scripts/; SystemExit (the build fails) if neither has all."""
    candidates = []
    if os.path.exists(os.path.join(HERE, "PKG-INFO")):
        candidates.append(SDIST_SCRIPTS)
    candidates.append(REPO_SCRIPTS)
    for d in candidates:
        if all(os.path.isfile(os.path.join(d, s)) for s in SCRIPTS):
            return d
    raise SystemExit(
        "lease-fence: the Lua scripts (%s) are missing: looked in %s. Build from "
        "clients/python inside the repository (they come from its scripts/), or from an "
        "sdist made there." % (", ".join(SCRIPTS), ", ".join(os.path.normpath(c)
                                                           for c in candidates)))


def copy_scripts(dest: str) -> None:
    src = scripts_dir()
    os.makedirs(dest, exist_ok=True)
    for s in SCRIPTS:
        shutil.copyfile(os.path.join(src, s), os.path.join(dest, s))   # bytes as they are


class BuildPyWithScripts(build_py):
    def run(self) -> None:
        super().run()
        copy_scripts(os.path.join(self.build_lib, "lease_fence", "scripts"))


class SdistWithScripts(sdist):
    def make_release_tree(self, base_dir: str, files) -> None:  # type: ignore[no-untyped-def]
        super().make_release_tree(base_dir, files)
        copy_scripts(os.path.join(base_dir, "src", "lease_fence", "scripts"))


setup(cmdclass={"build_py": BuildPyWithScripts, "sdist": SdistWithScripts})
