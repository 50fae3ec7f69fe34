#!/usr/bin/env python3
"""Are two `burst-lm train` runs the same run? Exit 0 when they are bitwise equal, 1 (naming the
first difference) when not.

    python3 tests/lm_runs_equal.py RUN_DIR_A RUN_DIR_B

Compares each run directory's checkpoint.safetensors (read and checksum-verified by
scripts/read_checkpoint.py): the same tensor names, shapes and dtypes, every tensor's bytes equal
(weights and AdamW moments), the same step, AdamW step count, model and run fingerprint; and
train_log.jsonl against each other and against the checkpoint's history, line by line, on every
field except the machine's measurements (seconds, tokens_per_second, attention_share,
peak_rss_bytes). Losses are
compared as the JSON numbers written (shortest round-trip form of the double: equal text means
equal bits). Used by tests/multinode_faults.sh resume (a killed and resumed run against an
uninterrupted one).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch  # noqa: E402
from read_checkpoint import load  # noqa: E402

MEASURED = ("seconds", "tokens_per_second", "attention_share", "peak_rss_bytes")


def records(rows):
    return [{k: v for k, v in r.items() if k not in MEASURED} for r in rows]


def bits(t):
    return t.contiguous().view(torch.uint8) if t.numel() else t


def main(a, b):
    ta, ma = load(os.path.join(a, "checkpoint.safetensors"))
    tb, mb = load(os.path.join(b, "checkpoint.safetensors"))
    if list(ta) != list(tb):
        return f"tensor names differ: {sorted(set(ta) ^ set(tb))}"
    nbytes = 0
    for name, x in ta.items():
        y = tb[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"tensor {name}: {x.dtype} {list(x.shape)} vs {y.dtype} {list(y.shape)}"
        if not torch.equal(bits(x), bits(y)):
            diff = (x.double() - y.double()).abs().max().item()
            return f"tensor {name} differs (max |a - b| = {diff:.3g})"
        nbytes += x.numel() * x.element_size()
    ha, hb = ma["burst"], mb["burst"]
    for key in ("step", "adam_t", "model", "run"):
        if ha.get(key) != hb.get(key):
            return f"checkpoint {key}: {ha.get(key)} vs {hb.get(key)}"
    logs = []
    for run, header in ((a, ha), (b, hb)):
        with open(os.path.join(run, "train_log.jsonl")) as f:
            log = records(json.loads(line) for line in f if line.strip())
        if log != records(header["history"]):
            return f"{run}: train_log.jsonl does not match its checkpoint's history"
        logs.append(log)
    if len(logs[0]) != len(logs[1]) or len(logs[0]) != ha["step"]:
        return f"log lengths {len(logs[0])} and {len(logs[1])}, checkpoint step {ha['step']}"
    for ra, rb in zip(*logs):
        if ra != rb:
            return f"step {ra.get('step')}: {json.dumps(ra)} vs {json.dumps(rb)}"
    print(f"equal: {len(ta)} tensors ({nbytes} bytes) bit for bit, step {ha['step']}, AdamW t {ha['adam_t']}, "
          f"{len(logs[0])} log lines (loss, lr, window, bytes), final loss {logs[0][-1]['loss']!r}")
    return None


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    why = main(sys.argv[1], sys.argv[2])
    if why:
        print(f"lm_runs_equal: NOT equal: {why}", file=sys.stderr)
        sys.exit(1)
