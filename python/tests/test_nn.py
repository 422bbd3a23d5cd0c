"""The PyTorch module against a dense torch.nn.EmbeddingBag trained with
the same optimizer: outputs and weights equal to float tolerance."""

import numpy as np
import pytest
import torch

import embtier
from embtier.nn import EmbeddingBagCollection

ROWS, DIM, LR = 60, 6, 0.05


class RowwiseAdagrad:
    """FBGEMM's exact row-wise Adagrad on a dense weight, in torch: m +=
    mean(g^2) over the row; w -= lr g / (sqrt(m) + eps)."""

    def __init__(self, weight, lr, eps=1e-8):
        self.w, self.lr, self.eps = weight, lr, eps
        self.m = torch.zeros(weight.shape[0], dtype=torch.float64)

    @torch.no_grad()
    def step(self):
        g = self.w.grad.double()
        self.m += (g * g).mean(1)
        self.w -= (self.lr * g / (self.m.sqrt()[:, None] + self.eps)).float()
        self.w.grad = None


def batches(rng, ntables, nbags, steps):
    for _ in range(steps):
        ids, offs = [], []
        for _ in range(ntables):
            lens = rng.integers(0, 4, nbags)  # empty bags too
            o = np.concatenate([[0], np.cumsum(lens)])
            ids.append(torch.from_numpy(
                rng.integers(0, ROWS, int(o[-1])).astype(np.int64)))
            offs.append(torch.from_numpy(o.astype(np.int64)))
        yield ids, offs


@pytest.mark.parametrize("optim", ["sgd", "rowwise_adagrad"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_against_dense_embedding_bag(store_dir, optim, mode, calls):
    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    with embtier.Store(store_dir, ddr_bytes=4 << 20, hbm_bytes=2 << 10) as s:
        tables = [s.create_table(f"t{i}", rows=ROWS, dim=DIM, optim=optim,
                                 init="uniform", seed=i) for i in range(3)]
        ebc = EmbeddingBagCollection(s, tables, lr=LR, mode=mode)
        dense, opts = [], []
        for t in tables:
            w = torch.from_numpy(t.gather(np.arange(ROWS)))
            bag = torch.nn.EmbeddingBag.from_pretrained(
                w.clone(), freeze=False, mode=mode, include_last_offset=True)
            dense.append(bag)
            opts.append(torch.optim.SGD(bag.parameters(), lr=LR)
                        if optim == "sgd" else RowwiseAdagrad(bag.weight, LR))
        head = torch.randn(len(tables), DIM)
        for step, (ids, offs) in enumerate(batches(rng, len(tables), 8, 6)):
            if step % 2:  # one id per bag, as a [T, B] tensor
                ids = [torch.from_numpy(rng.integers(0, ROWS, 8))
                       for _ in tables]
                offs = [torch.arange(9) for _ in tables]
                out = ebc(torch.stack(ids))
                ebc.prefetch(torch.stack(ids))
            else:
                out = ebc(ids, offs)
                ebc.prefetch(ids)
            ref = torch.stack([b(i, o) for b, i, o in zip(dense, ids, offs)])
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
            # a loss that gives every bag a different gradient
            loss = lambda y: ((y * head[:, None, :]).sum(2) ** 2).sum()
            loss(out).backward()
            loss(ref).backward()
            for o in opts:
                o.step()
                if optim == "sgd":
                    o.zero_grad()
            assert ebc._anchor.grad is None
        for t, b in zip(tables, dense):
            torch.testing.assert_close(torch.from_numpy(t.gather(
                np.arange(ROWS))), b.weight.detach(), rtol=1e-5, atol=1e-6)


def test_forms_of_input(store_dir, calls):
    # slot_bytes: room for the larger rows of b, created second
    with embtier.Store(store_dir, ddr_bytes=4 << 20, slot_bytes=32) as s:
        a = s.create_table("a", rows=100, dim=4, init="uniform")
        b = s.create_table("b", rows=100, dim=8, init="uniform", seed=2)
        ebc = EmbeddingBagCollection(s, ["a", "a"], lr=0.1)
        ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
        with torch.no_grad():
            out = ebc(ids)
        assert out.shape == (2, 3, 4) and not out.requires_grad
        np.testing.assert_array_equal(out[1].numpy(), a.gather([4, 5, 6]))
        # mixed dims: a tuple of [B, D_t]
        mixed = EmbeddingBagCollection(s, [a, b], lr=0.1)
        outs = mixed([torch.tensor([1, 2]), torch.tensor([3])],
                     [torch.tensor([0, 1, 2]), torch.tensor([0, 0, 1])])
        assert [o.shape for o in outs] == [(2, 4), (2, 8)]
        np.testing.assert_array_equal(outs[1][0].detach().numpy(), 0)
        np.testing.assert_array_equal(outs[1][1].detach().numpy(),
                                      b.gather([3])[0])
        # the ids are copied at forward: reusing the buffer is safe
        before = a.gather([1])
        buf = torch.tensor([[1], [1]])
        y = ebc(buf)
        buf.fill_(7)
        y.sum().backward()
        np.testing.assert_allclose(a.gather([1]), before - 2 * 0.1,
                                   rtol=1e-6)
        with pytest.raises(embtier.EmbtierError) as e:
            mixed([torch.tensor([1]), torch.tensor([1, 2])])
        assert e.value.code < 0
        with pytest.raises(embtier.EmbtierError) as e:
            ebc(torch.tensor([[1], [100]]))
        assert e.value.code == embtier.ET_EROWRANGE
        assert "'a'" in str(e.value)  # names the table
        with pytest.raises(embtier.EmbtierError):
            ebc(torch.tensor([[1], [-1]]))
        with pytest.raises(embtier.EmbtierError):
            ebc(torch.tensor([[1.0], [2.0]]))
        with pytest.raises(embtier.EmbtierError):
            ebc(torch.tensor([[1], [2], [3]]))
        with torch.no_grad():  # any integer type; strided is fine
            narrow = torch.tensor([[4, 9, 5], [6, 9, 7]], dtype=torch.int32)
            np.testing.assert_array_equal(ebc(narrow[:, ::2])[1].numpy(),
                                          a.gather([6, 7]))
        ebc.prefetch(torch.tensor([[5, 6], [7, 8]]))
        ebc.prefetch([np.array([1]), [2, 3]])
        assert s.stats()["prefetch_calls"] == 2


def test_pending_graphs(store_dir, calls):
    """Two forwards before their backwards (gradient accumulation), in
    either order: each backward updates the rows of its own forward's ids
    and the outputs are never overwritten; a second backward through one
    forward is refused. The same steps through the per-table calls of
    Store give the same bits."""
    rng = np.random.default_rng(3)
    ids = [torch.from_numpy(rng.integers(0, ROWS, (2, 5))) for _ in range(4)]
    grads = [torch.from_numpy(rng.standard_normal((2, 5, DIM),
                                                  dtype=np.float32))
             for _ in range(4)]
    weights = []
    for way in ("module", "store"):
        with embtier.Store(f"{store_dir}-{way}", ddr_bytes=4 << 20) as s:
            tables = [s.create_table(f"t{i}", rows=ROWS, dim=DIM,
                                     optim="rowwise_adagrad",
                                     init="uniform", seed=i)
                      for i in range(2)]
            ebc = EmbeddingBagCollection(s, tables, lr=LR)
            one = np.arange(6, dtype=np.uint64)
            for order in ((0, 1), (1, 0)):
                k = 2 * order[0]
                if way == "store":
                    for j in order:
                        for t in range(2):
                            s.update_pooled(tables[t], ids[k + j][t].numpy(),
                                            one, grads[k + j][t].numpy(),
                                            lr=LR)
                    continue
                ys = [ebc(ids[k]), ebc(ids[k + 1])]
                saved = [y.detach().clone() for y in ys]
                for j in order:
                    ys[j].backward(grads[k + j], retain_graph=True)
                for y, c in zip(ys, saved):
                    assert torch.equal(y.detach(), c)
                with pytest.raises(RuntimeError, match="second backward"):
                    ys[0].backward(grads[k])
            weights.append([t.gather(np.arange(ROWS)) for t in tables])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
