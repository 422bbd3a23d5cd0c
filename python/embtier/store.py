"""The numpy API: a Store of tables, rows in and out as numpy arrays.

Every method maps onto one call of include/embtier.h and keeps its
contract: results never depend on tier sizes, bad input changes nothing,
and an error raises EmbtierError carrying the library's code (a negative
errno or an ET_ code) and et_strerror's text.  Input arrays of the right
type and layout are passed to the library as they are, and so are `out`
arrays: with a preallocated out, a gather copies each row once, from the
cache straight into the caller's array.

Ids are uint64: uint64 arrays are passed as they are, int64 arrays (and
CPU torch tensors) are viewed as uint64 without a copy, and narrower
integer types are widened to int64 first.  So a negative id means its
two's-complement bits: -1 is 2**64 - 1, -2**63 is 2**63.  A keyed table
(create_table(..., keyed=True)) takes every such id, each its own row; a
row-indexed one refuses it as past its rows (ET_EROWRANGE, the id shown as
the u64 it is).  Values and gradients float32, C-contiguous.

A Store, like the C handle, is used by one thread at a time.
"""

import ctypes
import os
import errno as _errno

import numpy as np

from . import _abi
from ._abi import CONSTS, HEADER, lib

# ------------------------------------------------------------------ errors


def _error_names():
    names = {}
    for enum in HEADER.enums.values():
        if "ET_ERR_BASE" not in enum:
            continue
        for name, v in enum.items():
            if name not in ("ET_ERR_BASE", "ET_ERR_LAST"):
                names.setdefault(v, name)
    return names


ERROR_NAMES = _error_names()


def strerror(code):
    """et_strerror(code)."""
    return lib.et_strerror(int(code)).decode()


def errdetail():
    """et_errdetail(): what the last failing call of this thread said of
    its arguments ("" if nothing)."""
    return lib.et_errdetail().decode(errors="replace")


def error_name(code):
    """'ET_ENOTABLE', 'ENOENT', ... for a code the library returns."""
    if code in ERROR_NAMES:
        return ERROR_NAMES[code]
    return _errno.errorcode.get(-code, str(code))


class EmbtierError(Exception):
    """A call failed.  code: what the library returned (a negative errno or
    an ET_ code); errno: the positive errno, or None for an ET_ code;
    name: the code's symbolic name; message: et_strerror(code)."""

    def __init__(self, code, where="", detail=""):
        self.code = code
        self.name = error_name(code)
        self.message = strerror(code)
        self.errno = None if code in ERROR_NAMES else -code
        self.where = where
        text = f"{where}: " if where else ""
        text += f"{self.message} ({self.name} {code})"
        if not detail:
            # the failing call's own words, naming the bad argument
            detail = errdetail()
        if detail:
            text += f": {detail}"
        super().__init__(text)


def _check(ret, where):
    if ret:
        raise EmbtierError(ret, where)


def _einval(where, detail):
    return EmbtierError(-_errno.EINVAL, where, detail)


# ---------------------------------------------------------------- enums


def _enum_arg(struct, field, value):
    """An enum field from an int, its C name ('ET_POLICY_LFU') or its
    short name ('lfu'), the short names derived from the header."""
    if isinstance(value, str):
        members = HEADER.enum_values(HEADER.field_enum(struct, field))
        if value in members:
            return members[value]
        short = {k.lower(): v for k, v in _short_names(members).items()}
        if value.lower() in short:
            return short[value.lower()]
        raise _einval(f"{struct}.{field}",
                      f"{value!r} is none of {', '.join(sorted(short))}")
    return int(value)


def _short_names(members):
    """ET_POLICY_LRU, ET_POLICY_LFU -> LRU, LFU: the common prefix, cut
    after an underscore, removed."""
    names = list(members)
    if len(names) < 2:
        return {n.split("_", 1)[-1]: v for n, v in members.items()}
    pre = names[0]
    for n in names[1:]:
        while not n.startswith(pre):
            pre = pre[:-1]
    pre = pre[:pre.rfind("_") + 1]
    return {n[len(pre):]: v for n, v in members.items()}


def _struct(name, fields, where):
    args = {}
    for k, v in fields.items():
        if v is None:
            continue
        if HEADER.field_enum(name, k):
            v = _enum_arg(name, k, v)
        args[k] = v
    try:
        return _abi.new(name, **args)
    except TypeError as e:
        raise _einval(where, str(e)) from None


POOL = {"sum": CONSTS["ET_POOL_SUM"], "mean": CONSTS["ET_POOL_MEAN"]}


def _pool(mode):
    if isinstance(mode, str):
        try:
            return POOL[mode]
        except KeyError:
            raise _einval("mode", f"{mode!r}: 'sum' or 'mean'") from None
    return int(mode)


# --------------------------------------------------------------- arrays


def as_ids(a, where="ids"):
    """A 1-D C-contiguous uint64 view or copy of a: uint64 as it is, int64
    viewed as uint64 (a negative id is its u64 bits: -1 is 2**64 - 1),
    other integer types widened to int64 first; floats are refused."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
        if a.size == 0:
            a = a.astype(np.uint64)
    dt = a.dtype
    if dt is not _U64:
        if dt == np.int64 or dt == np.uint64:
            a = a.view(np.uint64) if a.flags.c_contiguous else \
                np.ascontiguousarray(a).view(np.uint64)
        elif dt.kind in "iu":
            a = a.astype(np.int64).view(np.uint64)
        else:
            raise _einval(where, f"integer ids expected, not {dt}")
    elif not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    if a.ndim != 1:
        raise _einval(where, f"a 1-D array expected, not shape {a.shape}")
    return a


_U64 = np.dtype(np.uint64)
_F32 = np.dtype(np.float32)


def as_f32(a, shape, where):
    """A C-contiguous float32 array of the given shape (converted if need
    be: this is input)."""
    if type(a) is not np.ndarray or a.dtype is not _F32 or \
            not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=np.float32)
    if a.shape != shape:
        if a.size == shape[0] * shape[1] and a.ndim >= 1 and \
                a.shape[-1] == shape[1]:
            a = a.reshape(shape)
        else:
            raise _einval(where, f"shape {shape} expected, not {a.shape}")
    return a


def check_out(out, shape, where):
    """out must be written in place: C-contiguous, writable float32."""
    if type(out) is not np.ndarray or out.dtype is not _F32 or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise _einval(where, "out must be a C-contiguous, writable float32 "
                      "numpy array")
    if out.shape != shape:
        raise _einval(where, f"out has shape {out.shape}, not {shape}")


def check_offsets(offsets, n, where):
    """Offsets of nbags + 1 entries, the first 0 and the last <= n (the
    library checks that they never decrease; it cannot know n)."""
    offsets = as_ids(offsets, where + ": offsets")
    if offsets.shape[0] < 1:
        raise _einval(where, "offsets needs nbags + 1 entries")
    if offsets.item(-1) > n:
        raise _einval(where, f"the last offset {offsets.item(-1)} is past "
                      f"the {n} ids")
    return offsets


def _ptr(a):
    return a.__array_interface__["data"][0]


# ----------------------------------------------------------------- store


def direct_bytes(tables, tier="ddr", **config):
    """et_direct_bytes: the bytes of tier ('ddr' or 'hbm') that give every
    row of the row-indexed tables a slot of its own (direct-mapped, the
    fastest: nothing evicted), in a store of config (Store's keywords;
    its capacities do not count).  tables: a list of dicts of
    create_table's keywords.  For Store(dir, ddr_bytes=direct_bytes(...))
    before the tables are created."""
    tiers = {"hbm": 0, "ddr": 1}
    if tier not in tiers:
        raise _einval("et_direct_bytes", f"tier {tier!r}: 'ddr' or 'hbm'")
    cfg = _struct("et_store_config", config, "et_direct_bytes")
    arr = (_abi.struct_class("et_table_params") * max(len(tables), 1))()
    for i, t in enumerate(tables):
        arr[i] = _struct("et_table_params", t, "et_direct_bytes")
    out = ctypes.c_uint64()
    _check(lib.et_direct_bytes(ctypes.byref(cfg), arr, len(tables),
                               tiers[tier], ctypes.byref(out)),
           "et_direct_bytes")
    return out.value


def checkpoint_info(path):
    """et_checkpoint_read_dir: the last checkpoint of the store directory
    path, read without opening the store: a dict of et_checkpoint_info's
    fields plus 'dense' (bytes)."""
    ci = _abi.new("et_checkpoint_info")
    dense = ctypes.c_void_p()
    n = ctypes.c_size_t()
    _check(lib.et_checkpoint_read_dir(os.fsencode(path), ctypes.byref(ci),
                                      ctypes.byref(dense), ctypes.byref(n)),
           "et_checkpoint_read_dir")
    try:
        data = ctypes.string_at(dense.value, n.value) if n.value else b""
    finally:
        _abi.libc_free(dense.value)
    d = _abi.to_dict(ci)
    d["dense"] = data
    return d


def read_rows(path, start=0, stop=None, written=True, chunk=1 << 16):
    """The rows of the table file at path with a stored value (written=True:
    what training or a load wrote, as of the store's last commit; the other
    rows are the initializer's), or every row of [start, stop) (written=
    False), as (ids uint64 (n,), values float32 (n, dim), state float32
    (n, state_floats)). Of a keyed table, rows is 2**64: written=True
    lists its stored ids, written=False needs a stop.  Best read while the
    store is closed: beside a live store, the open sees its last commit,
    and a later commit can make the reads fail their checksums or return a
    row's newer value."""
    tf = ctypes.c_void_p()
    _check(lib.et_tfile_open(os.fsencode(path), CONSTS["ET_TFILE_RDONLY"],
                             ctypes.byref(tf)), "et_tfile_open")
    try:
        info = _abi.new("et_table_info")
        _check(lib.et_tfile_info(tf, ctypes.byref(info)), "et_tfile_info")
        rows, dim, sf = info.rows, info.dim, info.state_floats
        if getattr(info, "flags", 0) & _KEYED:
            rows = 1 << 64  # any u64 id
            if stop is None and not written:
                raise _einval("read_rows", "a keyed table's every row: "
                              "give stop, or written=True")
        stop = rows if stop is None else min(int(stop), rows)
        start = int(start)
        if start < 0 or start > stop:
            raise _einval("read_rows", f"range [{start}, {stop}) of "
                          f"{rows} rows")
        if written:
            parts, buf, n = [], np.empty(chunk, np.uint64), ctypes.c_size_t()
            frm = start
            while frm < stop:
                _check(lib.et_tfile_rows(tf, frm, _ptr(buf), chunk,
                                         ctypes.byref(n)), "et_tfile_rows")
                got = buf[:n.value]
                if stop < 1 << 64:
                    got = got[got < stop]
                if got.size:
                    parts.append(got.copy())
                if n.value < chunk or got.size < n.value or \
                        int(got[-1]) + 1 >= stop:
                    break
                frm = int(got[-1]) + 1
            ids = np.concatenate(parts) if parts else \
                np.empty(0, np.uint64)
        else:
            ids = np.arange(start, stop, dtype=np.uint64)
        vals = np.empty((ids.shape[0], dim), np.float32)
        state = np.empty((ids.shape[0], sf), np.float32)
        if ids.shape[0]:
            _check(lib.et_tfile_read_rows(tf, _ptr(ids), ids.shape[0],
                                          _ptr(vals),
                                          _ptr(state) if sf else None),
                   "et_tfile_read_rows")
        return ids, vals, state
    finally:
        lib.et_tfile_close(tf)


def export_delta(dir, since, path, state=False):
    """et_delta_export: the delta of the store directory dir from its
    commit `since` (0: every stored row) to its last commit, written to
    the new file path (state=True: with each row's optimizer state,
    ET_DELTA_STATE).  Reads dir as a read-only opener does, so it may run
    beside a live store.  Returns a dict of et_delta_info's fields
    (from_commit, to_commit, rows, tombstones, bytes, tables, whole...)."""
    info = _abi.new("et_delta_info")
    flags = CONSTS["ET_DELTA_STATE"] if state else 0
    _check(lib.et_delta_export(os.fsencode(dir), int(since),
                               os.fsencode(path), flags,
                               ctypes.byref(info)), "et_delta_export")
    return _abi.to_dict(info)


def apply_delta(path, dir):
    """et_delta_apply: the delta file at path applied to the store
    directory dir (a serving copy, created if missing, not open
    elsewhere), committed once with the delta's dense state.  A damaged
    file (ET_EDELTA) or one that does not start where the copy stands
    (ET_EMISMATCH) raises EmbtierError and changes nothing.  Returns a
    dict of et_delta_info's fields (stale: rows of whole tables the copy
    had and the delta did not, dropped)."""
    info = _abi.new("et_delta_info")
    _check(lib.et_delta_apply(os.fsencode(path), os.fsencode(dir),
                              ctypes.byref(info)), "et_delta_apply")
    return _abi.to_dict(info)


class Serving:
    """A serving handle (et_serve_*): the store directory dir (a copy that
    deltas keep current; created empty if missing) opened for lookups
    only, its DIR/LOCK held until close, with a row cache of ddr_bytes
    (0: 256 MiB; cache=False: none).  apply(path) applies a delta
    while other threads go on calling lookup: the library's calls run
    without the GIL, and each lookup reads one version, the old or the
    new, never a mix; it returns the source commit its rows are of.

        with embtier.Serving("serving") as sv:
            vals, commit = sv.lookup("emb0", ids)   # any thread
            sv.apply("d.etd")                       # readers go on
    """

    def __init__(self, dir, ddr_bytes=0, cache=True):
        self._h = ctypes.c_void_p()
        self._dims = {}  # table number: dim, from table()
        self.dir = os.fspath(dir)
        cfg = _abi.new("et_serve_config")
        cfg.ddr_bytes = int(ddr_bytes)
        cfg.flags = 0 if cache else CONSTS["ET_SERVE_NO_CACHE"]
        _check(lib.et_serve_open(os.fsencode(self.dir), ctypes.byref(cfg),
                                 ctypes.byref(self._h)), "et_serve_open")

    def close(self):
        """et_serve_close; no call may be under way."""
        if self._h:
            lib.et_serve_close(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._h:
            raise _einval("Serving", "the handle is closed")
        return self._h

    def table(self, name):
        """(number, dict of et_table_info) of table name at the current
        version; EmbtierError ENOENT if it has none."""
        t = ctypes.c_int()
        info = _abi.new("et_table_info")
        _check(lib.et_serve_table(self._handle(), name.encode(),
                                  ctypes.byref(t), ctypes.byref(info)),
               "et_serve_table")
        info = _abi.to_dict(info)
        self._dims[t.value] = info["dim"]
        return t.value, info

    def lookup(self, table, ids, out=None):
        """The rows ids (row numbers, or any u64 of a keyed table; int64
        as their bits) of table (a name, or a number table() gave), as
        (float32 (n, dim), the source commit they are of)."""
        if isinstance(table, str):
            table, info = self.table(table)
            dim = info["dim"]
        elif int(table) in self._dims:
            dim = self._dims[int(table)]
        else:
            raise EmbtierError(-_errno.ENOENT, "Serving.lookup",
                               f"table {table}: not given by table()")
        ids = as_ids(ids, "Serving.lookup")
        n = ids.shape[0]
        if out is None:
            out = np.empty((n, dim), np.float32)
        else:
            check_out(out, (n, dim), "Serving.lookup")
        commit = ctypes.c_uint64()
        _check(lib.et_serve_lookup(self._handle(), int(table), _ptr(ids), n,
                                   _ptr(out), ctypes.byref(commit)),
               "et_serve_lookup")
        return out, commit.value

    def dense(self):
        """(bytes of the version's dense state, its source commit)."""
        n, commit = ctypes.c_size_t(), ctypes.c_uint64()
        _check(lib.et_serve_dense(self._handle(), None, 0, ctypes.byref(n),
                                  None), "et_serve_dense")
        while True:
            buf = ctypes.create_string_buffer(max(n.value, 1))
            size = n.value
            _check(lib.et_serve_dense(self._handle(), buf, size,
                                      ctypes.byref(n), ctypes.byref(commit)),
                   "et_serve_dense")
            if n.value <= size:  # not grown by an apply meanwhile
                return buf.raw[:n.value], commit.value

    def apply(self, path):
        """et_serve_apply: the delta at path applied (checked first, one
        commit), readers moved to the new version once it is in place.
        Returns a dict of et_delta_info's fields."""
        info = _abi.new("et_delta_info")
        _check(lib.et_serve_apply(self._handle(), os.fsencode(path),
                                  ctypes.byref(info)), "et_serve_apply")
        return _abi.to_dict(info)

    def info(self):
        """A dict of et_serve_info's fields (commit, store_commit,
        applies, index_bytes, dense_bytes, cache_bytes, cache_rows,
        cache_hits, cache_misses, tables)."""
        info = _abi.new("et_serve_info")
        _check(lib.et_serve_info(self._handle(), ctypes.byref(info)),
               "et_serve_info")
        return _abi.to_dict(info)


class Table:
    """A table of a store: id, name and its header fields (rows, dim,
    flags; keyed: whether its ids are any u64, rows then 0).  Store methods
    take a Table or its integer id."""

    __slots__ = ("store", "id", "name", "rows", "dim", "flags")

    def __init__(self, store, tid, name):
        self.store = store
        self.id = tid
        self.name = name
        info = store.table_info(tid)
        self.rows = info["rows"]
        self.dim = info["dim"]
        self.flags = info.get("flags", 0)

    @property
    def keyed(self):
        """ET_TABLE_KEYED: ids are any u64 (int64 ids: their bits)."""
        return bool(self.flags & _KEYED)

    def __index__(self):
        return self.id

    def __repr__(self):
        size = "keyed" if self.keyed else f"rows {self.rows}"
        return f"<embtier.Table {self.name!r} id {self.id} {size} " \
            f"dim {self.dim}>"

    def info(self):
        return self.store.table_info(self.id)

    def gather(self, ids, out=None):
        return self.store.gather(self.id, ids, out)

    def gather_pooled(self, ids, offsets, mode="sum", out=None):
        return self.store.gather_pooled(self.id, ids, offsets, mode, out)

    def update(self, ids, grads, lr, eps=0.0):
        return self.store.update(self.id, ids, grads, lr, eps)

    def update_pooled(self, ids, offsets, grads, lr, eps=0.0, mode="sum"):
        return self.store.update_pooled(self.id, ids, offsets, grads, lr,
                                        eps, mode)

    def write_rows(self, ids, vals, state=None):
        return self.store.write_rows(self.id, ids, vals, state)

    def erase(self, ids):
        return self.store.erase(self.id, ids)

    def key_policy(self, admit_after=0, filter_log2=0, expire_after=0,
                   max_keys=0, half_life=0, **more):
        return self.store.key_policy(self.id, admit_after, filter_log2,
                                     expire_after, max_keys, half_life,
                                     **more)


class Store:
    """An embtier store: Store(dir, hbm_bytes=..., ddr_bytes=...,
    hbm_policy='lru', ...), keywords as the fields of struct
    et_store_config (enum fields also take short names: 'lru', 'lfu',
    'sim', 'cuda').  A context manager: leaving it closes the store, which
    writes back every dirty row."""

    def __init__(self, path, **config):
        self._h = None
        cfg = _struct("et_store_config", config, "et_store_open")
        h = ctypes.c_void_p()
        _check(lib.et_store_open(_fsenc(path), ctypes.byref(cfg),
                                 ctypes.byref(h)), "et_store_open")
        self._h = h.value
        self.path = path
        self._dims = {}
        self._tables = {}
        self._up = _abi.new("et_update_params")
        self._up_ref = ctypes.byref(self._up)
        try:
            _check_stats_size(self._h)
        except Exception:
            self.close()
            raise

    # -- lifetime

    def close(self):
        """et_store_close: flushes and frees.  Closing twice is harmless."""
        h, self._h = self._h, None
        if h:
            _check(lib.et_store_close(h), "et_store_close")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_h", None):
            try:
                self.close()
            except Exception:
                pass

    @property
    def handle(self):
        """The et_store pointer, as an int (for ctypes callers)."""
        if not self._h:
            raise _einval("store", "the store is closed")
        return self._h

    # -- tables

    def create_table(self, name, keyed=False, **params):
        """et_table_create: keywords as struct et_table_params (dtype 'f32',
        'f16', 'bf16'; optim 'sgd', 'rowwise_adagrad'; init 'zeros',
        'uniform', 'normal'; flags).  keyed=True (or flags=ET_TABLE_KEYED),
        rows omitted: a keyed table, whose ids are any u64.  Returns a
        Table."""
        p = _struct("et_table_params", _keyed(params, keyed),
                    "et_table_create")
        tid = ctypes.c_int()
        _check(lib.et_table_create(self.handle, _name(name), ctypes.byref(p),
                                   ctypes.byref(tid)), "et_table_create")
        return self._register(tid.value, name)

    def open_table(self, name, keyed=False, **expect):
        """et_table_open; keywords given must match the file's header
        (else ET_EMISMATCH); keyed=True: the table must be keyed.  A keyed
        table's key_policy is not kept in it: set it again."""
        expect = _keyed(expect, keyed)
        p = _struct("et_table_params", expect, "et_table_open") \
            if expect else None
        tid = ctypes.c_int()
        _check(lib.et_table_open(self.handle, _name(name),
                                 ctypes.byref(p) if p is not None else None,
                                 ctypes.byref(tid)), "et_table_open")
        return self._register(tid.value, name)

    def _register(self, tid, name):
        t = Table(self, tid, name)
        self._dims[tid] = t.dim
        self._tables[name] = t
        return t

    @property
    def tables(self):
        """{name: Table} of the tables opened or created here."""
        return dict(self._tables)

    def table(self, name):
        return self._tables[name]

    def table_info(self, table):
        """et_table_info as a dict."""
        info = _abi.new("et_table_info")
        _check(lib.et_table_info(self.handle, int(table), ctypes.byref(info)),
               "et_table_info")
        return _abi.to_dict(info)

    def _dim(self, table, where):
        try:
            return self._dims[table]
        except KeyError:
            try:
                return self._dims[table.__index__()]
            except (AttributeError, KeyError):
                raise EmbtierError(CONSTS["ET_ENOTABLE"], where,
                                   f"table {table!r}") from None

    # -- rows

    def gather(self, table, ids, out=None):
        """et_gather: rows ids of table into out (n x dim float32, made if
        None); returns out."""
        dim = self._dim(table, "et_gather")
        ids = as_ids(ids)
        n = ids.shape[0]
        if out is None:
            out = np.empty((n, dim), np.float32)
        else:
            check_out(out, (n, dim), "et_gather")
        _check(lib.et_gather(self.handle, int(table), _ptr(ids), n,
                             _ptr(out)), "et_gather")
        return out

    def gather_pooled(self, table, ids, offsets, mode="sum", out=None):
        """et_gather_pooled: bag b is ids[offsets[b]:offsets[b + 1]]
        (offsets has nbags + 1 entries); out nbags x dim, made if None."""
        dim = self._dim(table, "et_gather_pooled")
        ids = as_ids(ids)
        offsets = check_offsets(offsets, ids.shape[0], "et_gather_pooled")
        nbags = offsets.shape[0] - 1
        if out is None:
            out = np.empty((nbags, dim), np.float32)
        else:
            check_out(out, (nbags, dim), "et_gather_pooled")
        _check(lib.et_gather_pooled(self.handle, int(table), _ptr(ids),
                                    _ptr(offsets), nbags, _pool(mode),
                                    _ptr(out)), "et_gather_pooled")
        return out

    def _update_params(self, lr, eps):
        self._up.lr = lr
        self._up.eps = eps
        return self._up_ref

    def update(self, table, ids, grads, lr, eps=0.0):
        """et_update: the table's optimizer applies grads (n x dim) to rows
        ids (a repeated id's gradients are summed)."""
        dim = self._dim(table, "et_update")
        ids = as_ids(ids)
        grads = as_f32(grads, (ids.shape[0], dim), "et_update")
        _check(lib.et_update(self.handle, int(table), _ptr(ids),
                             ids.shape[0], _ptr(grads),
                             self._update_params(lr, eps)), "et_update")

    def update_pooled(self, table, ids, offsets, grads, lr, eps=0.0,
                      mode="sum"):
        """et_update_pooled: the backward of gather_pooled with the
        table's optimizer; grads is nbags x dim."""
        dim = self._dim(table, "et_update_pooled")
        ids = as_ids(ids)
        offsets = check_offsets(offsets, ids.shape[0], "et_update_pooled")
        nbags = offsets.shape[0] - 1
        grads = as_f32(grads, (nbags, dim), "et_update_pooled")
        _check(lib.et_update_pooled(self.handle, int(table), _ptr(ids),
                                    _ptr(offsets), nbags, _pool(mode),
                                    _ptr(grads),
                                    self._update_params(lr, eps)),
               "et_update_pooled")

    def write_rows(self, table, ids, vals, state=None):
        """et_write_rows: overwrite the values (n x dim) of rows ids; with
        state (n x the table's state floats), et_write_rows_state: their
        optimizer state too (as read_rows returns it)."""
        dim = self._dim(table, "et_write_rows")
        ids = as_ids(ids)
        vals = as_f32(vals, (ids.shape[0], dim), "et_write_rows")
        if state is None:
            _check(lib.et_write_rows(self.handle, int(table), _ptr(ids),
                                     ids.shape[0], _ptr(vals)),
                   "et_write_rows")
            return
        sf = self.table_info(table)["state_floats"]
        state = as_f32(state, (ids.shape[0], sf), "et_write_rows_state") \
            if sf else np.zeros(1, np.float32)
        _check(lib.et_write_rows_state(self.handle, int(table), _ptr(ids),
                                       ids.shape[0], _ptr(vals),
                                       _ptr(state)),
               "et_write_rows_state")

    def erase(self, table, ids):
        """et_erase of a keyed table: the ids read as the initializer's
        again (durable from the next checkpoint).  Returns how many of
        them (distinct) were stored."""
        self._dim(table, "et_erase")
        ids = as_ids(ids)
        erased = ctypes.c_uint64()
        _check(lib.et_erase(self.handle, int(table), _ptr(ids), ids.shape[0],
                            ctypes.byref(erased)), "et_erase")
        return erased.value

    def key_policy(self, table, admit_after=0, filter_log2=0, expire_after=0,
                   max_keys=0, half_life=0, **more):
        """et_key_policy_set of a keyed table (zeros: off): an update
        stores an id only from its admit_after-th update call on (until
        then its gradients are dropped, stats' keys_dropped), counted in a
        filter of 2**filter_log2 x 4 counters; each checkpoint erases the
        ids not updated or written in the last expire_after commits
        (keys_expired), then the ids updated longest ago beyond max_keys
        (keys_evicted), or with half_life H the ids of the lowest decayed
        count of commits they were updated in (a commit's weight halving
        every H commits).  Set it again after a reopen: the filter's
        counts and the ids' ages and scores come back as last
        committed."""
        self._dim(table, "et_key_policy_set")
        kp = _struct("et_key_policy", dict(admit_after=admit_after,
                                           filter_log2=filter_log2,
                                           expire_after=expire_after,
                                           max_keys=max_keys,
                                           half_life=half_life,
                                           **more), "et_key_policy_set")
        _check(lib.et_key_policy_set(self.handle, int(table),
                                     ctypes.byref(kp)), "et_key_policy_set")

    def prefetch(self, batch):
        """et_prefetch of the next batch: {table: ids} or [(table, ids)],
        any number of tables; returns at once."""
        keep = []
        arr, n = self._batch_ids(batch, "et_prefetch", keep)
        _check(lib.et_prefetch(self.handle, arr, n), "et_prefetch")

    def _batch_ids(self, batch, where, keep):
        """An et_batch_ids array of batch ({table: ids} or [(table, ids)])
        and its length; the id arrays it points to are appended to keep."""
        items = list(batch.items() if isinstance(batch, dict) else batch)
        arr = _batch_array(max(1, len(items)))()
        for i, (t, ids) in enumerate(items):
            self._dim(t, where)
            ids = as_ids(ids, f"{where}: ids")
            keep.append(ids)
            arr[i].table = int(t)
            arr[i].ids = _ptr(ids)
            arr[i].n = ids.shape[0]
        return arr, len(items)

    def lookahead(self, batches):
        """et_lookahead: the ids of the next batches, the next one first,
        each as prefetch takes a batch ({table: ids} or [(table, ids)]);
        replaces the store's window ([] clears it)."""
        batches = list(batches)
        win = (_abi.struct_class("et_batch") * max(1, len(batches)))()
        keep = []
        for b, batch in enumerate(batches):
            arr, n = self._batch_ids(batch, "et_lookahead", keep)
            keep.append(arr)
            win[b].tables = ctypes.cast(arr, ctypes.c_void_p)
            win[b].ntables = n
        _check(lib.et_lookahead(self.handle, win, len(batches)),
               "et_lookahead")

    # -- durability

    def flush(self):
        """et_flush: write back every dirty row and sync."""
        _check(lib.et_flush(self.handle), "et_flush")

    def checkpoint(self, dense=b""):
        """et_checkpoint, with dense (any bytes-like: bytes, a numpy
        array...) saved beside the tables, atomically."""
        mv = memoryview(dense)
        raw = mv.cast("B") if mv.c_contiguous else mv.tobytes()
        buf = np.frombuffer(raw, np.uint8) if len(raw) else None
        _check(lib.et_checkpoint(self.handle,
                                 _ptr(buf) if buf is not None else None,
                                 buf.shape[0] if buf is not None else 0),
               "et_checkpoint")

    def checkpoint_read(self):
        """et_checkpoint_read: (id, dense bytes) of the last checkpoint;
        id 0 (and b'') if there is none."""
        cid = ctypes.c_uint64()
        dense = ctypes.c_void_p()
        n = ctypes.c_size_t()
        _check(lib.et_checkpoint_read(self.handle, ctypes.byref(cid),
                                      ctypes.byref(dense), ctypes.byref(n)),
               "et_checkpoint_read")
        try:
            data = ctypes.string_at(dense.value, n.value) if dense.value \
                else b""
        finally:
            _abi.libc_free(dense.value)
        return cid.value, data

    # -- counters

    def stats(self, table=None):
        """et_get_stats as a dict (hbm and ddr as dicts of struct
        et_tier_stats): the whole store, or one table."""
        st = _abi.new("et_stats")
        _check(lib.et_get_stats(self.handle, -1 if table is None
                                else int(table), ctypes.byref(st)),
               "et_get_stats")
        return _abi.to_dict(st)


_BATCH_TYPES = {}


def _batch_array(n):
    t = _BATCH_TYPES.get(n)
    if t is None:
        t = _BATCH_TYPES[n] = _abi.struct_class("et_batch_ids") * n
    return t


_KEYED = CONSTS.get("ET_TABLE_KEYED", 0)


def _keyed(params, keyed):
    """params with ET_TABLE_KEYED or'ed into flags if keyed."""
    if not keyed:
        return params
    if not _KEYED:
        raise _einval("keyed", f"{HEADER.path} has no ET_TABLE_KEYED")
    params = dict(params)
    params["flags"] = int(params.get("flags") or 0) | _KEYED
    return params


def _fsenc(path):
    import os
    return os.fsencode(path)


def _name(name):
    if not isinstance(name, str):
        raise _einval("table name", f"a str expected, not {name!r}")
    return name.encode()


def _check_stats_size(h):
    """The library writes sizeof(struct et_stats) bytes: it must be the
    size parsed from the header, else the bindings would misread it."""
    size = ctypes.sizeof(_abi.struct_class("et_stats"))
    buf = (ctypes.c_ubyte * (size + _abi.PAD))()
    ctypes.memset(buf, 0xA5, len(buf))
    _check(lib.et_get_stats(h, -1, buf), "et_get_stats")
    raw = bytes(buf)
    if raw[size:] != b"\xa5" * _abi.PAD or raw[size - 8:size] == \
            b"\xa5" * 8:
        raise ImportError(f"embtier: struct et_stats of {_abi.LIB_PATH} is "
                          f"not the {size} bytes of {HEADER.path}: header "
                          f"and library differ")
