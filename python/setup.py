"""Builds the embtier package's C helpers and records where its library is.

The metadata is in pyproject.toml; this file adds what setuptools 66
(Debian 12's) cannot declare there, or only as "beta": the package
(embtier/, without its C sources), and

- embtier._embtier_tables: _tables.c's table-batched calls, linked to the
  libembtier that `make install` builds with libc malloc for Python and
  puts in LIBDIR/embtier/ (Debian's jemalloc cannot be dlopen()ed), with
  an rpath there; the package loads it with ctypes.
- embtier._embtier_fast: _fast.c's CPython extension (no library link).
- embtier/_install.py, written into the build only, never into the source
  tree (where PYTHONPATH=python keeps finding build-python/ as before):
  LIBDIR and INCDIR, where the installed package loads the library and
  reads the header (include/embtier.h, parsed at import by _abi.py).

Both are found through pkg-config's embtier module (embtier.pc, which
`make install` installs): its libdir + "/embtier" and its includedir. For
a PREFIX pkg-config does not search, set PKG_CONFIG_PATH=PREFIX/lib/pkgconfig.

pip builds in the source tree: from a checkout of the repository,
setuptools' build/ and egg-info go to build-python/pip/ (ignored by git,
removed by `make clean`) rather than into python/, if writable. The two small extensions are
always compiled again, so that a build left from another PREFIX is never
reused.
"""

import os
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(_HERE)
_found = None


def installed():
    """(LIBDIR/embtier, INCDIR) of the installed library, or SystemExit."""
    global _found
    if _found is not None:
        return _found
    pc = shlex.split(os.environ.get("PKG_CONFIG", "pkg-config"))

    def var(name):
        try:
            r = subprocess.run(pc + ["--variable=" + name, "embtier"],
                               capture_output=True, text=True)
        except FileNotFoundError:
            raise SystemExit(f"embtier: {pc[0]} not found (Debian: "
                             "pkg-config)")
        if r.returncode != 0 or not r.stdout.strip():
            raise SystemExit(
                "embtier: pkg-config finds no embtier.pc: run `make install` "
                "in the repository first (for a PREFIX pkg-config does not "
                "search, PKG_CONFIG_PATH=PREFIX/lib/pkgconfig)"
                + ("\n" + r.stderr.strip() if r.stderr.strip() else ""))
        return r.stdout.strip()

    libdir = os.path.join(var("libdir"), "embtier")
    incdir = var("includedir")
    for f in (os.path.join(libdir, "libembtier.so"),
              os.path.join(incdir, "embtier.h")):
        if not os.path.exists(f):
            raise SystemExit(f"embtier: {f} not found: run `make install` "
                             "again (it installs the library built with "
                             "libc malloc for Python in LIBDIR/embtier/)")
    _found = (libdir, incdir)
    return _found


class BuildExt(build_ext):
    def run(self):
        # An editable install (pip -e) runs the source tree, which loads
        # build-python/'s helpers as PYTHONPATH=python does: none in python/.
        if getattr(self, "editable_mode", False):
            return
        libdir, incdir = installed()
        for ext in self.extensions:
            if ext.name == "embtier._embtier_tables":
                ext.include_dirs.append(incdir)
                ext.library_dirs.append(libdir)
                ext.runtime_library_dirs.append(libdir)
        self.force = True  # the rpath and the header may have moved
        super().run()


INSTALL_PY = '''\
"""Written by setup.py when this package was built: where `make install`
put the library the package loads (built with libc malloc) and the header
it reads."""
LIBDIR = {libdir!r}
INCDIR = {incdir!r}
'''


class BuildPy(build_py):
    def _install_py(self):
        return os.path.join(self.build_lib, "embtier", "_install.py")

    def run(self):
        super().run()
        # An editable install runs the source tree, which finds the
        # library as PYTHONPATH=python does (after `make python`): nothing
        # to record.
        if getattr(self, "editable_mode", False):
            return
        libdir, incdir = installed()
        with open(self._install_py(), "w", encoding="utf-8") as f:
            f.write(INSTALL_PY.format(libdir=libdir, incdir=incdir))

    def get_outputs(self, include_bytecode=1):
        out = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            out.append(self._install_py())
        return out


C_FLAGS = ["-std=gnu11", "-D_GNU_SOURCE", "-ffp-contract=off"]

options = {}
if os.path.isfile(os.path.join(_REPO, "include", "embtier.h")) and \
        os.path.isfile(os.path.join(_REPO, "Makefile")):
    base = os.path.join(_REPO, "build-python", "pip")
    try:  # not if build-python/ is root's (sudo make install): then python/
        os.makedirs(base, exist_ok=True)
        if os.access(base, os.W_OK):
            options = {"build": {"build_base": base},
                       "egg_info": {"egg_base": base}}
    except OSError:
        pass

setup(
    packages=["embtier"],
    exclude_package_data={"embtier": ["*.c"]},
    options=options,
    ext_modules=[
        Extension("embtier._embtier_tables", ["embtier/_tables.c"],
                  libraries=["embtier"], extra_compile_args=C_FLAGS),
        Extension("embtier._embtier_fast", ["embtier/_fast.c"],
                  extra_compile_args=C_FLAGS),
    ],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
