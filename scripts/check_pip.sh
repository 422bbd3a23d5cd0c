#!/usr/bin/env bash
# Installs the Python package as a user would (make check-pip), offline:
# `make install` into a scratch prefix; a venv of Debian's interpreter that
# sees Debian's numpy and torch (--system-site-packages); `pip install
# --no-build-isolation --no-index ./python` (Debian's pip, setuptools and
# wheel; PKG_CONFIG_PATH names the scratch prefix's embtier.pc); then, from
# a directory outside the repository and without PYTHONPATH: the package,
# library, header and extensions come from the venv and the prefix; a store
# is opened, a table created, rows written, gathered, updated (numpy API
# and the torch module), checkpointed, the store closed, reopened, and
# every value checked. Prints one line; exits non-zero on any failure.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-/usr/bin/python3}
root=$(mktemp -d "${TMPDIR:-/var/tmp}/embtier-pip.XXXXXX")
# pip builds in the source tree (pip >= 21.3); python/setup.py sends
# setuptools' build/ and egg-info to build-python/pip/: they must not
# appear in python/ (removed again if they do)
leftovers=()
for d in python/build python/embtier.egg-info; do
	[ -e "$d" ] || leftovers+=("$repo/$d")
done
trap 'rm -rf "$root" ${leftovers[@]+"${leftovers[@]}"}' EXIT

fail() {
	echo "check-pip: $*" >&2
	exit 1
}

make -s install PREFIX="$root/usr" BUILD="${BUILD:-build}" >/dev/null ||
	fail "make install PREFIX=$root/usr failed"
"$python" -m venv --system-site-packages "$root/venv" >"$root/venv.log" 2>&1 || {
	cat "$root/venv.log" >&2
	fail "$python -m venv failed (Debian: python3-venv)"
}
# No index, no network, no user or global pip configuration, and none of
# the variables that would point the package elsewhere.
unset PYTHONPATH EMBTIER_LIB EMBTIER_HEADER EMBTIER_NO_TABLES EMBTIER_NO_FAST
export PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" "$root/venv/bin/python" -m pip \
	install --no-build-isolation --no-index "$repo/python" \
	>"$root/pip.log" 2>&1 || {
	cat "$root/pip.log" >&2
	fail "pip install --no-build-isolation --no-index ./python failed"
}
for d in ${leftovers[@]+"${leftovers[@]}"}; do
	[ ! -e "$d" ] || fail "pip left ${d#"$repo"/} in the source tree"
done

mkdir "$root/elsewhere"
cd "$root/elsewhere"
got=$("$root/venv/bin/python" - "$root" "$repo" <<'PY'
import os
import sys

import numpy as np

root, repo = sys.argv[1], sys.argv[2]
import embtier
import embtier.nn
import torch
from embtier import _abi


def under(path, d):
    return os.path.realpath(path).startswith(os.path.realpath(d) + os.sep)


# What was imported and loaded: the venv's package, the prefix's libc-malloc
# library and header, the package's own extensions; nothing of the repository.
assert under(embtier.__file__, root + "/venv"), embtier.__file__
assert not under(embtier.__file__, repo), embtier.__file__
assert under(embtier.LIB_PATH, root + "/usr/lib/embtier"), embtier.LIB_PATH
assert embtier.HEADER_PATH == root + "/usr/include/embtier.h", embtier.HEADER_PATH
assert _abi.tables_lib is not None, "the _embtier_tables extension is not loaded"
assert _abi.fast is not None, "the _embtier_fast extension is not loaded"
for ext in (_abi.tables_lib._name, _abi.fast.__file__):
    assert under(ext, os.path.dirname(embtier.__file__)), ext
with open("/proc/self/maps") as f:
    maps = f.read()
assert "jemalloc" not in maps, "jemalloc was loaded"
assert root + "/usr/lib/libembtier.so" not in maps, "the jemalloc build was loaded"

path = os.path.join(root, "store")
rows, dim = 1000, 8
rng = np.random.default_rng(1)
ids = np.array([3, 7, 999, 0], np.uint64)
vals = rng.standard_normal((len(ids), dim)).astype(np.float32)
lr = np.float32(0.5)
dense = b"dense weights"

with embtier.Store(path, ddr_bytes=4 << 20) as s:
    t = s.create_table("t", rows=rows, dim=dim, optim="sgd", init="uniform",
                       seed=3)
    lazy = t.gather(np.array([5], np.uint64))
    assert lazy.shape == (1, dim) and np.all(np.abs(lazy) <= 1) and \
        np.any(lazy), lazy
    t.write_rows(ids, vals)
    assert np.array_equal(t.gather(ids), vals)
    # a pooled update of bags {3, 7} and {999}: SGD, row -= lr * grad
    g = rng.standard_normal((2, dim)).astype(np.float32)
    t.update_pooled(ids[:3], np.array([0, 2, 3], np.uint64), g, lr=lr)
    want = vals.copy()
    want[0] -= lr * g[0]
    want[1] -= lr * g[0]
    want[2] -= lr * g[1]
    got = t.gather(ids)
    assert np.array_equal(got, want), (got, want)
    pooled = t.gather_pooled(ids, np.array([0, 2, 4], np.uint64))
    assert np.array_equal(pooled, np.stack([want[0] + want[1],
                                            want[2] + want[3]])), pooled
    # the torch module's [T, B] step, through both extensions
    ebc = embtier.nn.EmbeddingBagCollection(s, [t], lr=float(lr))
    out = ebc(torch.tensor([[3, 0]], dtype=torch.int64))
    assert out.shape == (1, 2, dim)
    assert torch.equal(out[0], torch.from_numpy(want[[0, 3]])), out
    out.backward(torch.ones_like(out))
    want[0] -= lr
    want[3] -= lr
    assert np.array_equal(t.gather(ids), want)
    # a keyed table: int64 ids as their u64 bits, erase
    k = s.create_table("k", keyed=True, dim=dim, optim="sgd",
                       init="uniform", seed=3)
    kids = np.array([0, -1, -2**63, 2**62], np.int64)
    kvals = rng.standard_normal((4, dim)).astype(np.float32)
    kinit = k.gather(kids)
    k.write_rows(kids, kvals)
    assert np.array_equal(k.gather(kids.view(np.uint64)), kvals)
    assert k.erase(kids[:1]) == 1
    kwant = kvals.copy()
    kwant[0] = kinit[0]
    s.checkpoint(dense)

with embtier.Store(path, ddr_bytes=4 << 20) as s:
    t = s.open_table("t")
    assert np.array_equal(t.gather(ids), want)
    assert np.array_equal(t.gather(np.array([5], np.uint64)), lazy)
    assert s.checkpoint_read()[1] == dense
    k = s.open_table("k")
    assert np.array_equal(k.gather(kids), kwant)

print(f"embtier {embtier.__version__} (library PREFIX/lib/embtier/, "
      f"header PREFIX/include/, both extensions)")
PY
) || fail "the installed package failed (above)"
echo "check-pip: pip installed $got offline into a venv; used from outside the repository, a store written, updated (numpy, torch), a keyed table written and erased, checkpointed, reopened and read back"
