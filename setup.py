"""setuptools driving CMake for the `burst-attn` distribution (pyproject.toml holds the metadata).

build_ext configures this tree with only the pybind11 module (no tests, CLI, language model or
install rules), builds the target `burst_python` and copies `_C*.so` into the wheel next to the
pure-Python package python/burst/. Environment: BURST_CMAKE_ARGS (extra CMake arguments, e.g.
-DCMAKE_CXX_COMPILER_LAUNCHER=ccache), CMAKE_BUILD_PARALLEL_LEVEL (default: 2 jobs).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def cmake_project_version():
    """The one version of the project: project(burst VERSION x.y.z) in CMakeLists.txt."""
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*burst\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        raise RuntimeError("CMakeLists.txt: no project(burst VERSION ...) line")
    return m.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
                     "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}",
                     "-DBURST_WITH_PYTHON=ON", "-DBURST_WITH_TORCH=OFF", "-DBURST_WITH_CUDA=OFF",
                     "-DBURST_BUILD_TESTS=OFF", "-DBURST_BUILD_TOOLS=OFF", "-DBURST_INSTALL=OFF",
                     *shlex.split(os.environ.get("BURST_CMAKE_ARGS", ""))]
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "burst_python", "-j", jobs],
                       check=True)
        built = sorted((build_dir / "python" / "burst").glob("_C*.so"))
        if not built:
            raise RuntimeError(f"no _C*.so under {build_dir / 'python' / 'burst'}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    version=cmake_project_version(),
    packages=["burst"],
    package_dir={"burst": "python/burst"},
    ext_modules=[CMakeExtension("burst._C")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip"}},   # not ./build, the CMake build of scripts/
    zip_safe=False,
)
