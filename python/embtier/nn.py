"""The PyTorch module: a collection of embedding bags whose weights live in
an embtier store and whose backward is the store's fused optimizer.

    ebc = EmbeddingBagCollection(store, tables, lr=0.05)
    pooled = ebc(ids, offsets)      # [T, B, D]: bag b of table t
    loss(model(pooled)).backward()  # the store's rows are updated here
    ebc.prefetch(next_ids)          # the next batch's rows, one step ahead

As in FBGEMM's table-batched embedding with a fused optimizer, the
weights are not torch parameters and no dense gradient is ever made: the
forward is one et_gather_pooled per table into one output tensor, and the
backward hands each table's slice of the output's gradient to
et_update_pooled, which applies the table's optimizer (SGD or row-wise
Adagrad, fixed when the table was created) with this module's lr and eps,
then returns no gradient for the weights.  The update happens when
backward() reaches the module, so an optimizer step for the dense part
and the embedding update belong to the same batch.

Inputs per table t: ids[t], a 1-D int64 tensor, and offsets[t], nbags + 1
int64 entries (bag b is ids[offsets[b]:offsets[b + 1]], as torch's
EmbeddingBag with include_last_offset=True); or offsets None with one id
per bag; or ids a 2-D [T, B] tensor, one id per bag and table.  Every
table has the same number of bags B.  The output is [T, B, D] when all
tables have dim D, else a tuple of [B, D_t] tensors.

Ids are passed to the library as the u64 bits of their int64 values (no
copy but the one the backward needs): the tables may be keyed
(Store.create_table(..., keyed=True)), where any int64 id is a row of its
own, -1 being 2**64 - 1; a row-indexed table refuses a negative id as
out of range (ET_EROWRANGE).  Per-table ids may also be uint64 numpy
arrays.
"""

import ctypes
import re
import weakref

import numpy as np
import torch

from . import _abi
from .store import (EmbtierError, Table, _einval, _pool, _ptr, as_ids,
                    check_offsets, errdetail)
from ._abi import lib

__all__ = ["EmbeddingBagCollection"]


def _as_np(x):
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            x = x.cpu()
        return x.detach().numpy()
    return x


_TWICE = "EmbeddingBagCollection: a second backward through the same " \
    "forward (the rows were updated by the first)"


class _Lookup(torch.autograd.Function):
    """forward: pooled gathers; backward: fused updates, no gradient."""

    @staticmethod
    def forward(ctx, anchor, ebc, batch):
        ctx.ebc = ebc
        ctx.batch = batch
        return ebc._gather(batch)

    @staticmethod
    def backward(ctx, grad):
        if ctx.batch is None:
            raise RuntimeError(_TWICE)
        batch, ctx.batch = ctx.batch, None
        ctx.ebc._update(batch, grad)
        return None, None, None


class _Lookup2D(torch.autograd.Function):
    """The same for a [T, B] int64 tensor of ids (the common case), with
    one C call each way through the module's plan (_tables.c): the forward
    copies the ids into a buffer of the module's pool and gathers from
    it; the backward updates the rows of that copy and only then gives
    the buffer back to the pool, so a later forward can never overwrite
    ids a pending backward still needs (a graph dropped without backward
    keeps its buffer, which goes with it).  The output is a fresh tensor
    every step: it may be saved by the caller's autograd graph."""

    @staticmethod
    def forward(ctx, anchor, ebc, ids, nbags):
        pool = ebc._idpool
        buf = pool.pop() if pool else None
        if buf is None or buf[2] != nbags:
            a = np.empty(ebc._ntables * nbags, np.uint64)
            buf = (a, _ptr(a), nbags)
        out = torch.empty(ebc._ntables, nbags, ebc.dims[0],
                          dtype=torch.float32)
        ret = _abi.plan_gather(ebc.store.handle, ebc._plan, ids.data_ptr(),
                               nbags, buf[1], out.data_ptr(),
                               ebc._failed_addr)
        if ret:
            ebc._raise(ret, "et_gather_pooled")
        ctx.state = (ebc, buf)
        return out

    @staticmethod
    def backward(ctx, grad):
        ebc, buf = ctx.state
        if buf is None:
            raise RuntimeError(_TWICE)
        ctx.state = (ebc, None)
        if grad.dtype is not torch.float32 or not grad.is_contiguous():
            grad = grad.float().contiguous()
        ret = _abi.plan_update(ebc.store.handle, ebc._plan, buf[1], buf[2],
                               grad.data_ptr(), ebc.lr, ebc.eps,
                               ebc._failed_addr)
        # only now may a later forward overwrite these ids
        if len(ebc._idpool) < 4:
            ebc._idpool.append(buf)
        if ret:
            ebc._raise(ret, "et_update_pooled")
        return None, None, None, None


class EmbeddingBagCollection(torch.nn.Module):
    """Embedding bags over tables of an embtier store.

    store: an embtier.Store; tables: Table objects or names of tables the
    store has open, row-indexed or keyed, in any mix; lr, eps: the fused
    optimizer's hyper-parameters (attributes, may change between steps);
    mode: 'sum' or 'mean'."""

    def __init__(self, store, tables, lr, eps=0.0, mode="sum"):
        super().__init__()
        self.store = store
        self.tables = [t if isinstance(t, Table) else store.table(t)
                       for t in tables]
        if not self.tables:
            raise _einval("EmbeddingBagCollection", "no tables")
        self.lr = float(lr)
        self.eps = float(eps)
        self.mode = mode
        self._mode = _pool(mode)
        self._ids = [t.id for t in self.tables]
        self.dims = [t.dim for t in self.tables]
        self._uniform = len(set(self.dims)) == 1
        # the autograd graph needs an input that wants a gradient; it is
        # no parameter (a dense optimizer has nothing to do with it)
        self._anchor = torch.zeros(0, requires_grad=True)
        self._width = sum(self.dims)
        self._up = _abi.new("et_update_params")
        self._up_ref = ctypes.byref(self._up)
        self._arange = np.arange(1, dtype=np.uint64)
        # et_prefetch's argument, filled as a numpy array of its layout
        T = len(self.tables)
        self._pf = (_abi.struct_class("et_batch_ids") * T)()
        self._pf_np = np.frombuffer(self._pf, _abi.numpy_dtype(
            "et_batch_ids"))
        self._pf_np["table"] = self._ids
        self._steps = np.arange(T, dtype=np.uintp) * 8
        # the table-batched calls' arguments (_tables.c)
        self._tid_np = np.array(self._ids, np.intc)
        self._dims_np = np.array(self.dims, np.uint32)
        self._tid_ptr = _ptr(self._tid_np)
        self._dims_ptr = _ptr(self._dims_np)
        self._failed = ctypes.c_size_t()
        self._failed_ref = ctypes.byref(self._failed)
        self._failed_addr = ctypes.addressof(self._failed)
        # the plan of the [T, B] tensor path (_tables.c): built once
        self._ntables = T
        self._idpool = []
        self._plan = None
        tl = _abi.tables_lib
        if tl is not None and self._uniform:
            self._plan = tl.etpy_plan_new(T, self._tid_ptr, self._dims_ptr,
                                          self._mode)
            if not self._plan:
                raise MemoryError("EmbeddingBagCollection")
            weakref.finalize(self, tl.etpy_plan_free, self._plan)

    def extra_repr(self):
        return f"tables={[t.name for t in self.tables]}, dims={self.dims}, " \
            f"lr={self.lr}, mode={self.mode!r}"

    # -- inputs

    def _one_per_bag(self, n):
        if self._arange.shape[0] < n + 1:
            self._arange = np.arange(max(n + 1, 2 * self._arange.shape[0]),
                                     dtype=np.uint64)
        return self._arange[:n + 1]

    def _batch(self, ids, offsets, copy):
        """(keep, ids pointers, ids base, offsets pointers, offsets base,
        nbags), checked: a [T, B] tensor as its base address (table k's ids
        at base + k * B ids, every table's offsets at one base), else each
        table's ids and offsets as uint64 arrays with their addresses in
        two uintp arrays; keep holds what the addresses point into. With
        copy, the ids are the module's own copy (the backward needs them as
        they are now, whatever the caller does with its buffers)."""
        T = len(self.tables)
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            if offsets is not None:
                raise _einval("EmbeddingBagCollection", "a 2-D ids tensor "
                              "has one id per bag: no offsets")
            ids = self._ids2d(ids, copy)
            nbags = ids.shape[1]
            o = self._one_per_bag(nbags)
            return (ids, o), None, ids.data_ptr(), None, _ptr(o), nbags
        if len(ids) != T or (offsets is not None and len(offsets) != T):
            raise _einval("EmbeddingBagCollection",
                          f"{T} tables, but ids/offsets for {len(ids)}")
        keep, ip, op, nbags = [], [], [], None
        for t in range(T):
            i = as_ids(_as_np(ids[t]), "ids")
            if copy:
                i = i.copy()
            o = None if offsets is None else offsets[t]
            if o is None:
                o = self._one_per_bag(i.shape[0])
            else:
                o = check_offsets(_as_np(o), i.shape[0],
                                  "EmbeddingBagCollection")
                if copy:
                    o = o.copy()
            if nbags is None:
                nbags = o.shape[0] - 1
            elif o.shape[0] - 1 != nbags:
                raise _einval("EmbeddingBagCollection", "every table needs "
                              "the same number of bags")
            keep += (i, o)
            ip.append(_ptr(i))
            op.append(_ptr(o))
        return (keep, np.array(ip, np.uintp), 0, np.array(op, np.uintp), 0,
                nbags)

    def _ids2d(self, ids, copy):
        """A [T, B] tensor of ids as a C-contiguous int64 CPU tensor (its
        bits are the uint64 ids: a negative id is a keyed table's id
        2**64 + id, and out of range of a row-indexed one)."""
        if ids.shape[0] != len(self.tables):
            raise _einval("EmbeddingBagCollection", f"{len(self.tables)} "
                          f"tables, but ids for {ids.shape[0]}")
        if ids.dtype != torch.int64 or ids.device.type != "cpu" or \
                not ids.is_contiguous():
            if ids.is_floating_point() or ids.is_complex() or \
                    ids.dtype == torch.bool:
                raise _einval("ids", f"integer ids expected, not "
                              f"{ids.dtype}")
            return ids.to(device="cpu", dtype=torch.int64).contiguous()
        return ids.clone() if copy else ids

    # -- the two halves: one call into _tables.c each, or a Python loop

    def _gather(self, batch):
        nbags = batch[5]
        # numpy's allocation: torch's maps and faults in fresh pages for
        # every output this size (100+ us a step at batch 256 x 26 x 16)
        out = torch.from_numpy(np.empty(nbags * self._width, np.float32))
        self._call("et_gather_pooled", batch, out.data_ptr(), None)
        return out

    def _update(self, batch, grad):
        if grad.dtype != torch.float32:
            grad = grad.float()
        grad = grad.contiguous()
        self._up.lr = self.lr
        self._up.eps = self.eps
        self._call("et_update_pooled", batch, grad.data_ptr(), self._up_ref)

    def _call(self, name, batch, data, up):
        """et_gather_pooled (up None) or et_update_pooled over every
        table, table k's block of data after table k - 1's."""
        _, ip, ibase, op, obase, nbags = batch
        h = self.store.handle
        tl = _abi.tables_lib
        if tl is not None:
            args = (h, len(self._ids), self._tid_ptr, self._dims_ptr,
                    None if ip is None else _ptr(ip), ibase, nbags,
                    None if op is None else _ptr(op), obase, nbags,
                    self._mode, data)
            if up is None:
                ret = tl.etpy_gather_pooled(*args, self._failed_ref)
            else:
                ret = tl.etpy_update_pooled(*args, up, self._failed_ref)
            if ret:
                self._raise(ret, name)
            return
        fn = getattr(lib, name)
        for k, (tid, dim) in enumerate(zip(self._ids, self.dims)):
            i = ibase + k * nbags * 8 if ip is None else int(ip[k])
            o = obase if op is None else int(op[k])
            args = (h, tid, i, o, nbags, self._mode, data)
            ret = fn(*args) if up is None else fn(*args, up)
            if ret:
                raise EmbtierError(ret, name,
                                   f"table {self.tables[k].name!r}")
            data += nbags * dim * 4

    def _raise(self, ret, name):
        """The EmbtierError of a table-batched call: the table it names."""
        detail = errdetail()
        k = self._failed.value
        if k >= len(self.tables):
            # a multi-table call's words name batch[k]
            m = re.search(r"batch\[(\d+)\]", detail)
            k = int(m.group(1)) if m else len(self.tables)
        where = (f"table {self.tables[k].name!r}"
                 if k < len(self.tables) else "")
        raise EmbtierError(ret, name, "; ".join(
            x for x in (where, detail) if x))

    def _plan_call(self, fn, name, *args):
        ret = fn(self.store.handle, self._plan, *args, self._failed_addr)
        if ret:
            self._raise(ret, name)

    def _nbags2d(self, ids):
        """B if ids is a C-contiguous [T, B] int64 CPU tensor and the
        module has a plan, else -1 (the general path's checks apply)."""
        if self._plan is None or type(ids) is not torch.Tensor or \
                ids.dtype is not torch.int64 or not ids.is_cpu:
            return -1
        sh = ids.shape
        if len(sh) != 2 or sh[0] != self._ntables or \
                not ids.is_contiguous():
            return -1
        return sh[1]

    def _shape(self, flat, nbags):
        if self._uniform:
            return flat.view(len(self.tables), nbags, self.dims[0])
        parts = torch.split(flat, [nbags * d for d in self.dims])
        return tuple(x.view(nbags, d) for x, d in zip(parts, self.dims))

    def forward(self, ids, offsets=None):
        nbags = -1 if offsets is not None else self._nbags2d(ids)
        if nbags >= 0:
            if torch.is_grad_enabled() and self.training:
                return _Lookup2D.apply(self._anchor, self, ids, nbags)
            out = torch.empty(self._ntables, nbags, self.dims[0],
                              dtype=torch.float32)
            self._plan_call(_abi.plan_gather,
                            "et_gather_pooled", ids.data_ptr(), nbags, None,
                            out.data_ptr())
            return out
        if torch.is_grad_enabled() and self.training:
            batch = self._batch(ids, offsets, True)
            flat = _Lookup.apply(self._anchor, self, batch)
        else:
            batch = self._batch(ids, offsets, False)
            flat = self._gather(batch)
        return self._shape(flat, batch[5])

    def prefetch(self, ids):
        """et_prefetch of the next batch's ids (a list of per-table 1-D
        tensors or arrays, or a [T, B] tensor); returns at once."""
        n = self._nbags2d(ids)
        if n >= 0:
            ret = _abi.plan_prefetch(
                self.store.handle, self._plan, ids.data_ptr(), n)
            if ret:
                raise EmbtierError(ret, "et_prefetch")
            return
        T = len(self.tables)
        pf = self._pf_np
        tl = _abi.tables_lib
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            keep = self._ids2d(ids, False)
            n = keep.shape[1]
            if tl is not None:
                ret = tl.etpy_prefetch(self.store.handle, T, self._tid_ptr,
                                       keep.data_ptr(), n)
                if ret:
                    raise EmbtierError(ret, "et_prefetch")
                return
            pf["ids"] = keep.data_ptr() + self._steps * n
            pf["n"] = n
        else:
            if len(ids) != T:
                raise _einval("prefetch", f"{T} tables, but ids for "
                              f"{len(ids)}")
            keep = [as_ids(_as_np(x), "prefetch: ids") for x in ids]
            pf["ids"] = [_ptr(x) for x in keep]
            pf["n"] = [x.shape[0] for x in keep]
        ret = lib.et_prefetch(self.store.handle, self._pf, T)
        del keep
        if ret:
            raise EmbtierError(ret, "et_prefetch")
