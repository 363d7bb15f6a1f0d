"""pip install of the Python module kvevict: setuptools drives the project's CMake build.

Offline, with Debian's packages (pybind11-dev, python3-dev, python3-numpy, python3-setuptools,
python3-wheel, cmake, libeigen3-dev, nlohmann-json3-dev, libcli11-dev):

    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation .

builds only the module's targets (-DKVEVICT_BUILD_PYTHON=ON, tests and benchmarks off) with the
installing interpreter and puts kvevict.<abi>.so into site-packages.
"""
import os
import pathlib
import re
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
VERSION = re.search(r"project\(kvevict VERSION (\S+)", (ROOT / "CMakeLists.txt").read_text()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        out = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        "-DKVEVICT_BUILD_PYTHON=ON", "-DKVEVICT_BUILD_TESTS=OFF", "-DKVEVICT_BUILD_BENCH=OFF",
                        "-DKVEVICT_BUILD_LLAMA2=OFF", f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "kvevict_python", "-j", str(os.cpu_count() or 1)],
                       check=True)
        built = next((build / "python").glob("kvevict*.so"))
        out.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(out))
        # kvevict.transformers (pure Python, optional: torch + transformers) beside the module, where its
        # __path__ points.
        sub = out.parent / "kvevict"
        sub.mkdir(parents=True, exist_ok=True)
        for f in (ROOT / "python" / "kvevict").glob("*.py"):
            self.copy_file(str(f), str(sub / f.name))


setup(
    name="kvevict",
    version=VERSION,
    description="KV-cache eviction (Keyformer, H2O, StreamingLLM, window, TOVA, SnapKV) over NumPy / PyTorch memory, "
                "contiguous or paged",
    license="Apache-2.0",
    python_requires=">=3.8",
    install_requires=["numpy"],
    ext_modules=[Extension("kvevict", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
