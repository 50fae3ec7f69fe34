"""flash_attn's public functions on burst, so that burst can stand in for ``flash_attn``:

    import burst.flash_attn_compat as flash_attn        # was: import flash_attn
    from burst.flash_attn_compat import flash_attn_func, flash_attn_varlen_func

(``burst.flash_attn_compat.install()`` also makes ``import flash_attn`` and
``from flash_attn.flash_attn_interface import ...`` resolve here.) Same names, argument order and
return conventions as flash_attn 2.x: out; (out, softmax_lse, None) with return_attn_probs; lse
[B, H, S_q] (varlen [H, T_q]); causal / window_size bottom-right aligned. Single process, as in
flash_attn; each function also accepts burst's keywords (comm=..., strategy=..., ...). CPU torch
tensors (float32, bfloat16, float16) or numpy arrays (float32, float16), out in the input dtype,
lse float32; dropout_p, softcap and alibi_slopes raise NotImplementedError.
"""
import sys

from . import (attn_func, attn_kvpacked_func, attn_qkvpacked_func, attn_varlen_func,
               attn_varlen_kvpacked_func, attn_varlen_qkvpacked_func, attn_with_kvcache)

flash_attn_func = attn_func
flash_attn_qkvpacked_func = attn_qkvpacked_func
flash_attn_kvpacked_func = attn_kvpacked_func
flash_attn_varlen_func = attn_varlen_func
flash_attn_varlen_qkvpacked_func = attn_varlen_qkvpacked_func
flash_attn_varlen_kvpacked_func = attn_varlen_kvpacked_func
flash_attn_with_kvcache = attn_with_kvcache

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]

flash_attn_interface = sys.modules[__name__]   # flash_attn.flash_attn_interface holds the same


def install():
    """Makes ``import flash_attn`` and ``import flash_attn.flash_attn_interface`` resolve to this
    module (process-wide), so code calling flash_attn's functions runs without edits (single
process; tests/py/test_dropin.py). Returns the module."""
    module = sys.modules[__name__]
    sys.modules["flash_attn"] = module
    sys.modules["flash_attn.flash_attn_interface"] = module
    return module
