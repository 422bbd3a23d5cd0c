"""Keyed tables (ET_TABLE_KEYED) from Python: any int64 id is the u64 of
its bits (-1 is 2**64 - 1), in the numpy API and in the torch module,
which trains exactly as a dense torch.nn.EmbeddingBag over the same ids
remapped to 0..K-1."""

import os

import numpy as np
import pytest
import torch

import embtier
from embtier.nn import EmbeddingBagCollection

DIM, LR = 4, 0.1
# int64 ids, and the u64 ids they mean
EDGE = np.array([0, -1, -2**63, 2**63 - 1, 5, -5], np.int64)
EDGE_U = np.array([0, 2**64 - 1, 2**63, 2**63 - 1, 5, 2**64 - 5], np.uint64)


def open_store(d):
    return embtier.Store(d, ddr_bytes=4 << 20, hbm_bytes=2 << 10)


def test_keyed_store(store_dir):
    rng = np.random.default_rng(11)
    with open_store(store_dir) as s:
        k = s.create_table("k", keyed=True, dim=DIM, init="uniform", seed=9)
        f = s.create_table("f", flags=embtier.ET_TABLE_KEYED, dim=DIM,
                           optim="rowwise_adagrad", init="normal")
        r = s.create_table("r", rows=100, dim=DIM)
        assert k.keyed and f.keyed and not r.keyed
        assert k.rows == 0 and k.info()["flags"] == embtier.ET_TABLE_KEYED
        assert "keyed" in repr(k)

        # never-seen ids read as the initializer's, each its own row,
        # whatever the ids' type
        init = k.gather(EDGE)
        assert len({tuple(x) for x in init}) == len(EDGE)
        np.testing.assert_array_equal(k.gather(EDGE_U), init)
        np.testing.assert_array_equal(k.gather(torch.from_numpy(EDGE)), init)
        np.testing.assert_array_equal(k.gather(list(EDGE)), init)
        np.testing.assert_array_equal(
            k.gather(np.array([-1, 5, -5], np.int32)), init[[1, 4, 5]])
        np.testing.assert_array_equal(k.gather(EDGE[::-2]), init[::-2])

        # written with int64 ids, read with uint64 ones
        vals = rng.standard_normal((len(EDGE), DIM)).astype(np.float32)
        k.write_rows(EDGE, vals)
        np.testing.assert_array_equal(k.gather(EDGE_U), vals)
        np.testing.assert_array_equal(k.gather(EDGE), vals)
        # SGD, a repeated id's gradients summed
        ids = np.array([0, -1, -1, -2**63], np.int64)
        g = rng.standard_normal((4, DIM)).astype(np.float32)
        k.update(ids, g, lr=LR)
        want = vals.copy()
        want[0] -= LR * g[0]
        want[1] -= LR * (g[1] + g[2])
        want[2] -= LR * g[3]
        np.testing.assert_allclose(k.gather(EDGE_U), want, rtol=0, atol=1e-6)

        # pooled calls, prefetch and lookahead over random int64 ids
        fid = rng.integers(-2**63, 2**63 - 1, 40, dtype=np.int64,
                           endpoint=True)
        fid[:len(EDGE)] = EDGE
        offs = np.array([0, 3, 3, 10, 25, 40], np.int64)
        rows = f.gather(fid)
        want = np.stack([rows[a:b].sum(0) for a, b in zip(offs, offs[1:])])
        np.testing.assert_allclose(f.gather_pooled(fid, offs), want,
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(f.gather_pooled(fid.view(np.uint64),
                                                      offs),
                                      f.gather_pooled(fid, offs))
        s.prefetch({f: fid, k: torch.from_numpy(EDGE)})
        s.lookahead([{f: fid}, [(k, EDGE_U)]])
        f.update_pooled(fid, offs, rng.standard_normal((5, DIM)), lr=LR)
        assert not np.array_equal(f.gather(fid), rows)
        s.lookahead([])

        # erase: the ids read as the initializer's again
        assert k.erase(np.array([-1, 123456789, -1], np.int64)) == 1
        assert k.erase(np.array([2**64 - 1], np.uint64)) == 0
        assert k.erase(torch.tensor([-2**63])) == 1
        np.testing.assert_array_equal(k.gather([-1, -2**63]), init[[1, 2]])
        assert s.stats(k)["keys_erased"] == 2

        # admission: an id is stored from its second update call on; an
        # id already stored always is (row 0 was written just above and
        # is still only in a cache's dirty row)
        k.key_policy(admit_after=2)
        new = np.array([-7, 7, 2**62], np.int64)
        before = k.gather(new)
        stored0 = k.gather([0])
        g1 = rng.standard_normal((4, DIM)).astype(np.float32)
        k.update(np.append(new, 0), g1, lr=LR)
        assert s.stats(k)["keys_dropped"] == 3
        np.testing.assert_array_equal(k.gather(new), before)
        np.testing.assert_allclose(k.gather([0]), stored0 - LR * g1[3:],
                                   rtol=0, atol=1e-6)
        g2 = rng.standard_normal((2, DIM)).astype(np.float32)
        k.update(new[:2], g2, lr=LR)
        assert s.stats(k)["keys_dropped"] == 3
        np.testing.assert_allclose(k.gather(new[:2]), before[:2] - LR * g2,
                                   rtol=0, atol=1e-6)
        np.testing.assert_array_equal(k.gather(new[2:]), before[2:])

        # a row-indexed table refuses negative ids, erase and a policy
        with pytest.raises(embtier.EmbtierError) as e:
            r.gather(np.array([1, -1]))
        assert e.value.code == embtier.ET_EROWRANGE
        assert "18446744073709551615" in str(e.value)
        with pytest.raises(embtier.EmbtierError) as e:
            r.update([-2], np.ones((1, DIM)), lr=LR)
        assert e.value.code == embtier.ET_EROWRANGE
        with pytest.raises(embtier.EmbtierError) as e:
            r.erase([1])
        assert e.value.errno == 22  # EINVAL
        with pytest.raises(embtier.EmbtierError):
            r.key_policy(admit_after=2)
        with pytest.raises(embtier.EmbtierError) as e:
            k.gather(np.array([1.0, -1.0]))
        assert e.value.errno == 22

        s.checkpoint(b"dense")
        probe = np.concatenate([EDGE, new, [123456789, 2**62 + 1]])
        ref_k, ref_f = k.gather(probe), f.gather(fid)
        stored = np.sort(np.concatenate([EDGE[[0, 3, 4, 5]], new[:2]])
                         .view(np.uint64))

    # closed: the file lists its stored ids, as u64
    ids, vals, _ = embtier.read_rows(os.path.join(store_dir, "k.et"))
    np.testing.assert_array_equal(ids, stored)
    pos = {int(u): i for i, u in enumerate(probe.view(np.uint64))}
    np.testing.assert_array_equal(vals, ref_k[[pos[int(u)] for u in ids]])
    ids, _, state = embtier.read_rows(os.path.join(store_dir, "f.et"))
    assert ids.shape[0] == len(np.unique(fid)) and state.shape[1] == 1
    with pytest.raises(embtier.EmbtierError):
        embtier.read_rows(os.path.join(store_dir, "k.et"), written=False)

    with open_store(store_dir) as s:
        k = s.open_table("k", keyed=True)
        f = s.open_table("f")
        with pytest.raises(embtier.EmbtierError) as e:
            s.open_table("r", keyed=True)
        assert e.value.code == embtier.ET_EMISMATCH
        assert k.keyed and f.keyed
        assert s.checkpoint_read()[1] == b"dense"
        np.testing.assert_array_equal(k.gather(probe), ref_k)
        np.testing.assert_array_equal(f.gather(fid), ref_f)
        # expiry: a checkpoint erases the ids not updated since the last
        # one (the ids stored before expiry was set count as updated in
        # the next commit)
        k.key_policy(expire_after=1)
        for expired in (0, len(stored) - 1):
            k.update(np.array([-7]), np.zeros((1, DIM)), lr=LR)
            s.checkpoint()
            assert s.stats(k)["keys_expired"] == expired
        np.testing.assert_array_equal(k.gather(EDGE), init)
        np.testing.assert_array_equal(k.gather([-7]), ref_k[[len(EDGE)]])
        # a bound of one id: the oldest (-7) leaves, then of -8 and -9
        # (one commit) the smaller as u64, -9
        before = k.gather([-7, -8, -9])
        k.key_policy(max_keys=1)
        k.update(np.array([-8, -9]), np.ones((2, DIM)), lr=LR)
        s.checkpoint()
        assert s.stats(k)["keys_evicted"] == 2
        after = k.gather([-7, -8, -9])
        assert not np.array_equal(after[0], before[0])  # back to initial
        assert not np.array_equal(after[1], before[1])  # kept, updated
        np.testing.assert_array_equal(after[2], before[2])  # gone: initial
        # a bound of two by count (half_life 1000: no halving here): -8,
        # updated in two commits, outlasts -10 and -11 (one commit, the
        # newest); of those, the smaller as u64, -11, leaves
        k.key_policy(max_keys=2, half_life=1000)
        k.update(np.array([-8]), np.ones((1, DIM)), lr=LR)
        s.checkpoint()
        before = k.gather([-8, -10, -11])
        k.update(np.array([-10, -11]), np.ones((2, DIM)), lr=LR)
        s.checkpoint()
        assert s.stats(k)["keys_evicted"] == 3
        after = k.gather([-8, -10, -11])
        np.testing.assert_array_equal(after[0], before[0])  # kept
        assert not np.array_equal(after[1], before[1])  # kept, updated
        np.testing.assert_array_equal(after[2], before[2])  # gone: initial


def test_module_on_keyed_tables_against_dense(store_dir, calls):
    """The issue's acceptance test: EmbeddingBagCollection over keyed
    tables takes any int64 ids, negative ones too, and trains as a dense
    EmbeddingBag(mode='sum') with SGD over the same ids remapped to
    0..K-1, its weight the keyed tables' initial rows."""
    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    T, B, D = 3, 8, 6
    pool = np.concatenate([EDGE, rng.integers(-2**63, 2**63 - 1, 40,
                                              dtype=np.int64,
                                              endpoint=True)])
    steps = []
    for step in range(6):
        if step % 2:  # one id per bag, a [T, B] tensor
            ids = rng.choice(pool, (T, B))
            ids[step % T, :len(EDGE)] = EDGE
            steps.append((torch.from_numpy(ids), None))
            continue
        ids, offs = [], []
        for t in range(T):
            o = np.concatenate([[0], np.cumsum(rng.integers(0, 4, B))])
            i = rng.choice(pool, int(o[-1]))  # repeats too
            i[:min(len(EDGE), len(i))] = EDGE[:len(i)]
            ids.append(torch.from_numpy(i))
            offs.append(torch.from_numpy(o))
        steps.append((ids, offs))
    # each table's distinct ids, and its ids remapped to their index there
    keys = [np.unique(np.concatenate([i[t].numpy() for i, _ in steps]))
            for t in range(T)]

    def remap(t, i):
        return torch.from_numpy(np.searchsorted(keys[t], i.numpy()))

    with open_store(store_dir) as s:
        tables = [s.create_table(f"k{t}", keyed=True, dim=D, init="uniform",
                                 seed=t) for t in range(T)]
        ebc = EmbeddingBagCollection(s, tables, lr=LR)
        dense = [torch.nn.EmbeddingBag.from_pretrained(
            torch.from_numpy(tab.gather(keys[t])), freeze=False, mode="sum",
            include_last_offset=True) for t, tab in enumerate(tables)]
        opt = torch.optim.SGD([b.weight for b in dense], lr=LR)
        head = torch.randn(T, D)
        for ids, offs in steps:
            if offs is None:
                out = ebc(ids)
                ebc.prefetch(ids)
                offs = [torch.arange(B + 1)] * T
            else:
                out = ebc(ids, offs)
                ebc.prefetch(list(ids))
            ref = torch.stack([dense[t](remap(t, ids[t]), offs[t])
                               for t in range(T)])
            torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
            # a loss that gives every bag a different gradient
            loss = lambda y: ((y * head[:, None, :]).sum(2) ** 2).sum()
            loss(out).backward()
            loss(ref).backward()
            opt.step()
            opt.zero_grad()
        for t, tab in enumerate(tables):
            torch.testing.assert_close(torch.from_numpy(tab.gather(keys[t])),
                                       dense[t].weight.detach(), rtol=0,
                                       atol=1e-6)
            assert s.table_info(tab)["flags"] == embtier.ET_TABLE_KEYED
        # inference: the same rows, negative ids and uint64 arrays too
        ebc.eval()
        with torch.no_grad():
            edge = torch.from_numpy(np.tile(EDGE, (T, 1)))
            want = torch.stack([dense[t].weight[remap(t, edge[t])]
                                for t in range(T)])
            torch.testing.assert_close(ebc(edge), want, rtol=0, atol=1e-6)
            torch.testing.assert_close(
                ebc([EDGE_U] * T, [np.arange(len(EDGE) + 1)] * T), want,
                rtol=0, atol=1e-6)
