"""PyTorch SDPA on a GPU, one record per backend: `bench/torch_sdpa.py --device cuda`.

Times torch.nn.functional.scaled_dot_product_attention on q, k, v [B, H, S, D] (contiguous, on
the current CUDA device) with one backend forced at a time (torch.nn.attention.sdpa_kernel:
cudnn = CUDNN_ATTENTION, flash = FLASH_ATTENTION, efficient = EFFICIENT_ATTENTION, math = MATH),
for each (dtype, H x D, mask, pass). GPU time from CUDA events around each repeat (median of
--repeats after --warmup); FLOPs with burst's formula, as `burst bench kernel --device cuda`
reports them: forward 4·B·H·D·visible_pairs, backward 2.5× that (visible pairs: S² full,
S(S+1)/2 causal). Backward: the forward graph is built once (untimed) and
out.backward(dout, retain_graph=True) is timed, gradients cleared between repeats (untimed).
The math backend materialises the S x S scores in fp32; it is skipped, with a record saying so,
where they would exceed --math-max-gib. A backend that refuses a shape or dtype gives a record
with its error. Without torch or a usable GPU: one record saying why ("skipped"), exit 0.
"""
import json
import platform
import statistics

BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
            "math": "MATH"}


def skip(reason):
    print(json.dumps({"bench": "torch_sdpa", "device": "cuda", "skipped": reason}), flush=True)
    return 0


def shapes_of(a):
    """The (H, D) pairs: --heads/--dim when given, else --shapes, else (8, 64) and (32, 128)."""
    if a.heads or a.dim:
        return [(a.heads or 8, a.dim or 64)]
    out = []
    for item in (a.shapes or "8x64,32x128").split(","):
        h, _, d = item.partition("x")
        if not h.isdigit() or not d.isdigit():
            raise SystemExit(f"--shapes: '{item}' is not HxD (e.g. 8x64)")
        out.append((int(h), int(d)))
    return out


def gpu_times(torch, fn, warmup, repeats, before=None):
    """Seconds of each repeat from CUDA events recorded on the current stream around fn()."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def run(a):
    try:
        import torch
    except ImportError as e:
        return skip(f"torch not importable: {e}")
    if not torch.cuda.is_available():
        return skip(f"torch {torch.__version__} sees no usable CUDA GPU (torch.cuda.is_available() is False)")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return skip(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel (torch >= 2.3 needed)")
    F = torch.nn.functional
    dev = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(dev)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    B, S = a.batch, a.seq or 32768
    common = {"bench": "torch_sdpa", "device": "cuda", "gpu_name": props.name,
              "gpu_memory_bytes": props.total_memory, "torch_version": torch.__version__,
              "cuda_version": torch.version.cuda, "cudnn_version": torch.backends.cudnn.version(),
              "python": platform.python_version(), "layout": "[B,H,S,D] contiguous", "warmup": a.warmup,
              "repeats": a.repeats, "timer": "cuda events"}
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    for dname in (a.dtypes or "bf16").split(","):
        if dname not in dtypes:
            raise SystemExit(f"--dtypes: '{dname}' (valid: fp32, bf16, fp16)")
        dt = dtypes[dname]
        for H, D in shapes_of(a):
            q, k, v, dout = (torch.rand(B, H, S, D, device=dev, generator=gen).mul_(2).sub_(1).to(dt)
                             for _ in range(4))
            for mask in a.masks.split(","):
                causal = mask == "causal"
                pairs = S * (S + 1) // 2 if causal else S * S
                fwd_flop = 4.0 * B * H * D * pairs
                for bname in a.backends.split(","):
                    if bname not in BACKENDS:
                        raise SystemExit(f"--backends: '{bname}' (valid: {', '.join(BACKENDS)})")
                    for pas in a.passes.split(","):
                        rec = dict(common, backend=bname, impl="scaled_dot_product_attention", dtype=dname,
                                   batch=B, heads=H, seq=S, dim=D, mask=mask, visible_pairs=pairs,
                                   flop_formula="4*B*H*D*visible_pairs" + (" * 2.5" if pas == "bwd" else ""))
                        rec["pass"] = pas
                        scores_gib = 4.0 * B * H * S * S / 2**30
                        if bname == "math" and scores_gib > a.math_max_gib:
                            rec["skipped"] = (f"math materialises {scores_gib:.0f} GiB of fp32 scores "
                                              f"(> --math-max-gib {a.math_max_gib})")
                            print(json.dumps(rec), flush=True)
                            continue
                        flop = fwd_flop * (2.5 if pas == "bwd" else 1.0)
                        try:
                            with sdpa_kernel(getattr(SDPBackend, BACKENDS[bname])):
                                if pas == "fwd":
                                    with torch.no_grad():
                                        times = gpu_times(torch, lambda: F.scaled_dot_product_attention(
                                            q, k, v, is_causal=causal), a.warmup, a.repeats)
                                else:
                                    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
                                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

                                    def clear():
                                        for t in (qg, kg, vg):
                                            t.grad = None

                                    times = gpu_times(torch, lambda: out.backward(dout, retain_graph=True),
                                                      a.warmup, a.repeats, clear)
                                    del out, qg, kg, vg
                        except RuntimeError as e:  # the backend refuses this shape / dtype / GPU
                            rec["error"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
                            print(json.dumps(rec), flush=True)
                            torch.cuda.empty_cache()
                            continue
                        med = statistics.median(times)
                        rec.update({"seconds": med, "seconds_min": min(times), "seconds_max": max(times),
                                    "flop": flop, "gflops": flop / med / 1e9, "tflops": flop / med / 1e12,
                                    "tflops_best": flop / min(times) / 1e12})
                        print(json.dumps(rec), flush=True)
            del q, k, v, dout
            torch.cuda.empty_cache()
    return 0
