"""The doctor from a recording at the founding case's true size on one GPU: what it measures and how.

It builds what `benchmarks/truesize.py` builds (a 61-layer, 7168-wide synthetic recording written through the recording
writer, and a random-init draft with the public SpecForge DeepSeek-V3 EAGLE-3 draft's sizes: MLP 40960, 32,000-token
draft vocabulary), then runs `diagnose` in a fresh process with the draft on the GPU in the recording's precision
(bfloat16), as `eagle3-workbench diagnose --recording DIR --draft DIR --device cuda` does. It prints and writes the
wall time, the process's CPU time, peak host memory, peak GPU memory, bytes read, the verdict and whether the planted
wiring was found. Meant to finish in under five minutes on one GPU (building the folders on the host is most of it).

    python scripts/gpu_doctor_truesize.py [--out DIR] [--tiny]

Without a CUDA GPU it says so and exits 0 without measuring (there is nothing to measure); `--tiny` runs the same
steps at width 64 (the check that the script itself works).
"""
from __future__ import annotations
import argparse, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT/'benchmarks'))

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default='.', help='folder for gpu_doctor_truesize.json (default: here)')
    ap.add_argument('--tiny', action='store_true', help='width 64, 24 layers: check the script, not the GPU')
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print('gpu_doctor_truesize: no CUDA GPU is visible: nothing measured (run it on a machine with one)', file=sys.stderr)
        return 0
    import truesize
    t0 = time.perf_counter()
    r = truesize.measure(a.tiny, threads=4, device='cuda', today=False)
    r['summary'] = truesize.summary(r)
    r['total_seconds'] = time.perf_counter() - t0
    r['gpu'] = torch.cuda.get_device_name(0)
    out = Path(a.out)/'gpu_doctor_truesize.json'
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=1) + '\n')
    s = r['summary']
    print(f"{r['gpu']}: doctor from disk {s['wall']:.1f} s wall ({s['cpu']:.1f} s CPU), verdict {s['verdict']}, planted wiring "
          f"{'found' if s['found'] else 'NOT found'}; peak host memory {s['rss_gib']:.2f} GiB, GPU {r['new'].get('gpu_peak_gib', float('nan')):.2f} GiB; "
          f"{s['explored']} wirings explored, {s['scored_in_full']} scored on every prompt; everything {r['total_seconds']:.0f} s -> {out}")
    return 0

if __name__ == '__main__': sys.exit(main())
