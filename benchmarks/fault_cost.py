"""What a planted wiring fault costs in accept length on the zoo pairs, as the doctor measures and reads it.

For each pair, one target pass over held-out prompts keeps the greedy continuations; then, for each planted fault (each
chunk one layer up or down, the embedding in chunk 0), the draft decodes both wirings speculatively on the same prompts
(`accepts.accept_lengths`: a chain of 5, 24 tokens, paired per prompt) and `diagnosis.fault_cost` reads the change:
"costs X (CI)", "no measurable cost on these prompts, about M would tell", or "the fix accepts less". That is the sentence
a miswired verdict leads with. Run: `OMP_NUM_THREADS=1 python benchmarks/fault_cost.py [--prompts 16 32] [--pairs ...]`.
Writes benchmarks/results/fault_cost.{json,md}; `--tiny` runs one pair at 4 prompts (the suite's check that it runs).
"""
from __future__ import annotations
import argparse, json, time
from pathlib import Path

# name -> (target, draft, the layers the draft was trained on, from its zoo card)
PAIRS = {'tiny-llama': ('zoo:tiny-llama', 'zoo:tiny-llama-eagle3', (2, 5, 7)), 'tiny-dsv3': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', (2, 6, 9)),
         'tiny-gptoss': ('zoo:tiny-gptoss', 'zoo:tiny-gptoss-eagle3', (2, 4, 5)), 'deep-dsv3': ('zoo:deep-dsv3', 'zoo:deep-dsv3-eagle3', (3, 31, 59))}
OUT = Path(__file__).parent/'results'
TOKENS, STEPS = 24, 5

def faults(trained:tuple, n:int)->dict:
    "Each chunk one layer up and down, and the embedding in chunk 0 (valid, distinct wirings only)."
    t, out = list(trained), {}
    for c in range(len(t)):
        for d in (1, -1): out[f"chunk {c} {d:+d}"] = tuple(x + d if j == c else x for j, x in enumerate(t))
    out['embedding in chunk 0'] = (0, *t[1:])
    return {k: w for k, w in out.items() if all(0 <= x <= n for x in w) and len(set(w)) == len(w) and w != tuple(trained)}

def cost_rows(name:str, target:str, draft:str, trained:tuple, sizes:tuple)->list:
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench.scores import target_pass
    from eagle3_workbench.accepts import accept_lengths
    from eagle3_workbench.diagnosis import fault_cost
    pair, m = load_pair(target, draft), max(sizes)
    prompts = read_prompts(None, m)
    rec, seqs = target_pass(pair, prompts, TOKENS + STEPS + 2)
    source = lambda a, b: (rec, seqs[a:b])
    rows, eos = [], getattr(pair.tokenizer, 'eos_token_id', None)
    for label, fed in faults(trained, pair.n_layers).items():
        for k in sizes:
            acc = accept_lengths(source, len(prompts), pair.draft, fed, trained, n_prompts=k, tokens=TOKENS, max_prompts=k, eos=eos)
            b, a = acc['before'], acc['after']
            rj = dict(resid_layers=list(trained), accept_length_before=round(b['accept_length'], 3), accept_length_after=round(a['accept_length'], 3),
                      accept_length_change=acc['change'])
            c = fault_cost(rj, list(fed))
            rows.append(dict(pair=name, fault=label, fed=list(fed), trained=list(trained), prompts=k, before=rj['accept_length_before'],
                             after=rj['accept_length_after'], cost=c['cost'], ci=c['ci'], reading=c['reading'], prompts_to_tell=c['prompts_to_tell']))
            print(f"{name} {label} {k}p: {c['said']}", flush=True)
    return rows

def table_md(rows:list)->str:
    L = ['| pair | fault (fed) | prompts | accept length fed -> trained | cost (95% CI) | reading | prompts that would tell |', '|---|---|---|---|---|---|---|']
    for r in rows:
        tell = '' if r['reading'] != 'no measurable cost' else f"about {r['prompts_to_tell']}" if r['prompts_to_tell'] else \
               'none would: alike on every prompt' if r['ci'][0] == r['ci'][1] else 'none: the change measured rounds to zero'
        L.append(f"| {r['pair']} | {r['fault']} {r['fed']} | {r['prompts']} | {r['before']:.2f} -> {r['after']:.2f} | {r['cost']:+.2f} "
                 f"({r['ci'][0]:+.2f} .. {r['ci'][1]:+.2f}) | {r['reading']} | {tell} |")
    return '\n'.join(L)

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--pairs', nargs='*', default=list(PAIRS)); ap.add_argument('--prompts', nargs='*', type=int, default=[16, 32])
    ap.add_argument('--tiny', action='store_true', help='one pair at 4 prompts, written under --out')
    ap.add_argument('--out', default=str(OUT))
    a = ap.parse_args(argv)
    pairs, sizes = (['tiny-llama'], (4,)) if a.tiny else (a.pairs, tuple(a.prompts))
    t0, rows = time.perf_counter(), []
    for name in pairs: rows += cost_rows(name, *PAIRS[name], sizes)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    meta = dict(tokens=TOKENS, steps=STEPS, sizes=list(sizes), seconds=round(time.perf_counter() - t0))
    (out/'fault_cost.json').write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + '\n')
    (out/'fault_cost.md').write_text(f"# What a planted fault costs\n\nChain of {STEPS}, {TOKENS} tokens per prompt, the zoo's held-out prompts, "
                                     f"paired per prompt ({meta['seconds']} s).\n\n" + table_md(rows) + '\n')
    print(table_md(rows))
    return 0

if __name__ == '__main__': raise SystemExit(main())
