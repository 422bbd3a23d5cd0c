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
