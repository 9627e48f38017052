"""The build step pyproject.toml cannot state: the extension kvspec._core is
built by the project's own CMake (target kvspec_core_module) for the
interpreter running this script, in a build folder of its own
(python/build-install/), or taken from an existing build folder when
KVSPEC_BUILD_DIR names one (it is brought up to date there). Set
KVSPEC_PURE=1 to install the pure-Python runner alone. Everything else
(name, version, dependencies, the console script) is in pyproject.toml.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build_extension() -> str:
    build_dir = os.environ.get("KVSPEC_BUILD_DIR") or os.path.join(HERE, "build-install")
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir,
                               "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                               "-DKVSPEC_BUILD_TESTS=OFF", "-DKVSPEC_BUILD_BENCH=OFF",
                               "-DPython3_EXECUTABLE=" + sys.executable])
    subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvspec_core_module"])
    found = glob.glob(os.path.join(build_dir, "python", "kvspec", "_core*.so"))
    if not found:
        raise RuntimeError("no kvspec._core was built in " + build_dir)
    return found[0]


class BuildPyWithCore(build_py):
    def run(self) -> None:
        super().run()
        if os.environ.get("KVSPEC_PURE"):
            return
        so = build_extension()
        target = os.path.join(self.build_lib, "kvspec")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(so, os.path.join(target, os.path.basename(so)))


# setuptools' own build and egg-info folders go to a temporary folder, not
# into the source tree.
SCRATCH = tempfile.mkdtemp(prefix="kvspec-setup-")

setup(
    cmdclass={"build_py": BuildPyWithCore},
    options={"build": {"build_base": os.path.join(SCRATCH, "build")},
             "egg_info": {"egg_base": SCRATCH}},
)
