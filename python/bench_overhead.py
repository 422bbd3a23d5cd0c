#!/usr/bin/python3
"""What the Python package costs over calling libembtier from C.

    make python && /usr/bin/python3 python/bench_overhead.py

Two measurements, each the same calls on the same ids from Python and from
C (python/bench/c_baseline.c, loaded into this process and driving the same
store), every row resident in DDR (read once before timing) so that the
library's own work is as small as it gets and the binding's share as
large:

step    a training step's store work at --batch bags x --tables tables
        (one id per bag, dim --dim): in Python, EmbeddingBagCollection's
        prefetch of the next batch, forward (one et_gather_pooled_multi
        for every table) and backward (one et_update_pooled_multi, through
        torch's autograd), and the numpy API's per-table calls
        (et_gather_pooled and et_update_pooled per table); in C, as
        embtier-train does, et_prefetch, et_gather_pooled_multi and
        et_update_pooled_multi.
gather  et_gather of --gather-batch ids of one table into a preallocated
        array: Store.gather(ids, out=...) against the C call.
example step
        python/examples/dlrm.py's whole training step (bottom MLP, 26
        embedding bags through the store, interaction, top MLP, loss,
        backward, Adagrad step) on its store configuration and synthetic
        batches, two ways in turn on one store: as the example makes it,
        the embeddings through EmbeddingBagCollection, and the same torch
        model with the store driven from C (c_baseline.c's
        cb_prefetch_gather into a preallocated array, the model's leaf
        tensor; cb_update with that tensor's gradient after the backward).
        python/tests/test_bench.py checks that both compute the same.

C and Python alternate pass by pass over the same store, and each keeps
its fastest of --passes passes: the machine is shared, and the minimum is
what the code costs when little else interferes.  (--interleave step
alternates step by step, which shares the load more evenly but lets each
way find the rows the one before it just read in the CPU's caches.)  The
binding's own cost is also timed alone, with the library's calls replaced
by no-ops: once step after step, its code and data warm in the CPU's
caches, and once with each step right after a real C step (untimed), as
the binding's code runs in a real step, after the library's work has
evicted it; the difference between the two is most of what the module
costs over C.  "least torch" is the same three C calls the module makes,
without its checks or ids copy, in an autograd Function: the least any
torch module can add.  The example step also prints the median over
passes of the module's time over C's, and alternates which way goes
first.

    perf record -e cpu-clock -F 2000 /usr/bin/python3 \
        python/bench_overhead.py --only torch    # (or --only c)

runs 3000 all-DDR steps one way only, untimed, for a profiler;
--what store or --what example runs only the first two sections and
gather, or only the example's step.
"""

import argparse
import ctypes
from contextlib import nullcontext
import os
import shutil
import sys
import tempfile
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "examples"))
import embtier  # noqa: E402

C_BASELINE = os.path.join(os.path.dirname(HERE), "build-python", "python",
                          "libc_baseline.so")
P = ctypes.c_void_p
Z = ctypes.c_size_t


now_ns = time.thread_time_ns


def load_baseline():
    if not os.path.exists(C_BASELINE):
        sys.exit(f"{C_BASELINE} missing: run `make python` first")
    cb = ctypes.CDLL(C_BASELINE)
    cb.cb_steps.argtypes = [P, P, Z, P, Z, Z, Z, Z, Z, P, P, ctypes.c_float,
                            P, P]
    cb.cb_gather.argtypes = [P, ctypes.c_int, P, Z, Z, P, P]
    cb.cb_prefetch_gather.argtypes = [P, P, Z, P, P, Z, Z, P, P]
    cb.cb_update.argtypes = [P, P, Z, P, Z, Z, P, P, ctypes.c_float,
                             ctypes.c_float]
    return cb


def make_store(d, rows, dim, hbm_bytes=0, ddr_bytes=0):
    """Tables of rows[t] rows; without ddr_bytes, a DDR tier that holds
    every row, each read once (so that all lookups hit DDR)."""
    warm = not ddr_bytes
    if warm:
        ddr_bytes = sum(rows) * ((dim + 1) * 4 + 64) * 5 // 4
    s = embtier.Store(d, hbm_bytes=hbm_bytes, ddr_bytes=ddr_bytes)
    tables = [s.create_table(f"t{t}", rows=r, dim=dim,
                             optim="rowwise_adagrad", init="uniform", seed=t)
              for t, r in enumerate(rows)]
    for t, r in zip(tables, rows):
        if warm:
            t.gather(np.arange(r, dtype=np.uint64))
    return s, tables


def timed(fn, steps):
    t0 = now_ns()
    for k in range(steps):
        fn(k)
    return now_ns() - t0


def c_pass(fn, *args):
    ns = ctypes.c_uint64()
    ret = fn(*args, ctypes.byref(ns))
    if ret:
        raise embtier.EmbtierError(ret, "c_baseline")
    return ns.value


def bench_step(cb, s, tables, ids, a):
    """ns per step: C, the torch module, the numpy API, and the last two
    with the library's calls replaced by no-ops."""
    import torch
    from embtier.nn import EmbeddingBagCollection
    torch.set_num_threads(1)
    steps, T, B = ids.shape
    ebc = EmbeddingBagCollection(s, tables, lr=0.01)
    grad = torch.from_numpy(
        (1e-3 * (np.arange(T * B * a.dim) % 7)).astype(np.float32)
        .reshape(T, B, a.dim))
    tids = [torch.from_numpy(ids[k].astype(np.int64)) for k in range(steps)]

    def torch_step(k):
        ebc.prefetch(tids[(k + 1) % steps])
        out = ebc(tids[k])
        out.backward(grad)

    offsets = np.arange(B + 1, dtype=np.uint64)
    gnp = grad.numpy()
    out = np.empty((T, B, a.dim), np.float32)

    def numpy_step(k):
        s.prefetch([(t, ids[(k + 1) % steps, i]) for i, t in
                    enumerate(tables)])
        for i, t in enumerate(tables):
            s.gather_pooled(t, ids[k, i], offsets, out=out[i])
        for i, t in enumerate(tables):
            s.update_pooled(t, ids[k, i], offsets, gnp[i], lr=0.01)

    tid = (ctypes.c_int * T)(*[t.id for t in tables])

    def c_step(k):
        return c_pass(cb.cb_steps, s.handle, tid, T, ids.ctypes.data, B,
                      a.dim, steps, k, 1, offsets.ctypes.data,
                      gnp.ctypes.data, 0.01, out.ctypes.data)

    def one(fn, k):
        t0 = now_ns()
        fn(k)
        return now_ns() - t0

    def c_run(k):
        c_run.ns += c_step(k)

    def cold_torch_step(k):
        # the binding alone, as it runs in a real step: right after the
        # library's work (here C's whole step, untimed) has been through
        # the CPU's caches
        c_step(k)
        return one(torch_step, k)

    class Trivial(torch.autograd.Function):
        """What any autograd function costs: a forward that makes the
        output tensor, a backward that does nothing."""

        @staticmethod
        def forward(ctx, anchor):
            return torch.empty(T, B, a.dim, dtype=torch.float32)

        @staticmethod
        def backward(ctx, g):
            return None

    anchor = torch.zeros(0, requires_grad=True)

    def cold_trivial(k):
        c_step(k)
        t0 = now_ns()
        Trivial.apply(anchor).backward(grad)
        return now_ns() - t0

    # the least a torch module can add: the module's three C calls with
    # no checks, no ids copy, in an autograd Function
    ab = embtier._abi
    h, plan, fail = s.handle, ebc._plan, ebc._failed_addr

    class Minimal(torch.autograd.Function):
        @staticmethod
        def forward(ctx, anchor, ids):
            out = torch.empty(T, B, a.dim, dtype=torch.float32)
            ab.plan_gather(h, plan, ids.data_ptr(), B, None, out.data_ptr(),
                           fail)
            ctx.ids = ids
            return out

        @staticmethod
        def backward(ctx, g):
            ab.plan_update(h, plan, ctx.ids.data_ptr(), B, g.data_ptr(),
                           0.01, 0.0, fail)
            return None, None

    def minimal_step(k):
        ab.plan_prefetch(h, plan, tids[(k + 1) % steps].data_ptr(), B)
        Minimal.apply(anchor, tids[k]).backward(grad)

    if a.only:
        fn = c_step if a.only == "c" else torch_step
        for k in range(a.loop):
            fn(k % steps)
        s.close()
        return None

    nop = binding_only(cb)
    runs = [c_run, torch_step, numpy_step, torch_step, numpy_step,
            cold_torch_step, cold_trivial, minimal_step]
    timed_by = [None, one, one, one, one, lambda fn, k: fn(k),
                lambda fn, k: fn(k), one]
    best = [float("inf")] * len(runs)
    for _ in range(a.passes):
        tot = [0] * len(runs)
        if a.interleave == "step":
            # every step runs right after the same step of another way,
            # which brought its rows into the CPU's caches: flattering
            for k in range(steps):
                for i, fn in enumerate(runs):
                    with nop if i in (3, 4, 5) else nullcontext():
                        c_run.ns = 0
                        tot[i] += timed_by[i](fn, k) if i else \
                            (c_run(k), c_run.ns)[1]
        else:
            for i, fn in enumerate(runs):
                with nop if i in (3, 4, 5) else nullcontext():
                    c_run.ns = 0
                    t = sum(timed_by[i](fn, k) for k in range(steps)) \
                        if i else [c_run(k) for k in range(steps)]
                    tot[i] = c_run.ns if i == 0 else t
        best = [min(b, t / steps) for b, t in zip(best, tot)]
    s.close()
    return best


def example_batches(ex, batch, steps):
    """steps batches of the example's synthetic training data (its
    configuration ex: dlrm.parse_args), as the example draws them."""
    import dlrm
    src = dlrm.Synthetic(dlrm.table_rows(ex), ex.hot, ex.zipf, ex.seed, 0)
    return [src.next(batch) for _ in range(steps)]


def example_ways(cb, s, tables, batches, ex):
    """The example's training step, two ways on store s's tables:
    (a) as python/examples/dlrm.py makes it, the embeddings through
    EmbeddingBagCollection; (b) the same dense model (the same initial
    weights), the store driven from C: cb_prefetch_gather before the
    forward into one preallocated array, which the model reads as a leaf
    tensor, and cb_update with that tensor's gradient after the backward.
    Returns ((step_a, model_a), (step_b, model_b)); step(k) trains on
    batches[k] after prefetching the rows of batches[k + 1] (of
    batches[0] after the last)."""
    import torch
    import dlrm
    from embtier.nn import EmbeddingBagCollection
    n, T, D = len(batches), len(tables), tables[0].dim
    B = len(batches[0].label)
    lossf = torch.nn.BCEWithLogitsLoss()

    def model(emb):
        torch.manual_seed(ex.seed)
        m = dlrm.DLRM(emb, D, ex.bottom, ex.top)
        return m, torch.optim.Adagrad(m.parameters(), lr=ex.lr)

    ebc = EmbeddingBagCollection(s, tables, lr=ex.emb_lr)
    model_a, opt_a = model(ebc)

    def step_a(k):
        ebc.prefetch(batches[(k + 1) % n].ids)
        batch = batches[k]
        loss = lossf(model_a(batch), batch.label)
        opt_a.zero_grad()
        loss.backward()          # also updates the store's rows
        opt_a.step()

    out = np.empty((T, B, D), np.float32)
    emb = torch.from_numpy(out).requires_grad_()

    class Gathered(torch.nn.Module):
        """In the model's place of the module: what C gathered."""

        def __init__(self):
            super().__init__()
            self.tables = tables

        def forward(self, ids, offsets):
            return emb

    model_b, opt_b = model(Gathered())
    h, tid = s.handle, (ctypes.c_int * T)(*[t.id for t in tables])
    offsets = np.arange(B + 1, dtype=np.uint64)
    # the [T, B] int64 ids tensors, read by C as uint64
    ids = [b.ids.data_ptr() for b in batches]
    optr, outp, lr = offsets.ctypes.data, out.ctypes.data, ex.emb_lr

    def step_b(k, keep=offsets):   # keep: optr's array lives as long
        ret = cb.cb_prefetch_gather(h, tid, T, ids[k], ids[(k + 1) % n], B,
                                    D, optr, outp)
        if ret:
            raise embtier.EmbtierError(ret, "cb_prefetch_gather")
        batch = batches[k]
        loss = lossf(model_b(batch), batch.label)
        opt_b.zero_grad()
        emb.grad = None
        loss.backward()
        g = emb.grad.contiguous()
        ret = cb.cb_update(h, tid, T, ids[k], B, D, optr, g.data_ptr(), lr,
                           0.0)
        if ret:
            raise embtier.EmbtierError(ret, "cb_update")
        opt_b.step()

    return (step_a, model_a), (step_b, model_b)


def bench_example(cb, s, tables, batches, ex, a):
    """ns per whole step of the example, the store driven from C and
    through the torch module (the fastest pass of each), and the median
    over passes of the module's time over C's.  Which way goes first
    alternates pass by pass (step by step with --interleave step)."""
    import torch
    torch.set_num_threads(1)
    (step_a, _), (step_b, _) = example_ways(cb, s, tables, batches, ex)
    steps = len(batches)
    ways = (step_b, step_a)
    best, ratios = [float("inf")] * 2, []
    for p in range(a.passes):
        tot = [0, 0]
        if a.interleave == "step":
            for k in range(steps):
                for i in ((0, 1), (1, 0))[(p + k) % 2]:
                    tot[i] += timed(lambda _: ways[i](k), 1)
        else:
            for i in ((0, 1), (1, 0))[p % 2]:
                tot[i] = timed(ways[i], steps)
        best = [min(b, t / steps) for b, t in zip(best, tot)]
        ratios.append(tot[1] / tot[0])
    s.close()
    return best + [float(np.median(ratios))]


class binding_only:
    """Within it, the package's et_gather_pooled, et_update_pooled and
    et_prefetch, and its table-batched calls (_tables.c), do nothing
    (c_baseline.c's no-ops of the same signatures): a step then costs
    what Python, ctypes and torch add, alone."""

    NAMES = ("et_gather_pooled", "et_update_pooled", "et_prefetch")
    PLAN = ("etpy_plan_prefetch", "etpy_plan_gather", "etpy_plan_update")

    def __init__(self, cb):
        self.cb = cb

    def __enter__(self):
        lib = embtier._abi.lib
        self.saved = [getattr(lib, n) for n in self.NAMES]
        for n, f in zip(self.NAMES, self.saved):
            setattr(lib, n, self.nop("cb_nop_" + n[3:], f))
        self.tables = embtier._abi.tables_lib
        if self.tables is not None:
            nops = types.SimpleNamespace()
            for n in self.PLAN + ("etpy_gather_pooled", "etpy_update_pooled",
                                  "etpy_prefetch"):
                setattr(nops, n, self.nop("cb_nop_" + n,
                                          getattr(self.tables, n)))
            embtier._abi.tables_lib = nops
            embtier._abi.bind_plan(*(getattr(nops, n) for n in self.PLAN))

    def nop(self, name, f):
        nop = getattr(self.cb, name)
        nop.argtypes, nop.restype = f.argtypes, f.restype
        return nop

    def __exit__(self, *exc):
        for n, f in zip(self.NAMES, self.saved):
            setattr(embtier._abi.lib, n, f)
        embtier._abi.tables_lib = self.tables
        if self.tables is not None:
            embtier._abi.bind_plan(*(getattr(self.tables, n)
                                     for n in self.PLAN))


def bench_gather(cb, d, ids, a):
    """ns per gather: C, the numpy API."""
    steps, _, B = ids.shape
    s, (t,) = make_store(d, [a.gather_rows], a.gather_dim)
    out = np.empty((B, a.gather_dim), np.float32)

    def gather(k):
        t.gather(ids[k, 0], out=out)

    best = [float("inf")] * 2
    for _ in range(a.passes):
        c = c_pass(cb.cb_gather, s.handle, t.id, ids.ctypes.data, B, steps,
                   out.ctypes.data)
        for i, ns in enumerate((c, timed(gather, steps))):
            best[i] = min(best[i], ns / steps)
    s.close()
    return best


def report_step(title, res, a):
    c_step, py_torch, py_numpy, bind_torch, bind_numpy, cold, trivial, \
        minimal = res
    print(f"{title}: {a.tables} tables, batch {a.batch}, dim {a.dim}; "
          f"prefetch + pooled gather + fused update")
    print(f"  C             {c_step / 1e3:9.1f} us/step")
    print(f"  torch module  {py_torch / 1e3:9.1f} us/step   overhead "
          f"{(py_torch / c_step - 1) * 100:+.1f}%")
    print(f"  least torch   {minimal / 1e3:9.1f} us/step   overhead "
          f"{(minimal / c_step - 1) * 100:+.1f}%   (the module's C calls "
          f"alone in an autograd Function)")
    print(f"  numpy API     {py_numpy / 1e3:9.1f} us/step   overhead "
          f"{(py_numpy / c_step - 1) * 100:+.1f}%")
    print("  the binding alone (library calls replaced by no-ops):")
    print(f"  torch module  {bind_torch / 1e3:9.1f} us/step   "
          f"= {bind_torch / c_step * 100:.1f}% of the C step")
    print(f"  numpy API     {bind_numpy / 1e3:9.1f} us/step   "
          f"= {bind_numpy / c_step * 100:.1f}% of the C step")
    print(f"  torch module, each step right after C's (untimed): "
          f"{cold / 1e3:.1f} us/step = {cold / c_step * 100:.1f}%")
    print(f"    of which torch's autograd alone (an empty Function's apply "
          f"and backward): {trivial / 1e3:.1f} us/step = "
          f"{trivial / c_step * 100:.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--gather-batch", type=int, default=4096)
    ap.add_argument("--gather-dim", type=int, default=64)
    ap.add_argument("--gather-rows", type=int, default=200000)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--clock", choices=("thread", "process", "wall"),
                    default="thread",
                    help="time the calling thread's CPU time (default: "
                    "least disturbed by other work on a shared machine), "
                    "the whole process's CPU time (the store's I/O and "
                    "worker threads included) or the wall clock")
    ap.add_argument("--interleave", choices=("pass", "step"), default="pass",
                    help="alternate C and Python pass by pass (default) or "
                    "step by step")
    ap.add_argument("--only", choices=("c", "torch"),
                    help="for a profiler (perf record): only --loop steps "
                    "of the all-DDR step, from C or from the torch module, "
                    "and no timing")
    ap.add_argument("--loop", type=int, default=3000)
    ap.add_argument("--what", choices=("all", "store", "example"),
                    default="all", help="store: the store's part of a step "
                    "and gather only; example: the example's whole step "
                    "only")
    a = ap.parse_args()
    cb = load_baseline()
    global now_ns
    now_ns = {"thread": time.thread_time_ns, "wall": time.monotonic_ns,
              "process": time.process_time_ns}[a.clock]
    cb.cb_set_clock(("thread", "wall", "process").index(a.clock))
    rng = np.random.default_rng(a.seed)
    tmp = tempfile.mkdtemp(prefix="embtier-bench.", dir=os.environ.get(
        "TMPDIR", "/var/tmp"))
    store = a.what != "example"
    try:
        # the example's workload: its store, tables and synthetic ids
        import dlrm
        ex = dlrm.parse_args(["--tables", str(a.tables), "--dim",
                              str(a.dim)])
        rows = dlrm.table_rows(ex)
        hbm, ddr_bytes = int(ex.hbm_mb * 2**20), int(ex.ddr_mb * 2**20)
        batches = example_batches(ex, a.batch, a.steps)
        ex_ids = np.stack([b.ids.numpy() for b in batches]).astype(np.uint64)
        if store and not a.only:
            s, tables = make_store(os.path.join(tmp, "s0"), rows, a.dim,
                                   hbm, ddr_bytes)
            example = bench_step(cb, s, tables, ex_ids, a)
        if store or a.only:
            step_ids = rng.integers(0, a.rows, (a.steps, a.tables, a.batch),
                                    dtype=np.uint64)
            s, tables = make_store(os.path.join(tmp, "s1"),
                                   [a.rows] * a.tables, a.dim)
            ddr = bench_step(cb, s, tables, step_ids, a)
        if a.only:
            return
        if store:
            gather_ids = rng.integers(0, a.gather_rows,
                                      (a.steps, 1, a.gather_batch),
                                      dtype=np.uint64)
            c_gather, py_g = bench_gather(cb, os.path.join(tmp, "s2"),
                                          gather_ids, a)
        if a.what != "store":
            s, tables = make_store(os.path.join(tmp, "s3"), rows, a.dim,
                                   hbm, ddr_bytes)
            whole = bench_example(cb, s, tables, batches, ex, a)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if store:
        report_step(f"step, the example's store and data ({ex.hbm_mb:g} MiB "
                    f"HBM, {ex.ddr_mb:g} MiB DDR, Zipf ids)", example, a)
        report_step(f"step, all DDR hits ({a.rows} rows a table, uniform "
                    f"ids)", ddr, a)
        report_gather(c_gather, py_g, a)
    if a.what != "store":
        c_whole, py_whole, median = whole
        print(f"example step: python/examples/dlrm.py's whole training "
              f"step, {a.tables} tables, batch {a.batch}, dim {a.dim}, its "
              f"store and data")
        print(f"  C store calls {c_whole / 1e3:9.1f} us/step")
        print(f"  torch module  {py_whole / 1e3:9.1f} us/step   overhead "
              f"{(py_whole / c_whole - 1) * 100:+.1f}%   (the median pass: "
              f"{(median - 1) * 100:+.1f}%)")


def report_gather(c_gather, py_g, a):
    print(f"gather: batch {a.gather_batch}, dim {a.gather_dim}, DDR hits")
    rate = lambda ns: a.gather_batch / ns * 1e3  # noqa: E731
    print(f"  C             {rate(c_gather):9.2f} M ids/s")
    print(f"  numpy API     {rate(py_g):9.2f} M ids/s   ratio "
          f"{c_gather / py_g:.3f}")


if __name__ == "__main__":
    main()
