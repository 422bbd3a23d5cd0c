"""A short run of the DLRM example learns: the held-out AUC of the model
trained through the store beats chance by a wide margin, and beats the
same model whose embedding rows are never updated (lr 0)."""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_example():
    spec = importlib.util.spec_from_file_location(
        "dlrm", os.path.join(HERE, "..", "examples", "dlrm.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def run(dlrm, store_dir, emb_lr):
    args = dlrm.parse_args([
        "--tables", "4", "--rows", "200000", "--dim", "8", "--batch", "128",
        "--steps", "400", "--hot", "300", "--eval-samples", "4096",
        "--log-every", "0", "--hbm-mb", "0.25", "--ddr-mb", "2",
        "--emb-lr", str(emb_lr), "--dir", store_dir + str(emb_lr)])
    return dlrm.train(args, out=lambda *a: None)


def test_training_learns(store_dir):
    dlrm = load_example()
    res = run(dlrm, store_dir, 0.05)
    frozen = run(dlrm, store_dir, 0.0)
    assert res["eval_auc"] > 0.70, res
    assert res["eval_auc"] > frozen["eval_auc"] + 0.03, (res, frozen)
    assert res["eval_auc"] < res["teacher_auc"]


def test_criteo_tsv(store_dir, tmp_path):
    """The example reads Criteo TSV: empty fields, a malformed line."""
    import numpy as np
    rng = np.random.default_rng(1)
    lines = []
    for i in range(600):
        label = int(rng.random() < 0.3)
        ints = [str(rng.integers(0, 50)) if rng.random() < 0.8 else ""
                for _ in range(13)]
        cats = [f"{rng.integers(0, 2**32):08x}" if rng.random() < 0.9
                else "" for _ in range(26)]
        lines.append("\t".join([str(label)] + ints + cats))
    lines.insert(100, "not\ta\tcriteo\tline")
    path = tmp_path / "train.txt"
    path.write_text("\n".join(lines) + "\n")
    dlrm = load_example()
    args = dlrm.parse_args([
        "--data", str(path), "--rows", "1000", "--dim", "4", "--batch", "64",
        "--steps", "20", "--eval-samples", "128", "--log-every", "0",
        "--ddr-mb", "4", "--hbm-mb", "0", "--dir", store_dir])
    seen = []
    res = dlrm.train(args, out=seen.append)
    assert 0.0 <= res["eval_auc"] <= 1.0
    assert "malformed-lines: 1" in seen
    c = dlrm.Criteo(str(path), [1000] * 26)
    b = c.next(3)
    assert b.dense.shape == (3, 13) and len(b.ids) == 26
    assert all(o.shape == (4,) and int(o[-1]) == len(i)
               for i, o in zip(b.ids, b.offsets))
    assert all(0 <= int(x) < 1000 for i in b.ids for x in i)
