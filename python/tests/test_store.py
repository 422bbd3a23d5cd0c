"""The numpy API against numpy: round trips, pooling, updates, prefetch,
durability, stats and errors."""

import re
import errno
import os

import numpy as np
import pytest

import embtier
from embtier import _abi


def open_store(d, **kw):
    kw.setdefault("ddr_bytes", 4 << 20)
    return embtier.Store(d, **kw)


def test_constants_come_from_the_header():
    h = _abi.Header(embtier.HEADER_PATH)
    assert embtier.ET_ENOTABLE == h.consts["ET_ENOTABLE"] < 0
    assert embtier.ET_POOL_MEAN == h.consts["ET_POOL_MEAN"]
    assert embtier.ET_MAX_ROWS == 1 << 40
    assert embtier.error_name(embtier.ET_EROWRANGE) == "ET_EROWRANGE"
    assert embtier.error_name(-errno.ENOENT) == "ENOENT"


def test_header_changes_are_followed(tmp_path):
    """A new et_tier_stats field and renumbered codes need no edit here."""
    with open(embtier.HEADER_PATH) as f:
        text = f.read()
    text = text.replace("uint64_t evictions;",
                        "uint64_t evictions;\n\tuint64_t new_counter; /* x */")
    text = re.sub(r"ET_ERR_BASE = -\d+", "ET_ERR_BASE = -5000", text)
    text = re.sub(r"ET_EMAGIC = -\d+", "ET_EMAGIC = ET_ERR_BASE - 1", text)
    # fields of other kinds: arrays, function pointers, unknown types
    text = text.replace("struct et_batch_ids {", """struct et_more {
	char name[ET_MAX_DIM / 1024];
	et_progress_fn progress;
	int (*fn)(void *arg, int x);
	unsigned int u, v[2];
};
struct et_odd {
	mystery_t m;
};
struct et_batch_ids {""")
    p = tmp_path / "embtier.h"
    p.write_text(text)
    h = _abi.Header(str(p))
    s = h.build_structs()
    names = [f[0] for f in s["et_tier_stats"]._fields_]
    assert names[names.index("evictions") + 1] == "new_counter"
    old = _abi.STRUCTS["et_stats"]
    import ctypes
    assert ctypes.sizeof(s["et_stats"]) == ctypes.sizeof(old) + 16
    assert h.consts["ET_EMAGIC"] == -5001
    more = s["et_more"]
    assert ctypes.sizeof(more) == 64 + 8 + 8 + 4 + 8 + 4  # + padding
    assert [f[0] for f in more._fields_] == ["name", "progress", "fn", "u",
                                              "v"]
    assert "et_odd" not in s and "mystery_t" in h.bad["et_odd"]


def test_round_trip(store_dir):
    rng = np.random.default_rng(1)
    with open_store(store_dir) as s:
        t = s.create_table("a", rows=5000, dim=12, init="normal", seed=7)
        assert (t.rows, t.dim) == (5000, 12)
        ref = t.gather(np.arange(5000))
        ids = rng.integers(0, 5000, 700)
        vals = rng.standard_normal((700, 12)).astype(np.float32)
        t.write_rows(ids, vals)
        # the last occurrence of a repeated id wins
        last = {}
        for k, i in enumerate(ids):
            last[i] = k
        for i, k in last.items():
            ref[i] = vals[k]
        q = rng.integers(0, 5000, 3000)
        out = np.empty((3000, 12), np.float32)
        got = t.gather(q, out=out)
        assert got is out
        np.testing.assert_array_equal(out, ref[q])
        # any integer array, list or int64 tensor-like works as ids
        np.testing.assert_array_equal(t.gather(list(q[:5])), ref[q[:5]])
        np.testing.assert_array_equal(t.gather(q[:5].astype(np.int32)),
                                      ref[q[:5]])
        np.testing.assert_array_equal(t.gather(q[::2]), ref[q[::2]])
    # closing flushed: a new store sees the same rows
    with open_store(store_dir) as s:
        t = s.open_table("a", dim=12)
        np.testing.assert_array_equal(t.gather(np.arange(5000)), ref)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_pooled_against_numpy(store_dir, mode):
    rng = np.random.default_rng(2)
    with open_store(store_dir) as s:
        t = s.create_table("p", rows=300, dim=5, init="uniform", seed=3)
        w = t.gather(np.arange(300)).astype(np.float64)
        lens = rng.integers(0, 6, 40)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint64)
        ids = rng.integers(0, 300, int(offsets[-1])).astype(np.int64)
        out = t.gather_pooled(ids, offsets, mode=mode)
        for b in range(40):
            rows = w[ids[offsets[b]:offsets[b + 1]]]
            want = rows.sum(0) if mode == "sum" else \
                (rows.mean(0) if len(rows) else np.zeros(5))
            np.testing.assert_allclose(out[b], want, rtol=1e-5, atol=1e-6)


def test_update_sgd_and_adagrad(store_dir):
    rng = np.random.default_rng(3)
    # slots are sized by the first table: the larger rows (with state) first
    with open_store(store_dir) as s:
        ada = s.create_table("ada", rows=100, dim=4,
                             optim=embtier.ET_OPT_ROWWISE_ADAGRAD,
                             init="uniform")
        sgd = s.create_table("sgd", rows=100, dim=4, optim="sgd",
                             init="uniform")
        w_sgd = sgd.gather(np.arange(100)).astype(np.float64)
        w_ada = ada.gather(np.arange(100)).astype(np.float64)
        m = np.zeros(100)
        for step in range(3):
            ids = rng.integers(0, 100, 50)
            g = rng.standard_normal((50, 4)).astype(np.float32)
            dense = np.zeros((100, 4))
            np.add.at(dense, ids, g.astype(np.float64))
            sgd.update(ids, g, lr=0.1)
            ada.update(ids, g, lr=0.1)
            w_sgd -= 0.1 * dense
            touched = np.unique(ids)
            m[touched] += (dense[touched] ** 2).mean(1)
            w_ada[touched] -= 0.1 * dense[touched] / \
                (np.sqrt(m[touched, None]) + 1e-8)
        np.testing.assert_allclose(sgd.gather(np.arange(100)), w_sgd,
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ada.gather(np.arange(100)), w_ada,
                                   rtol=1e-5, atol=1e-6)


def test_prefetch_changes_nothing_but_speed(store_dir):
    rng = np.random.default_rng(4)
    with open_store(store_dir, hbm_bytes=64 << 10) as s:
        a = s.create_table("a", rows=10000, dim=8, init="uniform")
        b = s.create_table("b", rows=10000, dim=8, init="uniform", seed=1)
        ref_a = a.gather(np.arange(10000))
        batches = [rng.integers(0, 10000, 256) for _ in range(6)]
        for k, ids in enumerate(batches):
            if k + 1 < len(batches):
                s.prefetch({a: batches[k + 1], b.id: batches[k + 1]})
            np.testing.assert_array_equal(a.gather(ids), ref_a[ids])
        st = s.stats()
        assert st["prefetch_calls"] == 5
        assert st["prefetch_rows"] > 0
        s.prefetch([(a, [1, 2, 3])])


@pytest.mark.parametrize("policy", ["tinylfu", "wtinylfu"])
def test_lookahead_and_frequency_policies_change_nothing(store_dir, policy):
    rng = np.random.default_rng(5)
    with open_store(store_dir, ddr_bytes=16 * 1024, ddr_policy=policy) as s:
        a = s.create_table("a", rows=10000, dim=8, init="uniform")
        ref = a.gather(np.arange(10000))
        batches = [rng.integers(0, 2000, 128) for _ in range(8)]
        for k, ids in enumerate(batches):
            s.lookahead([{a: b} for b in batches[k:k + 4]])
            np.testing.assert_array_equal(a.gather(ids), ref[ids])
        s.lookahead([])
        with pytest.raises(embtier.EmbtierError) as e:
            s.lookahead([{a: [1]}] * 33)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(embtier.EmbtierError) as e:
            s.lookahead([{a: [10000]}])
        assert e.value.name == "ET_EROWRANGE"


def test_stats_is_every_field(store_dir):
    with open_store(store_dir, hbm_bytes=1 << 20) as s:
        t = s.create_table("a", rows=1000, dim=8)
        t.gather([1, 2, 2])
        st = s.stats()
        one = s.stats(t)
        fields = [f for f, _ in _abi.STRUCTS["et_stats"]._fields_]
        tier = [f for f, _ in _abi.STRUCTS["et_tier_stats"]._fields_]
        assert list(st) == fields
        assert list(st["hbm"]) == tier and list(st["ddr"]) == tier
        assert st["requested"] == one["requested"] == 3
        assert st["unique"] == 2
        assert st["hbm"]["capacity_rows"] > 0
        assert st["mem_bytes"] > 0


def test_direct_bytes_sizes_a_direct_tier(store_dir):
    tables = [dict(rows=1000, dim=16), dict(rows=300, dim=8, dtype="f16"),
              dict(rows=700, dim=16, optim="rowwise_adagrad")]
    b = embtier.direct_bytes(tables, ways=8)
    with embtier.Store(store_dir, ddr_bytes=b, ways=8) as s:
        for i, t in enumerate(tables):
            s.create_table(f"t{i}", **t)
        assert s.stats()["ddr"]["direct_rows"] == 2000
    with pytest.raises(embtier.EmbtierError) as e:
        embtier.direct_bytes(tables, tier="l3")
    assert e.value.code == -22
    with pytest.raises(embtier.EmbtierError) as e:
        embtier.direct_bytes([dict(dim=8, flags=embtier.ET_TABLE_KEYED)])
    assert e.value.code == embtier.ET_ECONFIG


def test_checkpoint(store_dir):
    dense = np.arange(1000, dtype=np.float32)
    with open_store(store_dir) as s:
        assert s.checkpoint_read() == (0, b"")
        t = s.create_table("a", rows=100, dim=4)
        t.write_rows([5], np.ones((1, 4)))
        s.checkpoint(dense)
        cid, blob = s.checkpoint_read()
        assert cid == 1
        np.testing.assert_array_equal(np.frombuffer(blob, np.float32), dense)
        s.checkpoint(b"two")
        assert s.checkpoint_read() == (2, b"two")
        s.checkpoint()
        assert s.checkpoint_read() == (3, b"")
        two_d = np.arange(12, dtype=np.float32).reshape(3, 4)
        s.checkpoint(two_d[:, ::2])  # not contiguous: its bytes in order
        assert s.checkpoint_read()[1] == two_d[:, ::2].tobytes()
        s.flush()


def test_read_rows_and_restore(store_dir, tmp_path):
    """A trained table read offline (embtier.read_rows: only the rows it
    holds a value for, as of the last commit, with their optimizer state)
    and restored whole into another store (write_rows with state): the
    same rows, and the same bits after one more identical update."""
    ids = np.array([7, 3, 1 << 30, 99], np.uint64)
    g = np.linspace(-1, 1, 4 * 8, dtype=np.float32).reshape(4, 8)
    with open_store(store_dir) as s:
        t = s.create_table("a", rows=1 << 31, dim=8, dtype="f16",
                           optim="rowwise_adagrad", init="uniform")
        t.update(ids, g, lr=0.1)
        s.checkpoint(b"d")
        t.update(ids[:1] + 1, g[:1], lr=0.1)  # after it: not committed
        s.flush()
        info = embtier.checkpoint_info(store_dir)
        assert info["id"] == 1 and not info["tables_moved"]
        assert info["dense"] == b"d"
        got, vals, state = embtier.read_rows(os.path.join(store_dir, "a.et"))
        np.testing.assert_array_equal(got, np.sort(ids))
        np.testing.assert_array_equal(vals, t.gather(got))
        assert state.shape == (4, 1) and (state > 0).all()
        part = embtier.read_rows(os.path.join(store_dir, "a.et"), 4, 100)
        np.testing.assert_array_equal(part[0], [7, 99])
        allr = embtier.read_rows(os.path.join(store_dir, "a.et"), 0, 10,
                                 written=False)
        assert allr[0].shape == (10,) and allr[1].shape == (10, 8)
    other = str(tmp_path / "other")
    os.mkdir(other)
    with open_store(other) as s2:
        t2 = s2.create_table("a", rows=1 << 31, dim=8, dtype="f16",
                             optim="rowwise_adagrad", init="uniform")
        t2.write_rows(got, vals, state)
        np.testing.assert_array_equal(t2.gather(got), vals)
        t2.update(got, g, lr=0.1)
        mine = t2.gather(got)
    with open_store(store_dir) as s:
        t = s.open_table("a")
        t.update(got, g, lr=0.1)
        # the row updated after the checkpoint was committed by the close
        keep = got != ids[0] + 1
        np.testing.assert_array_equal(t.gather(got)[keep], mine[keep])
    with pytest.raises(embtier.EmbtierError):
        embtier.read_rows(os.path.join(store_dir, "none.et"))


def expect_error(code, fn, *args, **kw):
    with pytest.raises(embtier.EmbtierError) as e:
        fn(*args, **kw)
    assert e.value.code == code
    assert e.value.message == embtier.strerror(code)
    assert e.value.message in str(e.value)
    return e.value


def test_errors_carry_code_and_message(store_dir):
    with open_store(store_dir) as s:
        t = s.create_table("a", rows=100, dim=4, init="uniform")
        before = t.gather(np.arange(100))
        e = expect_error(embtier.ET_EROWRANGE, t.gather, [1, 100])
        assert e.name == "ET_EROWRANGE" and e.errno is None
        expect_error(embtier.ET_EROWRANGE, t.gather, np.array([-1]))
        expect_error(embtier.ET_EROWRANGE, t.update, [5, 100],
                     np.ones((2, 4)), lr=1.0)
        expect_error(embtier.ET_EROWRANGE, t.write_rows, [100],
                     np.ones((1, 4)))
        expect_error(embtier.ET_ENOTABLE, s.gather, 9, [1])
        expect_error(-errno.EINVAL, t.gather, [1], out=np.empty((1, 5),
                                                               np.float32))
        expect_error(-errno.EINVAL, t.update, [1], np.ones((1, 3)), lr=1)
        e = expect_error(-errno.EINVAL, t.gather_pooled, [1, 2], [0, 3])
        assert e.errno == errno.EINVAL and e.name == "EINVAL"
        expect_error(-errno.EINVAL, t.gather_pooled, [1, 2], [0, 2, 1])
        expect_error(-errno.EINVAL, t.gather_pooled, [1, 2], [1, 2])
        expect_error(-errno.EINVAL, t.gather, [1.5])
        expect_error(-errno.EINVAL, t.gather, [1], out=np.empty((1, 4)))
        e = expect_error(-errno.EEXIST, s.create_table, "a", rows=10, dim=4)
        assert e.errno == errno.EEXIST
        expect_error(-errno.ENOENT, s.open_table, "missing")
        # "a" is open: a second open is refused before its file is read
        expect_error(-errno.EEXIST, s.open_table, "a", dim=8)
        expect_error(-errno.EINVAL, s.create_table, "b", rows=10, dim=4,
                     optim="momentum")
        expect_error(-errno.EINVAL, s.create_table, "b", rows=10, dims=4)
        # nothing changed
        np.testing.assert_array_equal(t.gather(np.arange(100)), before)
    expect_error(embtier.ET_ECONFIG, embtier.Store, store_dir, ways=65)
    f = os.path.join(os.path.dirname(store_dir), "file")
    open(f, "w").close()
    expect_error(-errno.ENOTDIR, embtier.Store, f)
    s = open_store(store_dir)
    s.close()
    s.close()
    expect_error(-errno.EINVAL, s.flush)


def test_corrupt_table_file(store_dir):
    with open_store(store_dir) as s:
        s.create_table("a", rows=100, dim=4)
    with open(os.path.join(store_dir, "a.et"), "r+b") as f:
        f.write(b"garbage!")
    with open_store(store_dir) as s:
        expect_error(embtier.ET_EMAGIC, s.open_table, "a")
