"""pytest setup: the package from this checkout, scratch stores on the real
disk ($ET_TEST_DIR under tests/run.sh), one torch thread; `calls`, the
module's ways to call the library (test_nn.py, test_keyed.py)."""

import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


@pytest.fixture
def store_dir():
    base = os.environ.get("ET_TEST_DIR") or os.environ.get("TMPDIR") or \
        "/var/tmp"
    d = tempfile.mkdtemp(prefix="embtier-py.", dir=base)
    yield os.path.join(d, "store")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["batched", "batched-ctypes", "per-table"])
def calls(request, monkeypatch):
    """The module's ways to call the library: _tables.c's table-batched
    calls (a [T, B] tensor's through _fast.c's extension, or through
    ctypes), or one ctypes call per table."""
    import embtier
    if request.param == "per-table":
        monkeypatch.setattr(embtier._abi, "tables_lib", None)
        return request.param
    tl = embtier._abi.tables_lib
    if tl is None or embtier._abi.fast is None:
        pytest.fail("libembtier_tables.so or _embtier_fast.so not built: "
                    "run `make python`")
    if request.param == "batched-ctypes":
        for n in ("prefetch", "gather", "update"):
            monkeypatch.setattr(embtier._abi, "plan_" + n,
                                getattr(tl, "etpy_plan_" + n))
    return request.param


def pytest_configure(config):
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
