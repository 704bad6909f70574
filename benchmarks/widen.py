"""What widening a bfloat16 weight into float32 slices costs (`eagle3_workbench.draft.linear_widened`), at the true draft's widths.

For each input width K of the true-size draft (7168: the MLP's gate/up, the head; 21504: the fc; 40960: the MLP's down)
and a block of M tokens (the search's 512-token batches), on the CPU: the widening rate (bfloat16 -> float32 copies per
second into the reused buffer), and the matmul rate of `linear_widened` at several slice sizes against one plain float32
`F.linear` over a float32 copy of the same weight (N output rows). A few slices of a weight, never the whole draft.

    python benchmarks/widen.py [--threads 2] [--rows 4096] [--tokens 512] [--out benchmarks/results/widen.json]
"""
from __future__ import annotations
import argparse, json, time
from pathlib import Path

HERE = Path(__file__).resolve().parent

def best(f, reps:int=2)->float:
    "The fastest of `reps` timed calls after one warm-up (seconds)."
    f(); out = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); out.append(time.perf_counter() - t0)
    return min(out)

def measure(threads:int=2, rows:int=4096, tokens:int=512, widths=(7168, 21504, 40960), slices_mib=(2, 8, 32, 64, 128))->dict:
    import torch, torch.nn.functional as F
    from eagle3_workbench.draft import linear_widened
    torch.set_num_threads(threads); torch.manual_seed(0)
    out = dict(threads=threads, rows=rows, tokens=tokens, when=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), widths={})
    for K in widths:
        n = max(1, min(rows, (128 << 20) // (K * 4)))   # at most a 128 MiB float32 copy: a few slices' worth, not a weight
        w, x = (torch.randn(n, K) * 0.02).bfloat16(), torch.randn(tokens, K)
        wide = torch.empty(n, K)
        t_widen = best(lambda: wide.copy_(w))
        w32 = w.float()
        flops = 2 * tokens * K * n
        t_plain = best(lambda: F.linear(x, w32))
        row = dict(out_rows=n, widen_gelem_s=n * K / t_widen / 1e9, widen_gb_s_read=n * K * 2 / t_widen / 1e9,
                   float32_gflops=flops / t_plain / 1e9, slices={})
        for mib in slices_mib:
            t = best(lambda: linear_widened(x, w, slice_bytes=mib << 20))
            row['slices'][str(mib)] = dict(slice_rows=min(n, (mib << 20) // (K * 4)), gflops=flops / t / 1e9, of_float32=t_plain / t)
        ref = F.linear(x, w32)   # the same float32 dot products, blocked differently: differences at float32 rounding of sums of K terms
        row['max_diff_of_max'] = float((linear_widened(x, w) - ref).abs().max() / ref.abs().max())
        assert row['max_diff_of_max'] < 1e-5, row
        out['widths'][str(K)] = row
    return out

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--threads', type=int, default=2); ap.add_argument('--rows', type=int, default=4096); ap.add_argument('--tokens', type=int, default=512)
    ap.add_argument('--out', default=None, help='where to write the JSON (default: printed only)')
    a = ap.parse_args(argv)
    r = measure(a.threads, a.rows, a.tokens)
    text = json.dumps(r, indent=1)
    if a.out: Path(a.out).write_text(text + '\n')
    print(text)

if __name__ == '__main__': main()
