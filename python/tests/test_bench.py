"""bench_overhead.py's example step: its two ways (the embeddings through
EmbeddingBagCollection, and the store driven from C around the same torch
model) must compute the same thing, or the overhead it prints compares
different work."""

import os

import numpy as np
import pytest
import torch

import bench_overhead as bo
import dlrm


@pytest.fixture(scope="module")
def cb():
    if not os.path.exists(bo.C_BASELINE):
        pytest.skip(f"{bo.C_BASELINE} missing: run `make python` first")
    return bo.load_baseline()


# the example's configuration, and one whose small tiers send rows to disk
@pytest.mark.parametrize("tiers", [[], ["--hbm-mb", "0", "--ddr-mb", "0.1"]])
def test_example_ways_agree(store_dir, cb, tiers):
    ex = dlrm.parse_args(["--tables", "5", "--rows", "3000", "--hot", "400",
                          "--dim", "8"] + tiers)
    rows = dlrm.table_rows(ex)
    steps = 6
    batches = bo.example_batches(ex, 64, steps)
    stores, models = [], []
    for way in (0, 1):
        s, tables = bo.make_store(f"{store_dir}{way}", rows, ex.dim,
                                  int(ex.hbm_mb * 2**20),
                                  int(ex.ddr_mb * 2**20))
        stores.append((s, tables))
        models.append(bo.example_ways(cb, s, tables, batches, ex)[way])
    # the rows the batches touch, and as many they do not
    used = [np.unique(np.concatenate([b.ids[t].numpy() for b in batches]))
            .astype(np.uint64) for t in range(len(rows))]
    rng = np.random.default_rng(7)
    sample = [np.concatenate([u, rng.integers(0, r, len(u),
                                              dtype=np.uint64)])
              for u, r in zip(used, rows)]
    before = [t.gather(ids) for t, ids in zip(stores[0][1], sample)]
    dense0 = [p.detach().clone() for p in models[0][1].parameters()]
    for k in range(steps * 2 - 1):       # around the batches and on
        for step, _ in models:
            step(k % steps)
    after = [[t.gather(ids) for t, ids in zip(tables, sample)]
             for _, tables in stores]
    for t in range(len(rows)):
        np.testing.assert_array_equal(after[0][t], after[1][t])
        n = len(used[t])
        assert (after[0][t][:n] != before[t][:n]).any(axis=1).all(), \
            "a touched row was not updated"
    pa, pb = (list(m.parameters()) for _, m in models)
    assert len(pa) == len(pb) == len(dense0)
    for a, b, p0 in zip(pa, pb, dense0):
        assert torch.equal(a, b)
        assert not torch.equal(a, p0)
    for s, _ in stores:
        s.close()
