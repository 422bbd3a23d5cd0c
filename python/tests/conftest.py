"""pytest setup: the package from this checkout, scratch stores on the real
disk ($ET_TEST_DIR under tests/run.sh), one torch thread."""

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


def pytest_configure(config):
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
