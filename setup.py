"""Builds the hsgd Python package with the project's CMake (release preset):
the extension _hsgd and the hsgd CLI (for hsgd.sweep) go into the package.
Used by `pip install --no-build-isolation .`; never fetches anything."""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SRC = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        preset = os.environ.get("HSGD_PRESET", "release")
        jobs = os.environ.get("JOBS", "2")
        subprocess.check_call(["cmake", "--preset", preset], cwd=SRC)
        subprocess.check_call(["cmake", "--build", "--preset", preset, "-j", jobs, "--target",
                               "_hsgd", "hsgd"], cwd=SRC)
        build = os.path.join(SRC, "build", preset)
        built = glob.glob(os.path.join(build, "python", "hsgd", "_hsgd*.so"))
        if not built:
            raise RuntimeError("hsgd: the CMake build made no _hsgd module (is HSGD_WITH_PYTHON "
                               "on and are python3-dev and pybind11-dev installed?)")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built[0], dest)
        bindir = os.path.join(os.path.dirname(dest), "bin")
        os.makedirs(bindir, exist_ok=True)
        shutil.copy2(os.path.join(build, "hsgd"), os.path.join(bindir, "hsgd"))


setup(
    packages=["hsgd"],
    package_dir={"hsgd": "python/hsgd"},
    ext_modules=[Extension("hsgd._hsgd", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
