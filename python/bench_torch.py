#!/usr/bin/python3
"""EmbeddingBagCollection against torch's own EmbeddingBag: training steps.

    make python && /usr/bin/python3 python/bench_torch.py [--quick]

The same training step two ways, on the same tables, ids, initial rows
and upstream gradient:

module  embtier.nn.EmbeddingBagCollection over a store whose DDR tier holds
        every row (each read once before timing): its prefetch of the next
        batch (ebc.prefetch, at the start of the step as in the README's
        loop; --prefetch-at after-forward or none), the forward (pooled
        gathers of every table: a [T, B] ids tensor for one id a bag, else
        per-table ids and offsets) and the backward, which applies the
        store's fused optimizer (SGD, or row-wise Adagrad).
torch   one torch.nn.EmbeddingBag(mode="sum", sparse=True,
        include_last_offset=True) a table, its weights a copy of the
        store's initial rows: the forward of every table, the backward
        (sparse gradients), then torch.optim.SGD, or torch.optim.Adagrad,
        step and zero_grad(set_to_none=True).

The backward is driven by a fixed synthetic upstream gradient, the same
[T, B, D] tensor for both (0.1 x a seeded standard normal); torch's outputs
stay one [B, D] tensor a table (what torch makes; --torch-stack stacks them
into the module's [T, B, D], which adds a copy to torch's forward).

Shapes:

A   26 tables x 262144 rows x dim 64, f32, batch 4096, one id a bag, ids
    Zipf with exponent 1.05 over each table's rows (p(rank k) ~ k^-1.05,
    k = 1..rows; ranks scattered over the rows by a fixed permutation a
    table);
B   FBGEMM's split_table_batched_embeddings benchmark shape: 32 tables x
    131072 rows x dim 128, batch 512, 20 ids a bag, ids uniform (what its
    default --alpha 1 draws).

--quick makes both small (a run of a few seconds a configuration).

Optimizers: SGD both sides (the same arithmetic: the gate below checks
it), and Adagrad: torch.optim.Adagrad (element-wise, its sum of squares a
weight) beside the store's row-wise Adagrad (one sum a row, FBGEMM's
EXACT_ROWWISE_ADAGRAD).  They are different optimizers, so for Adagrad
only the speeds compare; the rows are not checked.

Correctness gate, before timing each SGD configuration: from the same
initial rows, --gate-steps steps each side.  The upstream gradient is
fixed, so the exact rows after them are the initial rows minus lr x every
gradient each id received, computed in float64.  The module's forward
outputs and updated rows must be within --rtol (1e-6) of the exact ones,
relative to a row's largest magnitude; the first forward (same rows)
within --rtol of torch's (in practice equal); torch's within --torch-rtol
(1e-4) of the exact ones.  torch is held to less because its sparse SGD
adds a repeated id's gradients to the weight one by one, each rounded at
the weight's magnitude, where the store sums them first and applies the
sum once: with Zipf ids a hot row, hundreds of times in a batch, drifts
by more than 1e-6 from the exact result in torch, not in the module.
Every maximum difference is printed (module vs torch too), and the script
exits with status 1 if the check fails.

Timing: --rounds rounds, each --steps steps of one side then --steps of the
other (which side goes first alternates); every step timed, and its
pieces: the module's prefetch, each side's forward, and its backward with
the update ("bwd+upd": for torch, backward, optimizer step and zero_grad;
for the module, backward, the update being in it).  Reported: the median
step and pieces of each side, and the ratio of speeds, torch's median step
time over the module's (> 1: the module is faster).  Wall clock by default
(--threads 2 uses the store's and torch's worker threads).  torch's step
time varies from one process to another, so --procs K runs the whole
measurement in K fresh processes one after another and reports each side's
best median and the speed ratio of the two bests (torch's best time over
the module's best time).

--threads 1,2 (default both): the store's `threads` (its multi-table calls'
row work) and torch.set_num_threads.  --json prints one JSON object instead
of the table.

Memory: shape A is 1.7 GB of f32 weights a side, plus the store's DDR
tier (--ddr-factor, 1, x embtier.direct_bytes of the tables: a slot for
every row, its row and ET_SLOT_META_BYTES of metadata: 1.9 GB for A,
2.2 GB for B) and, for
Adagrad, torch's state (1.7 GB for A, 2.1 GB for B).  A tier with a slot
for every row is direct-mapped (a slot a row: no probe of a set, no
eviction; et_tier_stats.direct_rows, printed); a factor below 1 makes it
set-associative, --ways (32) to a set, and the rows that find their set
full are evicted (printed) and served from the initializer when used.
The configurations run one after the other, each store closed and
deleted before the next.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import embtier  # noqa: E402

SHAPES = {
    # tables, rows, dim, batch, ids a bag, zipf exponent (0: uniform)
    "A": dict(tables=26, rows=262144, dim=64, batch=4096, bag=1, zipf=1.05),
    "B": dict(tables=32, rows=131072, dim=128, batch=512, bag=20, zipf=0.0),
}
QUICK = {
    "A": dict(rows=16384, batch=1024),
    "B": dict(rows=8192, batch=128),
}

now_ns = time.perf_counter_ns


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ inputs

class Batch:
    """One step's ids, as each side takes them.  mod_ids: a [T, B] int64
    tensor (one id a bag: the module's fastest form) or a list of 1-D
    tensors with mod_offsets; tids[t], toffs: torch's per-table input."""

    def __init__(self, ids, bag):
        import torch
        T, n = ids.shape
        self.np = ids                                # [T, B * bag] int64
        self.t = torch.from_numpy(ids)
        self.tids = [self.t[k] for k in range(T)]   # contiguous rows
        self.toffs = torch.arange(0, n + 1, bag, dtype=torch.int64)
        if bag == 1:
            self.mod_ids, self.mod_offsets = self.t, None
        else:
            self.mod_ids = self.tids
            self.mod_offsets = [self.toffs] * T


def make_batches(sh, nbatches, seed):
    """nbatches batches of ids: [T, batch * bag] int64 each."""
    rng = np.random.default_rng(seed)
    T, R, n = sh["tables"], sh["rows"], sh["batch"] * sh["bag"]
    ids = np.empty((nbatches, T, n), np.int64)
    if sh["zipf"] > 0:
        p = np.arange(1, R + 1, dtype=np.float64) ** -sh["zipf"]
        cdf = np.cumsum(p / p.sum())
        for t in range(T):
            perm = rng.permutation(R)
            ranks = np.minimum(np.searchsorted(cdf, rng.random((nbatches,
                                                                n))), R - 1)
            ids[:, t] = perm[ranks]
    else:
        ids[:] = rng.integers(0, R, (nbatches, T, n))
    return [Batch(ids[k], sh["bag"]) for k in range(nbatches)]


# ------------------------------------------------------------------ sides

def open_store(d, sh, threads, optim, a):
    """A store whose DDR tier holds every row, its tables created."""
    T, R, D = sh["tables"], sh["rows"], sh["dim"]
    params = [dict(rows=R, dim=D, optim=optim, init="uniform",
                   seed=a.seed + t) for t in range(T)]
    # what gives every row a slot of its own: the row, its optimizer state
    # and ET_SLOT_META_BYTES of metadata a row (et_direct_bytes)
    direct = embtier.direct_bytes(params, ways=a.ways)
    s = embtier.Store(d, ddr_bytes=int(direct * a.ddr_factor),
                      ways=a.ways, threads=threads,
                      prefetch_thread=int(a.prefetch_thread))
    tables = [s.create_table(f"t{t}", **p) for t, p in enumerate(params)]
    return s, tables


def load_rows(tables, weights):
    """Every row of every table into weights[t] (torch's copy of the
    initial rows), which also brings every row into the DDR tier."""
    chunk = 1 << 16
    for t, w in zip(tables, weights):
        wn = w.numpy()
        for at in range(0, wn.shape[0], chunk):
            ids = np.arange(at, min(at + chunk, wn.shape[0]),
                            dtype=np.uint64)
            t.gather(ids, out=wn[at:at + ids.shape[0]])


def module_side(s, tables, lr, batches, G, prefetch_at):
    """The module's step: its prefetch of the next batch at the start of
    the step (as the README's loop makes it), after the forward, or none;
    forward; backward (the update)."""
    from embtier.nn import EmbeddingBagCollection
    ebc = EmbeddingBagCollection(s, tables, lr=lr)
    nb = len(batches)
    first = prefetch_at == "start"
    after = prefetch_at == "after-forward"

    def step(k, rec=None):
        b, nx = batches[k % nb], batches[(k + 1) % nb]
        t0 = now_ns()
        if first:
            ebc.prefetch(nx.mod_ids)
        t1 = now_ns()
        out = ebc(b.mod_ids, b.mod_offsets)
        t2 = now_ns()
        if after:
            ebc.prefetch(nx.mod_ids)
        t3 = now_ns()
        out.backward(G)
        t4 = now_ns()
        if rec is not None:
            rec.append((t4 - t0, t2 - t1, t4 - t3, t1 - t0 + t3 - t2))
        return out

    return step


def torch_side(weights, optim, lr, batches, G, stack):
    import torch
    bags = [torch.nn.EmbeddingBag.from_pretrained(
        w, freeze=False, mode="sum", sparse=True, include_last_offset=True)
        for w in weights]                    # the same storage as w
    params = [b.weight for b in bags]
    opt = torch.optim.SGD(params, lr=lr) if optim == "sgd" else \
        torch.optim.Adagrad(params, lr=lr)
    Gs = list(G.unbind(0))
    nb = len(batches)

    def step(k, rec=None):
        b = batches[k % nb]
        t0 = now_ns()
        outs = [bag(i, b.toffs) for bag, i in zip(bags, b.tids)]
        if stack:
            out = torch.stack(outs)
        t1 = now_ns()
        if stack:
            out.backward(G)
        else:
            torch.autograd.backward(outs, Gs)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = now_ns()
        if rec is not None:
            rec.append((t2 - t0, t1 - t0, t2 - t1, 0))
        return out if stack else outs

    return step, opt


# ------------------------------------------------------------------- gate

def rel_diff(a, b):
    """max over rows of max|a - b| / max|b| (relative to the row's largest
    magnitude; 0 for two equal rows), and max|a - b|."""
    d = np.abs(np.asarray(a, np.float64) - b).max(axis=-1)
    m = np.abs(b).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(d == 0, 0.0, d / m)
    return float(r.max(initial=0.0)), float(d.max(initial=0.0))


class Worst:
    """The largest relative and absolute differences seen."""

    def __init__(self):
        self.rel = self.abs = 0.0

    def add(self, a, b):
        r, d = rel_diff(a, b)
        self.rel, self.abs = max(self.rel, r), max(self.abs, d)

    def dict(self):
        return dict(max_rel=self.rel, max_abs=self.abs)


def gate(mstep, tstep, tables, weights, batches, G, lr, bag, steps, rtol,
         torch_rtol):
    """SGD from the same rows, against each other and against the exact
    result: with a fixed upstream gradient the rows after k steps are w0 -
    lr x (the sum of every gradient each id received), which float64
    gives to within rounding of float64.  The module's updates sum a
    repeated id's gradients, then apply them once; torch's sparse SGD adds
    them to the weight one by one (each rounded at the weight's
    magnitude), so with Zipf ids its hot rows drift by many float32 ulps
    from the exact result: the module is held to --rtol of the exact
    result, torch to --torch-rtol (catching a wrong setup, not rounding),
    and the two to --rtol of each other at the first forward (the same
    initial rows, the same summation order: equal)."""
    import torch
    T = len(tables)
    touched = [np.unique(np.concatenate([batches[k].np[t]
                                         for k in range(steps)]))
               for t in range(T)]
    exact = [w.detach().numpy()[u].astype(np.float64)
             for w, u in zip(weights, touched)]
    Gn = G.numpy().astype(np.float64)
    m_fwd, t_fwd, mt_fwd, first = Worst(), Worst(), Worst(), Worst()
    for k in range(steps):
        pos = [np.searchsorted(touched[t], batches[k].np[t])
               for t in range(T)]
        ref = np.stack([exact[t][pos[t]].reshape(-1, bag, exact[t].shape[1])
                        .sum(1) for t in range(T)])
        mo = mstep(k).detach().numpy()
        to = tstep(k)
        to = (to if isinstance(to, torch.Tensor) else torch.stack(to)) \
            .detach().numpy()
        m_fwd.add(mo, ref)
        t_fwd.add(to, ref)
        mt_fwd.add(mo, to)
        if k == 0:
            first.add(mo, to)
        for t in range(T):      # the exact update: each id its bag's grad
            np.add.at(exact[t], pos[t], -lr * np.repeat(Gn[t], bag, axis=0))
    m_rows, t_rows, mt_rows = Worst(), Worst(), Worst()
    for t, (tab, w) in enumerate(zip(tables, weights)):
        mine = tab.gather(touched[t].astype(np.uint64))
        theirs = w.detach().numpy()[touched[t]]
        m_rows.add(mine, exact[t])
        t_rows.add(theirs, exact[t])
        mt_rows.add(mine, theirs)
    ok = first.rel <= rtol and m_fwd.rel <= rtol and m_rows.rel <= rtol \
        and t_fwd.rel <= torch_rtol and t_rows.rel <= torch_rtol
    return dict(steps=steps, rows_checked=int(sum(len(u) for u in touched)),
                first_fwd=first.dict(), module_exact_fwd=m_fwd.dict(),
                module_exact_rows=m_rows.dict(), torch_exact_fwd=t_fwd.dict(),
                torch_exact_rows=t_rows.dict(),
                module_torch_fwd=mt_fwd.dict(),
                module_torch_rows=mt_rows.dict(), rtol=rtol,
                torch_rtol=torch_rtol, ok=ok)


def gate_lines(g):
    f = lambda d: f"{d['max_rel']:.2g} (abs {d['max_abs']:.2g})"  # noqa
    return [f"gate {'ok' if g['ok'] else 'FAILED'}, {g['steps']} SGD steps, "
            f"{g['rows_checked']} updated rows; max difference relative to "
            f"the row's largest value (abs):",
            f"  first forward, module vs torch: {f(g['first_fwd'])}",
            f"  module vs exact (float64): forward {f(g['module_exact_fwd'])}"
            f", rows {f(g['module_exact_rows'])}   [<= {g['rtol']:g}]",
            f"  torch vs exact (float64):  forward {f(g['torch_exact_fwd'])}"
            f", rows {f(g['torch_exact_rows'])}   [<= {g['torch_rtol']:g}]",
            f"  module vs torch:           forward {f(g['module_torch_fwd'])}"
            f", rows {f(g['module_torch_rows'])}"]


# ----------------------------------------------------------------- timing

def summary(rec):
    r = np.array(rec, dtype=np.float64) / 1e6
    med = np.median(r, axis=0)
    return dict(step_ms=med[0], fwd_ms=med[1], bwd_upd_ms=med[2],
                prefetch_ms=med[3], steps=len(rec),
                step_ms_min=float(r[:, 0].min()),
                step_ms_mean=float(r[:, 0].mean()))


def run_config(sh, threads, optim, weights, batches, G, a, tmp):
    import torch
    torch.set_num_threads(threads)
    sopt = "sgd" if optim == "sgd" else "rowwise_adagrad"
    lr = a.lr if optim == "sgd" else a.adagrad_lr
    d = tempfile.mkdtemp(prefix="s.", dir=tmp)
    res = dict(threads=threads, optim=optim)
    s = None
    try:
        s, tables = open_store(os.path.join(d, "store"), sh, threads, sopt,
                               a)
        t0 = time.monotonic()
        load_rows(tables, weights)
        st = s.stats()["ddr"]
        res["ddr"] = dict(capacity_bytes=st["capacity_bytes"],
                          resident_rows=st["resident_rows"],
                          direct_rows=st["direct_rows"],
                          evictions=st["evictions"])
        if st["evictions"]:
            log(f"  note: {st['evictions']} of {sh['tables'] * sh['rows']} "
                f"rows found their DDR set full (evicted while loading; read "
                f"again from the initializer when used): --ddr-factor or "
                f"--ways higher for none")
        log(f"  threads {threads} {optim}: store open, rows loaded in "
            f"{time.monotonic() - t0:.1f} s, {st['direct_rows']} of "
            f"{sh['tables'] * sh['rows']} rows direct-mapped")
        mstep = module_side(s, tables, lr, batches, G, a.prefetch_at)
        tstep, opt = torch_side(weights, optim, lr, batches, G,
                                a.torch_stack)
        k0 = 0
        if optim == "sgd" and a.gate_steps:
            g = gate(mstep, tstep, tables, weights, batches, G, lr,
                     sh["bag"], a.gate_steps, a.rtol, a.torch_rtol)
            res["gate"] = g
            for line in gate_lines(g):
                log("  " + line)
            if not g["ok"]:
                return res
            k0 = a.gate_steps
        for k in range(k0, k0 + a.warmup):       # untimed
            mstep(k)
            tstep(k)
        k0 += a.warmup
        before = s.stats()
        mrec, trec = [], []
        for r in range(a.rounds):
            order = ((mstep, mrec), (tstep, trec))
            for fn, rec in (order if r % 2 == 0 else order[::-1]):
                for k in range(k0, k0 + a.steps):
                    fn(k, rec)
            k0 += a.steps
        after = s.stats()
        res["module"] = summary(mrec)
        res["torch"] = summary(trec)
        n = len(mrec)
        res["module"]["lib_ms"] = (after["op_ns"] - before["op_ns"]) / n / 1e6
        res["ddr_misses_timed"] = after["ddr"]["misses"] - \
            before["ddr"]["misses"]
        res["ddr_evictions_timed"] = after["ddr"]["evictions"] - \
            before["ddr"]["evictions"]
        res["ratio"] = res["torch"]["step_ms"] / res["module"]["step_ms"]
        del opt
    finally:
        if s is not None:
            s.close()
        shutil.rmtree(d, ignore_errors=True)
    return res


def run_shape(name, a, tmp):
    import torch
    sh = dict(SHAPES[name])
    if a.quick:
        sh.update(QUICK[name])
    for k in ("tables", "rows", "dim", "batch", "bag", "zipf"):
        v = getattr(a, k)
        if v is not None:
            sh[k] = v
    T, R, D, B = sh["tables"], sh["rows"], sh["dim"], sh["batch"]
    log(f"shape {name}: {T} tables x {R} rows x dim {D}, batch {B}, "
        f"{sh['bag']} id{'s' if sh['bag'] > 1 else ''} a bag, "
        + (f"Zipf {sh['zipf']:g}" if sh["zipf"] > 0 else "uniform ids"))
    nsteps = a.gate_steps + a.warmup + a.rounds * a.steps
    batches = make_batches(sh, min(nsteps + 1, a.batches), a.seed)
    G = torch.from_numpy((0.1 * np.random.default_rng(a.seed + 1000)
                          .standard_normal((T, B, D))).astype(np.float32))
    weights = [torch.empty(R, D) for _ in range(T)]
    out = dict(shape=name, **sh, configs=[])
    for threads in a.threads:
        for optim in a.optim:
            r = run_config(sh, threads, optim, weights, batches, G, a, tmp)
            out["configs"].append(r)
            if "gate" in r and not r["gate"]["ok"]:
                return out, False
    return out, True


# ---------------------------------------------------------------- reports

def shape_title(r):
    ids = f"Zipf {r['zipf']:g}" if r["zipf"] > 0 else "uniform"
    return (f"shape {r['shape']}: {r['tables']} tables x {r['rows']} rows x "
            f"dim {r['dim']}, f32, batch {r['batch']}, {r['bag']} id"
            f"{'s' if r['bag'] > 1 else ''} a bag, {ids} ids, every row in "
            f"DDR")


def report(res):
    print(f"torch {res['torch_version']}; module prefetch: "
          f"{res['prefetch_at']}; {res['rounds']} rounds x {res['steps']} "
          f"steps a side; {res['clock']} clock; load average "
          f"{res['load_before']:.1f} before, {res['load_after']:.1f} after")
    print(f"{'median ms a step':<22}{'step':>9}{'fwd':>9}{'bwd+upd':>9}"
          f"{'prefetch':>9}{'lib':>8}   speed (torch/module)")
    for sr in res["shapes"]:
        print(shape_title(sr))
        for c in sr["configs"]:
            g = c.get("gate")
            if g:
                print(f"  {c['threads']} thr {c['optim']}: " +
                      "\n    ".join(gate_lines(g)))
            if "module" not in c:
                continue
            m, t = c["module"], c["torch"]
            lab = f"  {c['threads']} thr {c['optim']:<8}"
            print(f"{lab}{'module':<8}{m['step_ms']:9.2f}{m['fwd_ms']:9.2f}"
                  f"{m['bwd_upd_ms']:9.2f}{m['prefetch_ms']:9.2f}"
                  f"{m['lib_ms']:8.2f}   {c['ratio']:.2f}x")
            print(f"{'':<{len(lab)}}{'torch':<8}{t['step_ms']:9.2f}"
                  f"{t['fwd_ms']:9.2f}{t['bwd_upd_ms']:9.2f}")
            if c.get("ddr_misses_timed") or c.get("ddr_evictions_timed"):
                print(f"    ({c['ddr_misses_timed']} DDR misses, "
                      f"{c['ddr_evictions_timed']} evictions while timed)")
    print("lib: the store's own time in its calls (et_get_stats op_ns) a "
          "module step; adagrad: torch's element-wise Adagrad beside the "
          "store's row-wise one, speed only")


def report_procs(allres):
    """Each configuration: each side's best median step over K processes
    and the ratio of torch's best to the module's best."""
    rows = {}
    for res in allres:
        for sr in res["shapes"]:
            for c in sr["configs"]:
                if "module" not in c:
                    continue
                key = (sr["shape"], c["threads"], c["optim"])
                rows.setdefault(key, (sr, []))[1].append(c)
    out = []
    for (shape, threads, optim), (sr, cs) in rows.items():
        mb = min(c["module"]["step_ms"] for c in cs)
        tb = min(c["torch"]["step_ms"] for c in cs)
        out.append(dict(shape=shape, threads=threads, optim=optim,
                        module_best_ms=mb, torch_best_ms=tb, ratio=tb / mb,
                        module_ms=[c["module"]["step_ms"] for c in cs],
                        torch_ms=[c["torch"]["step_ms"] for c in cs],
                        ratios=[c["ratio"] for c in cs]))
    return out


def print_procs(best, K):
    print(f"over {K} processes: each side's best median step, ms")
    print(f"{'':<22}{'module':>9}{'torch':>9}   speed at the bests "
          f"(each process's)")
    for b in best:
        lab = f"  {b['shape']} {b['threads']} thr {b['optim']}"
        print(f"{lab:<22}{b['module_best_ms']:9.2f}{b['torch_best_ms']:9.2f}"
              f"   {b['ratio']:.2f}x ("
              f"{' '.join(f'{r:.2f}x' for r in b['ratios'])})")


# ------------------------------------------------------------------- main

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="A,B",
                    help="A, B or A,B (default)")
    ap.add_argument("--quick", action="store_true",
                    help="small tables and batches, fewer steps")
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--optim", default="sgd,adagrad",
                    help="sgd, adagrad or both (default)")
    for k, t in (("tables", int), ("rows", int), ("dim", int),
                 ("batch", int), ("bag", int), ("zipf", float)):
        ap.add_argument("--" + k, type=t, help=f"override the shape's {k}"
                        + (" (exponent; 0: uniform)" if k == "zipf" else ""))
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds of --steps steps a side (default 5, quick 3)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps a side a round (default 10, quick 4)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--gate-steps", type=int, default=3,
                    help="SGD steps of the correctness gate (0: none)")
    ap.add_argument("--rtol", type=float, default=1e-6,
                    help="the gate's tolerance for the module (relative to "
                    "a row's largest value)")
    ap.add_argument("--torch-rtol", type=float, default=1e-4,
                    help="the gate's tolerance for torch against the exact "
                    "result (its sparse SGD rounds each duplicate)")
    ap.add_argument("--batches", type=int, default=32,
                    help="distinct batches of ids, used in turn")
    ap.add_argument("--lr", type=float, default=0.01, help="SGD's")
    ap.add_argument("--adagrad-lr", type=float, default=0.01)
    ap.add_argument("--prefetch-at", choices=("start", "after-forward",
                                              "none"), default="start",
                    help="where the module's step prefetches the next batch: "
                    "at its start, before the forward (default, the README's "
                    "loop), after the forward, or not at all")
    ap.add_argument("--prefetch-thread", action="store_true",
                    help="the store's prefetch thread (prefetch_thread=1)")
    ap.add_argument("--torch-stack", action="store_true",
                    help="torch's forward stacks its outputs into [T, B, D]")
    ap.add_argument("--ways", type=int, default=32)
    ap.add_argument("--ddr-factor", type=float, default=1.0,
                    help="DDR bytes over the slots every row takes")
    ap.add_argument("--clock", choices=("wall", "process"), default="wall")
    ap.add_argument("--procs", type=int, default=1,
                    help="run the measurement in K fresh processes")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    a.shapes = [x.strip().upper() for x in a.shape.split(",") if x.strip()]
    a.threads = [int(x) for x in a.threads.split(",")]
    a.optim = [x.strip().lower() for x in a.optim.split(",")]
    if any(x not in SHAPES for x in a.shapes) or \
            any(x not in ("sgd", "adagrad") for x in a.optim):
        ap.error("--shape: A, B; --optim: sgd, adagrad")
    if a.rounds is None:
        a.rounds = 3 if a.quick else 5
    if a.steps is None:
        a.steps = 4 if a.quick else 10
    return a


def measure(a):
    """This process's measurement: (result dict, ok)."""
    global now_ns
    now_ns = {"wall": time.perf_counter_ns,
              "process": time.process_time_ns}[a.clock]
    tmp = tempfile.mkdtemp(prefix="embtier-bench-torch.",
                           dir=os.environ.get("TMPDIR", "/var/tmp"))
    import torch
    res = dict(torch_version=torch.__version__, clock=a.clock,
               prefetch_at=a.prefetch_at,
               prefetch_thread=a.prefetch_thread, torch_stack=a.torch_stack,
               rounds=a.rounds, steps=a.steps, load_before=os.getloadavg()[0],
               shapes=[])
    ok = True
    try:
        for name in a.shapes:
            r, ok = run_shape(name, a, tmp)
            res["shapes"].append(r)
            if not ok:
                break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_after"] = os.getloadavg()[0]
    return res, ok


def main():
    a = parse_args()
    if a.procs <= 1:
        res, ok = measure(a)
        if a.json:
            print(json.dumps(dict(ok=ok, **res), default=float))
        else:
            report(res)
        if not ok:
            log("correctness gate failed: see the differences above")
        sys.exit(0 if ok else 1)
    argv, skip = [], False
    for x in sys.argv[1:]:       # the same measurement, one process each
        if skip:
            skip = False
        elif x == "--procs":
            skip = True
        elif not x.startswith("--procs=") and x != "--json":
            argv.append(x)
    allres, ok = [], True
    for p in range(a.procs):
        log(f"process {p + 1} of {a.procs}")
        cp = subprocess.run([sys.executable, os.path.abspath(__file__)] +
                            argv + ["--procs", "1", "--json"],
                            stdout=subprocess.PIPE, check=False)
        if not cp.stdout.strip():
            log(f"process {p + 1} failed (status {cp.returncode})")
            sys.exit(1)
        r = json.loads(cp.stdout)
        allres.append(r)
        ok = ok and r["ok"] and cp.returncode == 0
        if not ok:
            break
    best = report_procs(allres)
    if a.json:
        print(json.dumps(dict(ok=ok, procs=allres, best=best),
                         default=float))
    else:
        for r in allres:
            report(r)
        print_procs(best, a.procs)
    if not ok:
        log("correctness gate failed: see the differences above")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
