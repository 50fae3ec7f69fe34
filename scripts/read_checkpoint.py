#!/usr/bin/env python3
"""Load a `burst-lm train` checkpoint (safetensors layout) into torch, without the safetensors package.

Layout (apps/lm/checkpoint.h): u64 little-endian N, N bytes of JSON header, then raw
little-endian tensor data. The header maps tensor names to {"dtype", "shape", "data_offsets"
[begin, end) into the data section}; "__metadata__" holds "format", "burst" (the model config,
step and training history as JSON text) and "checksum" (FNV-1a 64 of the "burst" text followed by
the data section), which is verified here.

    python3 scripts/read_checkpoint.py runs/kjv/checkpoint.safetensors      # summary
    python3 scripts/read_checkpoint.py CKPT --json                          # per-tensor sums
    from read_checkpoint import load; tensors, meta = load(path)                     # in Python
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32}


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    """FNV-1a 64, as burst::lm::fnv1a64 (apps/lm/data.h). Pure Python: ~1 s per 10 MB."""
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def load(path, verify=True):
    """Returns ({name: tensor}, metadata) with metadata["burst"] parsed from JSON text.
    Raises ValueError for a file that is not in the layout or fails its checksum."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: only {len(raw)} bytes")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} past the end of {len(raw)} bytes")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name} spans [{begin}, {end}) outside {len(data)} data bytes")
        x = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[t["dtype"]]) if end > begin \
            else torch.empty(0, dtype=DTYPES[t["dtype"]])
        tensors[name] = x.reshape(t["shape"])
    if verify and "checksum" in meta:
        have = f"{fnv1a64(bytes(data), fnv1a64(meta['burst'].encode())):016x}"
        if have != meta["checksum"]:
            raise ValueError(f"{path}: checksum mismatch (stored {meta['checksum']}, computed {have})")
    if "burst" in meta:
        meta["burst"] = json.loads(meta["burst"])
    return tensors, meta


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    tensors, meta = load(argv[1])
    if "--json" in argv:   # machine-readable: shapes and fp64 sums (tests/test_lm_model.cc reads it)
        print(json.dumps({"metadata": meta, "tensors": {k: {"shape": list(v.shape), "sum": v.double().sum().item()}
                                                         for k, v in tensors.items()}}))
        return 0
    burst = meta.get("burst", {})
    print(f"{argv[1]}: {meta.get('format', '?')}, step {burst.get('step', '?')}, checksum {meta.get('checksum', '-')} ok")
    print(f"model: {json.dumps(burst.get('model', {}))}")
    weights = {k: v for k, v in tensors.items() if not k.startswith("adam_")}
    print(f"{len(weights)} weight tensors, {sum(v.numel() for v in weights.values()):,} parameters "
          f"(+{len(tensors) - len(weights)} optimizer-state tensors)")
    for k, v in weights.items():
        print(f"  {k:<20} {str(list(v.shape)):<14} {str(v.dtype):<14} mean|x| {v.abs().mean().item():.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
