"""embtier: Python bindings of libembtier, the tiered (HBM / DDR / NVMe)
embedding store.

    import embtier
    with embtier.Store("/data/store", ddr_bytes=1 << 30) as s:
        t = s.create_table("user", rows=1 << 33, dim=64,
                           optim="rowwise_adagrad", init="uniform")
        out = t.gather_pooled(ids, offsets)          # numpy in, numpy out
        t.update_pooled(ids, offsets, grads, lr=0.01)
        k = s.create_table("item", keyed=True, dim=64)  # any u64 ids
        k.gather(np.array([-1, 2**62]))   # int64: -1 is 2**64 - 1

embtier.nn.EmbeddingBagCollection is the PyTorch module (import
embtier.nn; it needs torch, the rest only numpy).  Constants (ET_F16,
ET_ENOTABLE, ...) are read from include/embtier.h at import.
"""

from . import _abi
from .store import (EmbtierError, Serving, Store, Table, apply_delta, as_ids,
                    checkpoint_info, direct_bytes, error_name, export_delta,
                    read_rows, strerror)

__version__ = _abi.LIB_VERSION
LIB_PATH = _abi.LIB_PATH
HEADER_PATH = _abi.HEADER.path

globals().update({k: v for k, v in _abi.CONSTS.items()
                  if k.startswith("ET_")})

__all__ = ["EmbtierError", "Serving", "Store", "Table", "apply_delta", "as_ids",
           "checkpoint_info", "direct_bytes", "error_name", "export_delta",
           "read_rows",
           "strerror", "LIB_PATH", "HEADER_PATH"] + \
    [k for k in _abi.CONSTS if k.startswith("ET_")]
