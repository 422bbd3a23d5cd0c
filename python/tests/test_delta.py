"""Deltas from Python (embtier.export_delta, embtier.apply_delta): a store
trained through the numpy API, its commits carried to a serving copy one
delta at a time, every row of the copy bit for bit the source's; a damaged
delta, or one that does not start where the copy stands, raises and
changes nothing."""

import os

import numpy as np
import pytest

import embtier

DIM, ROWS, LR = 4, 200, 0.1
# int64 ids, negative ones too (-1 is the u64 id 2**64 - 1)
KEYS = np.array([0, -1, -2**63, 2**63 - 1, 5, -5, 123456789, -987654321,
                 77, 1 << 40], np.int64)


def open_store(d):
    return embtier.Store(d, ddr_bytes=4 << 20)


def tables(s, create):
    if create:
        e = s.create_table("emb", rows=ROWS, dim=DIM, dtype="f16",
                           optim="rowwise_adagrad", init="uniform", seed=3)
        k = s.create_table("keys", keyed=True, dim=DIM,
                           optim="rowwise_adagrad", init="normal", seed=4)
    else:
        e = s.open_table("emb")
        k = s.open_table("keys", keyed=True)
    return e, k


def every_row(d):
    """Every row of both tables of the store directory d, offline: emb's
    all ROWS rows, keys' stored ids; (ids, values, state) each."""
    return {"emb": embtier.read_rows(os.path.join(d, "emb.et"),
                                     written=False),
            "keys": embtier.read_rows(os.path.join(d, "keys.et"))}


def assert_same_rows(a, b, state=True):
    for name in ("emb", "keys"):
        (ia, va, sa), (ib, vb, sb) = a[name], b[name]
        np.testing.assert_array_equal(ia, ib, err_msg=name)
        # bit for bit
        np.testing.assert_array_equal(va.view(np.uint32), vb.view(np.uint32),
                                      err_msg=name)
        if state:
            np.testing.assert_array_equal(sa.view(np.uint32),
                                          sb.view(np.uint32), err_msg=name)


def delta_state(d):
    p = os.path.join(d, "DELTA")
    with open(p, "rb") as f:
        return f.read()


@pytest.fixture
def dirs(store_dir):
    base = os.path.dirname(store_dir)
    return (store_dir, os.path.join(base, "copy"),
            lambda name: os.path.join(base, name))


def train_round1(s, e, k, rng):
    e.write_rows(np.arange(0, ROWS, 3),
                 rng.standard_normal((len(range(0, ROWS, 3)), DIM)))
    e.update(np.array([0, 3, 7, 7, 150]), rng.standard_normal((5, DIM)),
             lr=LR)
    k.write_rows(KEYS, rng.standard_normal((len(KEYS), DIM)))
    k.update(KEYS[:6], rng.standard_normal((6, DIM)), lr=LR)
    s.checkpoint(b"dense weights, round 1")


def train_round2(s, e, k, rng):
    e.update(np.array([1, 3, 199]), rng.standard_normal((3, DIM)), lr=LR)
    e.write_rows(np.array([10, 11]), rng.standard_normal((2, DIM)))
    # erased: -1, -2**63, 77; 5 erased, then written again
    assert k.erase(np.array([-1, -2**63, 77, 5, 424242], np.int64)) == 4
    k.write_rows(np.array([5, -42], np.int64),
                 rng.standard_normal((2, DIM)))
    k.update(np.array([0, 2**63 - 1], np.int64),
             rng.standard_normal((2, DIM)), lr=LR)
    s.checkpoint(np.arange(7, dtype=np.float32))


def test_delta_chain(dirs):
    src, copy, path = dirs
    rng = np.random.default_rng(5)
    erased = np.array([-1, -2**63, 77], np.int64)
    with open_store(src) as s:
        e, k = tables(s, True)
        init = k.gather(erased)  # the initializer's: never written yet
        train_round1(s, e, k, rng)
    c1 = embtier.checkpoint_info(src)["commit"]

    # since 0: every stored row, every table taken whole
    info = embtier.export_delta(src, 0, path("d1"), state=True)
    assert info["from_commit"] == 0 and info["to_commit"] == c1
    assert info["tables"] == 2 and info["whole"] == 2
    assert info["rows"] == len(range(0, ROWS, 3)) + 1 + len(KEYS)
    assert info["tombstones"] == 0
    assert info["flags"] == embtier.ET_DELTA_STATE
    assert info["bytes"] == os.path.getsize(path("d1"))
    got = embtier.apply_delta(path("d1"), copy)
    assert {k: got[k] for k in ("from_commit", "to_commit", "rows",
                                "tombstones", "bytes", "tables", "whole",
                                "flags")} == \
        {k: info[k] for k in ("from_commit", "to_commit", "rows",
                              "tombstones", "bytes", "tables", "whole",
                              "flags")}
    assert got["stale"] == 0
    assert_same_rows(every_row(copy), every_row(src))
    assert embtier.checkpoint_info(copy)["dense"] == \
        b"dense weights, round 1"

    # more training, erases, a second commit; the delta since the first
    with open_store(src) as s:
        e, k = tables(s, False)
        train_round2(s, e, k, rng)
    c2 = embtier.checkpoint_info(src)["commit"]
    assert c2 > c1
    info = embtier.export_delta(src, c1, path("d2"), state=True)
    assert info["from_commit"] == c1 and info["to_commit"] == c2
    assert info["whole"] == 0
    assert info["tombstones"] == 3  # -1, -2**63, 77 (5 written again)
    got = embtier.apply_delta(path("d2"), copy)
    assert got["rows"] == info["rows"] and got["tombstones"] == 3
    assert_same_rows(every_row(copy), every_row(src))
    assert embtier.checkpoint_info(copy)["dense"] == \
        np.arange(7, dtype=np.float32).tobytes()

    # the erased ids are gone from the copy and read as the initializer's
    ids = every_row(copy)["keys"][0]
    assert not np.isin(erased.view(np.uint64), ids).any()
    assert np.isin(np.array([5, -42], np.int64).view(np.uint64), ids).all()
    with open_store(copy) as s:
        _, k = tables(s, False)
        np.testing.assert_array_equal(k.gather(erased).view(np.uint32),
                                      init.view(np.uint32))

    # the same delta again: it no longer starts where the copy stands
    before = every_row(copy), delta_state(copy)
    with pytest.raises(embtier.EmbtierError) as ex:
        embtier.apply_delta(path("d2"), copy)
    assert ex.value.code == embtier.ET_EMISMATCH
    assert_same_rows(every_row(copy), before[0])
    assert delta_state(copy) == before[1]


def test_delta_whole_over_newer_copy(dirs):
    """A delta from 0 applies to any copy: over a copy at a later commit
    it takes every table back to the delta's commit exactly (the rows the
    delta lacks dropped), and the delta after it then applies."""
    src, copy, path = dirs
    rng = np.random.default_rng(8)
    with open_store(src) as s:
        e, k = tables(s, True)
        train_round1(s, e, k, rng)
    c1 = embtier.checkpoint_info(src)["commit"]
    embtier.export_delta(src, 0, path("d1"), state=True)
    at1 = every_row(src)
    with open_store(src) as s:
        train_round2(s, *tables(s, False), rng)
    embtier.export_delta(src, c1, path("d2"), state=True)
    embtier.export_delta(src, 0, path("d02"), state=True)
    embtier.apply_delta(path("d02"), copy)
    assert_same_rows(every_row(copy), every_row(src))
    # back to commit 1: emb's rows 1, 10, 11, 199 and keys' -42 dropped
    info = embtier.apply_delta(path("d1"), copy)
    assert info["stale"] == 5
    a = every_row(copy)
    np.testing.assert_array_equal(a["keys"][0], at1["keys"][0])
    np.testing.assert_array_equal(a["keys"][1].view(np.uint32),
                                  at1["keys"][1].view(np.uint32))
    np.testing.assert_array_equal(a["emb"][1].view(np.uint32),
                                  at1["emb"][1].view(np.uint32))
    embtier.apply_delta(path("d2"), copy)
    assert_same_rows(every_row(copy), every_row(src))


def test_delta_without_state(dirs):
    src, copy, path = dirs
    rng = np.random.default_rng(6)
    with open_store(src) as s:
        e, k = tables(s, True)
        train_round1(s, e, k, rng)
    c1 = embtier.checkpoint_info(src)["commit"]
    info = embtier.export_delta(src, 0, path("d1"))
    assert info["flags"] == 0
    embtier.apply_delta(path("d1"), copy)
    with open_store(src) as s:
        train_round2(s, *tables(s, False), rng)
    embtier.export_delta(src, c1, path("d2"))
    embtier.apply_delta(path("d2"), copy)
    a, b = every_row(copy), every_row(src)
    assert_same_rows(a, b, state=False)
    # no optimizer state carried: the copy's rows start theirs at zero
    assert not a["keys"][2].any() and b["keys"][2].any()


def test_delta_refused(dirs):
    src, copy, path = dirs
    rng = np.random.default_rng(7)
    with open_store(src) as s:
        e, k = tables(s, True)
        train_round1(s, e, k, rng)
    c1 = embtier.checkpoint_info(src)["commit"]
    embtier.export_delta(src, 0, path("d1"), state=True)
    with open_store(src) as s:
        train_round2(s, *tables(s, False), rng)
    embtier.export_delta(src, c1, path("d2"), state=True)

    # a delta is written to a new file
    with pytest.raises(embtier.EmbtierError) as ex:
        embtier.export_delta(src, c1, path("d2"))
    assert ex.value.errno == 17  # EEXIST
    # not from 0, so not to an empty copy
    with pytest.raises(embtier.EmbtierError) as ex:
        embtier.apply_delta(path("d2"), copy)
    assert ex.value.code == embtier.ET_EMISMATCH
    assert not os.path.exists(os.path.join(copy, "DELTA"))

    embtier.apply_delta(path("d1"), copy)
    before = every_row(copy), delta_state(copy), \
        embtier.checkpoint_info(copy)
    with open(path("d2"), "rb") as f:
        good = f.read()
    # damaged: a byte of a row flipped, the file cut, a byte added
    for i, bad in enumerate((good[:len(good) // 2] +
                             bytes([good[len(good) // 2] ^ 0x10]) +
                             good[len(good) // 2 + 1:],
                             good[:-1], good + b"\0")):
        p = path(f"bad{i}")
        with open(p, "wb") as f:
            f.write(bad)
        with pytest.raises(embtier.EmbtierError) as ex:
            embtier.apply_delta(p, copy)
        assert ex.value.code == embtier.ET_EDELTA
        assert ex.value.name == "ET_EDELTA"
        assert p in str(ex.value)  # et_errdetail names the file
        assert_same_rows(every_row(copy), before[0])
        assert delta_state(copy) == before[1]
        assert embtier.checkpoint_info(copy) == before[2]

    # the good one still applies, exactly
    embtier.apply_delta(path("d2"), copy)
    assert_same_rows(every_row(copy), every_row(src))


def test_serving_reads_during_applies(dirs):
    """embtier.Serving: a reader thread looks rows up while the main
    thread applies deltas; every lookup is one version, whole (each
    version writes every row with its own number), the one it names, and
    versions only go forward; erased keyed ids read as never written."""
    import threading

    src, copy, path = dirs
    n, versions = 2000, 4
    rows = np.arange(n, dtype=np.uint64)
    keys = np.array([0, -1, -2**63, 2**63 - 1, 77], np.int64)
    commits = {}
    with open_store(src) as s:
        e = s.create_table("emb", rows=n, dim=DIM, dtype="f32", seed=3)
        k = s.create_table("keys", keyed=True, dim=DIM, seed=4)
        init = k.gather(keys)
        for v in range(1, versions + 1):
            e.write_rows(rows, np.full((n, DIM), v, np.float32))
            k.write_rows(keys, np.full((len(keys), DIM), v, np.float32))
            if v % 2 == 0:
                k.erase(keys[:2])
            s.checkpoint(f"version {v}".encode())
            c = embtier.checkpoint_info(src)["commit"]
            # beside the live store, as a trainer exports
            embtier.export_delta(src, max(commits, default=0), path(f"d{c}"))
            commits[c] = v

    def want_keys(v):
        w = np.full((len(keys), DIM), v, np.float32)
        if v % 2 == 0:
            w[:2] = init[:2]
        return w

    with embtier.Serving(copy) as sv:
        assert sv.info()["tables"] == 0
        first = min(commits)
        sv.apply(path(f"d{first}"))
        seen, bad, stop = [], [], threading.Event()

        def reader():
            while not stop.is_set():
                vals, c = sv.lookup("emb", rows)
                v = commits.get(c, 0)
                if not v or not (vals == v).all():
                    bad.append(("emb", c))
                kv, c2 = sv.lookup("keys", keys)
                v2 = commits.get(c2, 0)
                if not v2 or not np.array_equal(kv, want_keys(v2)):
                    bad.append(("keys", c2))
                seen.append(v)

        th = threading.Thread(target=reader)
        th.start()
        for c in sorted(commits)[1:]:
            info = sv.apply(path(f"d{c}"))
            assert info["to_commit"] == c
        while not seen or seen[-1] != versions:
            if not th.is_alive():
                break
            threading.Event().wait(0.005)
        stop.set()
        th.join()
        assert not bad
        assert seen and seen == sorted(seen) and seen[-1] == versions
        dense, c = sv.dense()
        assert dense == f"version {versions}".encode()
        assert commits[c] == versions
        info = sv.info()
        assert info["applies"] == versions and info["tables"] == 2
        # one writer: a store cannot open the served directory
        with pytest.raises(embtier.EmbtierError) as ex:
            open_store(copy)
        assert ex.value.code == embtier.ET_ELOCKED
        # a damaged delta is refused, readers keep the version
        with open(path(f"d{first}"), "rb") as f:
            b = bytearray(f.read())
        b[len(b) // 2] ^= 1
        with open(path("bad"), "wb") as f:
            f.write(bytes(b))
        with pytest.raises(embtier.EmbtierError) as ex:
            sv.apply(path("bad"))
        assert ex.value.code == embtier.ET_EDELTA
        vals, c = sv.lookup("emb", rows)
        assert commits[c] == versions and (vals == versions).all()
        with pytest.raises(embtier.EmbtierError) as ex:
            sv.table("nope")
        assert ex.value.errno == 2  # ENOENT
