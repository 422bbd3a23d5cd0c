#!/usr/bin/python3
"""A small DLRM in PyTorch whose embedding tables live in an embtier store:
a template for training a recommendation model through the store.

    /usr/bin/python3 python/examples/dlrm.py                 # synthetic clicks
    /usr/bin/python3 python/examples/dlrm.py --data train.txt  # Criteo TSV

The model is DLRM's (Naumov et al., 2019): a bottom MLP over the 13 dense
features, one pooled embedding bag per categorical feature (26 tables),
the pairwise dot products of those T + 1 vectors, and a top MLP to one
logit, trained with binary cross-entropy.  The dense part is ordinary
torch (Adagrad); the tables are embtier.nn.EmbeddingBagCollection, whose
backward applies the store's row-wise Adagrad in place of a dense
gradient.  The next batch is made, and its rows prefetched, before each
step, so the store brings them up while this one computes.

The synthetic data plants a teacher, like embtier-train's (whose generator
this follows in spirit, not bit for bit): for each table, ids drawn from a
Zipf law over `--hot` ids scattered over the table's rows; for each
(table, id) hidden values a and q[3] in [-1, 1); dense features that are
Criteo-like counts of a latent uniform z; and a click with probability
sigmoid(-1 + w.z/sqrt(13) + 2 sum_t a_t/sqrt(T)
+ 1.5 sum_t <q_t, q_t+1>/sqrt(T)).  The teacher's own AUC on the held-out
set is printed beside the model's: the best any model can do.

Criteo TSV (Kaggle or Terabyte): label, 13 integer and 26 hex categorical
fields per line; integers become log(1 + max(x, 0)), categories are hashed
into their table's rows, an empty one is an empty bag.  The first
--eval-samples lines are held out; training wraps around the rest.
"""

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import embtier  # noqa: E402
from embtier.nn import EmbeddingBagCollection  # noqa: E402

NDENSE = 13
NCAT = 26


# ---------------------------------------------------------------- data


class Batch:
    """dense [B, 13] float32, label [B], and per table ids (int64) and
    offsets (int64, B + 1), or, with one id per bag (offsets None), the
    ids as one [T, B] int64 tensor (the module's fastest form); truth: the
    teacher's logit (synthetic)."""

    def __init__(self, dense, label, ids, offsets, truth=None):
        self.dense = torch.from_numpy(dense)
        self.label = torch.from_numpy(label)
        self.ids = torch.from_numpy(np.stack(ids)) if offsets is None else \
            [torch.from_numpy(i) for i in ids]
        self.offsets = None if offsets is None else \
            [torch.from_numpy(o) for o in offsets]
        self.truth = truth


class Synthetic:
    """Clicks from a planted teacher; stream 0 trains, 1 is held out."""

    def __init__(self, rows, hot, zipf, seed, stream):
        self.T = len(rows)
        root = np.random.default_rng(seed)
        self.w = root.standard_normal(NDENSE)
        self.m = 2.0 ** (np.arange(NDENSE) % 6)
        # per table: the hot ids (distinct rows) and their teacher values
        self.hot_ids = [root.choice(r, min(hot, r), replace=False)
                        for r in rows]
        self.a = [root.uniform(-1, 1, len(h)) for h in self.hot_ids]
        self.q = [root.uniform(-1, 1, (len(h), 3)) for h in self.hot_ids]
        ranks = np.arange(1, hot + 1, dtype=np.float64)
        p = ranks ** -zipf
        self.cdf = np.cumsum(p / p.sum())
        self.rng = np.random.default_rng([seed, stream + 1])

    def next(self, n):
        rng = self.rng
        u = rng.random((n, NDENSE))
        dense = np.log1p(np.floor(-self.m * np.log1p(-u))).astype(np.float32)
        z = math.sqrt(12) * (u - 0.5)
        logit = -1.0 + z @ self.w / math.sqrt(NDENSE)
        ranks = [np.minimum(np.searchsorted(self.cdf, rng.random(n)),
                            len(h) - 1) for h in self.hot_ids]
        s = math.sqrt(self.T)
        for t in range(self.T):
            logit += 2.0 * self.a[t][ranks[t]] / s
            nxt = (t + 1) % self.T
            logit += 1.5 * (self.q[t][ranks[t]] *
                            self.q[nxt][ranks[nxt]]).sum(1) / s
        label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        ids = [h[r].astype(np.int64) for h, r in zip(self.hot_ids, ranks)]
        return Batch(dense, label, ids, None, truth=logit)


def _mix64(x):
    """splitmix64's finalizer on uint64 arrays."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Criteo:
    """Criteo TSV lines; malformed lines are counted and skipped."""

    def __init__(self, path, rows, salt=1):
        self.f = open(path, "rb")
        self.rows = np.array(rows, dtype=np.uint64)
        self.T = len(rows)
        self.salt = np.uint64(salt)
        self.start = 0
        self.malformed = 0

    def set_start(self):
        self.start = self.f.tell()

    def _lines(self, n):
        out, passes = [], 0
        while len(out) < n:
            line = self.f.readline()
            if not line:
                passes += 1
                if passes > 1 and not out:
                    raise ValueError("no valid line in the file")
                self.f.seek(self.start)
                continue
            fields = line.rstrip(b"\r\n").split(b"\t")
            if len(fields) != 1 + NDENSE + NCAT or \
                    fields[0] not in (b"0", b"1"):
                self.malformed += 1
                continue
            out.append(fields)
        return out

    def next(self, n):
        lines = self._lines(n)
        label = np.array([f[0] == b"1" for f in lines], np.float32)
        dense = np.zeros((n, NDENSE), np.float32)
        ids, offsets = [], []
        for i, f in enumerate(lines):
            for j in range(NDENSE):
                if f[1 + j]:
                    try:
                        dense[i, j] = math.log1p(max(int(f[1 + j]), 0))
                    except ValueError:
                        pass
        for t in range(self.T):
            col = [f[1 + NDENSE + t] for f in lines]
            have = np.array([bool(c) for c in col])
            vals = np.array([int(c, 16) if c else 0 for c in col],
                            dtype=np.uint64)[have]
            h = _mix64(vals ^ _mix64(np.uint64(t) + self.salt))
            ids.append((h % self.rows[t]).astype(np.int64))
            offsets.append(np.concatenate([[0], np.cumsum(have)])
                           .astype(np.int64))
        return Batch(dense, label, ids, offsets)


# --------------------------------------------------------------- model


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, ebc, dim, bottom, top):
        super().__init__()
        self.ebc = ebc
        T = len(ebc.tables)
        self.bottom = mlp([NDENSE] + bottom + [dim], True)
        npairs = (T + 1) * T // 2
        self.top = mlp([dim + npairs] + top + [1], False)
        self.register_buffer("iu", torch.triu_indices(T + 1, T + 1, 1))

    def forward(self, batch):
        x = self.bottom(batch.dense)                      # [B, D]
        emb = self.ebc(batch.ids, batch.offsets)          # [T, B, D]
        v = torch.cat([x.unsqueeze(0), emb]).transpose(0, 1)  # [B, T+1, D]
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


# ------------------------------------------------------------- metrics


def auc(score, label):
    """Area under the ROC curve (ties share their average rank)."""
    score = np.asarray(score, np.float64)
    label = np.asarray(label) > 0.5
    npos = label.sum()
    nneg = len(label) - npos
    if not npos or not nneg:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    return float((r[label].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def logloss(logit, label):
    logit = torch.as_tensor(logit, dtype=torch.float64)
    label = torch.as_tensor(label, dtype=torch.float64)
    return float(torch.nn.functional.binary_cross_entropy_with_logits(
        logit, label))


def evaluate(model, held_out):
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(b) for b in held_out]).numpy()
    model.train()
    label = np.concatenate([b.label.numpy() for b in held_out])
    return logloss(logits, label), auc(logits, label)


# -------------------------------------------------------------- training


def table_rows(args):
    """--rows for every table, else log-spaced between 1e6 and 1e7 (the
    lazy initializer makes any size free until a row is touched)."""
    if args.rows:
        return [args.rows] * args.tables
    if args.tables == 1:
        return [1000000]
    return [int(round(10 ** (6 + t / (args.tables - 1))))
            for t in range(args.tables)]


def train(args, out=print):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rows = table_rows(args)
    tmp = None
    d = args.dir
    if not d:
        tmp = tempfile.mkdtemp(prefix="embtier-dlrm.", dir=os.environ.get(
            "TMPDIR", "/var/tmp"))
        d = os.path.join(tmp, "store")
    try:
        with embtier.Store(d, hbm_bytes=int(args.hbm_mb * 2**20),
                           ddr_bytes=int(args.ddr_mb * 2**20),
                           prefetch_thread=args.prefetch_thread) as store:
            return _train(args, out, store, rows)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _train(args, out, store, rows):
    tables = [store.create_table(f"cat{t}", rows=r, dim=args.dim,
                                 optim="rowwise_adagrad", init="uniform",
                                 init_scale=args.init_scale or 0.0,
                                 seed=args.seed + t)
              for t, r in enumerate(rows)]
    ebc = EmbeddingBagCollection(store, tables, lr=args.emb_lr)
    model = DLRM(ebc, args.dim, args.bottom, args.top)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    if args.data:
        src = Criteo(args.data, rows)
        held = [src.next(min(args.batch * 4, args.eval_samples - k))
                for k in range(0, args.eval_samples, args.batch * 4)]
        src.set_start()
    else:
        src = Synthetic(rows, args.hot, args.zipf, args.seed, 0)
        ev = Synthetic(rows, args.hot, args.zipf, args.seed, 1)
        held = [ev.next(min(args.batch * 4, args.eval_samples - k))
                for k in range(0, args.eval_samples, args.batch * 4)]
    lossf = torch.nn.BCEWithLogitsLoss()
    nxt = src.next(args.batch)
    t0 = time.perf_counter()
    run_loss = 0.0
    for step in range(1, args.steps + 1):
        batch = nxt
        if step < args.steps:
            nxt = src.next(args.batch)
            if args.prefetch:
                ebc.prefetch(nxt.ids)
        loss = lossf(model(batch), batch.label)
        opt.zero_grad()
        loss.backward()          # also updates the store's rows
        opt.step()
        run_loss += float(loss)
        if args.log_every and step % args.log_every == 0:
            st = store.stats()
            top = st["hbm"] if st["hbm"]["capacity_rows"] else st["ddr"]
            hits = top["hits"] / max(1, top["hits"] + top["misses"])
            out(f"step {step}: train-logloss {run_loss / args.log_every:.5f} "
                f"top-tier-hit {hits:.4f} "
                f"{(time.perf_counter() - t0) / step * 1e3:.2f} ms/step")
            run_loss = 0.0
    secs = time.perf_counter() - t0
    ll, a = evaluate(model, held)
    res = {"eval_logloss": ll, "eval_auc": a,
           "ms_per_step": secs / args.steps * 1e3}
    out(f"steps: {args.steps} batch {args.batch} tables {len(rows)} "
        f"dim {args.dim}, {res['ms_per_step']:.2f} ms/step")
    out(f"eval-logloss: {ll:.5f}")
    out(f"eval-auc: {a:.5f}")
    if not args.data:
        truth = np.concatenate([b.truth for b in held])
        label = np.concatenate([b.label.numpy() for b in held])
        res["teacher_auc"] = auc(truth, label)
        out(f"teacher: logloss {logloss(truth, label):.5f} auc "
            f"{res['teacher_auc']:.5f} (the planted truth)")
    else:
        out(f"malformed-lines: {src.malformed}")
    st = store.stats()
    out(f"store: {st['requested']} ids looked up, {st['nvme_rows_read']} "
        f"rows read from disk, {st['rows_lazy']} from the initializer, "
        f"{st['prefetch_hits']} prefetch hits, peak library memory "
        f"{st['mem_peak_bytes'] / 2**20:.1f} MiB")
    return res


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="Criteo TSV file (default: synthetic)")
    ap.add_argument("--dir", help="store directory (default: a temporary "
                    "one, removed at the end)")
    ap.add_argument("--tables", type=int, default=NCAT)
    ap.add_argument("--rows", type=int, default=0,
                    help="rows of every table (default: 1e6 .. 1e7)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=0.02, help="dense Adagrad")
    ap.add_argument("--emb-lr", type=float, default=0.05,
                    help="the store's row-wise Adagrad")
    ap.add_argument("--init-scale", type=float, default=0.0,
                    help="uniform init bound (0: 1/sqrt(dim))")
    ap.add_argument("--bottom", type=int, nargs="*", default=[64])
    ap.add_argument("--top", type=int, nargs="*", default=[64])
    ap.add_argument("--hbm-mb", type=float, default=4)
    ap.add_argument("--ddr-mb", type=float, default=32)
    ap.add_argument("--hot", type=int, default=3000,
                    help="synthetic: distinct ids per table")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--eval-samples", type=int, default=16384)
    ap.add_argument("--log-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-prefetch", dest="prefetch", action="store_false")
    ap.add_argument("--prefetch-thread", type=int, choices=(0, 1), default=1,
                    help="1: the prefetch's work runs on the store's thread, "
                    "beside the dense step (et_store_config.prefetch_thread)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
