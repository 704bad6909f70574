"""Calibration of the doctor's decision: false alarms on correctly wired zoo pairs and detection power for planted
wiring faults, as a function of the evidence (held-out prompts / tokens).

For each pair, one target pass over a pool of held-out prompts (`AgreementTable`) keeps every wiring's per-prompt fit;
the doctor's own search (`wiring_sweep`: exhaustive at N = 12, screened from 32 prompts on) and decision (`decide`) are then applied to random
prompt subsets: indexing the kept per-prompt values by the subset gives exactly what `diagnose` computes on those
prompts (each prompt is its own sequence). Run: `OMP_NUM_THREADS=1 python benchmarks/doctor_calibration.py [--trials 200]`.
Writes benchmarks/results/doctor_calibration.{json,md}.
"""
from __future__ import annotations
import argparse, json, time
from pathlib import Path
import torch

SIZES = (2, 4, 8, 16, 32, 64)     # prompts per subset
# name -> (target, draft, the layers the draft was trained on, from its zoo card: not read from its config, which
# SGLang's PR #25454 rule misreads for the off-default draft)
PAIRS = {'tiny-dsv3': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', (2, 6, 9)), 'tiny-llama': ('zoo:tiny-llama', 'zoo:tiny-llama-eagle3', (2, 5, 7)),
         'tiny-dsv3-offdefault': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3-offdefault', (4, 9, 11)),
         'tiny-gptoss': ('zoo:tiny-gptoss', 'zoo:tiny-gptoss-eagle3', (2, 4, 5))}
OUT = Path(__file__).parent/'results'

def faults(trained:tuple, n:int)->dict:
    "The planted wirings: each chunk +-1, all +-1, the embedding in each slot, the chunk order reversed (valid ones only)."
    t, out = list(trained), {'correct': tuple(trained)}
    for c in range(len(t)):
        for d in (1, -1): out[f"chunk {c} {d:+d}"] = tuple(x + d if j == c else x for j, x in enumerate(t))
    out['all +1'], out['all -1'] = tuple(x + 1 for x in t), tuple(x - 1 for x in t)
    for c in range(len(t)): out[f"embedding in chunk {c}"] = tuple(0 if j == c else x for j, x in enumerate(t))
    out['order reversed'] = tuple(reversed(t))
    return {k: w for k, w in out.items() if all(0 <= x < n for x in w) and len(set(w)) == len(w) and (k == 'correct' or w != tuple(trained))}

def pool_prompts(n:int, seed:int=11)->list:
    "Held-out code snippets from the zoo's held-out standard-library files (the zoo's own prompt maker, another seed)."
    from eagle3_workbench.zoo import corpus_files, heldout_prompts
    return heldout_prompts(corpus_files()[1], n=n, seed=seed)

def calibrate_pair(name:str, target:str, draft:str, trained:tuple, pool:list, trials:int, sizes=SIZES, seed:int=0, race=None)->list:
    import eagle3_workbench.doctor as doc, eagle3_workbench.search as search, eagle3_workbench.scores as scores
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.wiring import engine_readings
    pair = load_pair(target, draft)
    n = pair.n_layers
    t0 = time.perf_counter()
    rec, seqs = scores.target_pass(pair, pool)
    table = search.AgreementTable(rec, pair.draft, seqs)
    readings = engine_readings(pair.draft.config.raw, n, pair.model_type)
    zeros = table.score((None,) * pair.draft.config.num_aux)
    rows, gen = [], torch.Generator().manual_seed(seed)
    subsets = {m: [torch.randperm(len(pool), generator=gen)[:m] for _ in range(trials)] for m in sizes}
    for label, conf in faults(trained, n).items():
        for m in sizes:
            res = dict(pair=name, fault=label, fed=list(conf), trained=list(trained), prompts=m, trials=trials,
                       miswired=0, named=0, inconclusive=0, recommended_trained=0, tokens=0.0, raw_miswired=0)
            for idx in subsets[m]:
                sw = search.wiring_sweep(table, n, doc._seeds(conf, n, readings, None), prompts=idx, race=race)   # the doctor's search, screen (or race) included
                null = tuple(x[idx] for x in zeros)   # the draft fed zeros: FEATURES_UNUSED is part of the decision
                v, fs, rec = doc.decide(doc.Evidence(n, [], conf, sweep=sw, null=null))
                res['tokens'] += sw.tokens / trials
                res['miswired'] += v == 'miswired'; res['inconclusive'] += v == 'inconclusive'; res['unusable'] = res.get('unusable', 0) + (v == 'unusable')
                res['named'] += v == 'miswired' and tuple(rec.resid_layers) == trained
                res['recommended_trained'] += tuple(rec.resid_layers) == trained
                # the same decision with no minimum evidence: what the minimum protects against
                mp, mt = search.MIN_PROMPTS, search.MIN_TOKENS   # read by `search.enough_evidence`
                search.MIN_PROMPTS = search.MIN_TOKENS = 0
                try: res['raw_miswired'] += doc.decide(doc.Evidence(n, [], conf, sweep=sw, null=null))[0] == 'miswired'
                finally: search.MIN_PROMPTS, search.MIN_TOKENS = mp, mt
            res['tokens'] = round(res['tokens'])
            rows.append(res)
        print(f"{name} {label}: " + ', '.join(f"{r['prompts']}p {r['named']}/{trials}" for r in rows if r['fault'] == label), flush=True)
    print(f"{name}: {time.perf_counter() - t0:.0f} s, {len(table.rows)} wirings scored", flush=True)
    return rows

def table_md(rows:list, trials:int)->str:
    sizes = sorted({r['prompts'] for r in rows})
    tok = {m: round(sum(r['tokens'] for r in rows if r['prompts'] == m) / max(1, sum(r['prompts'] == m for r in rows))) for m in sizes}
    head = '| pair | wiring fed | ' + ' | '.join(f"{m} prompts (~{tok[m]} tok)" for m in sizes) + ' |'
    L = [head, '|' + '---|' * (2 + len(sizes))]
    for (pair, fault) in dict.fromkeys((r['pair'], r['fault']) for r in rows):
        cells = []
        for m in sizes:
            r = next(x for x in rows if x['pair'] == pair and x['fault'] == fault and x['prompts'] == m)
            if fault == 'correct':
                cells.append(f"false alarms {r['miswired'] + r.get('unusable', 0)}/{trials} (without the minimum: {r['raw_miswired']}); inconclusive {r['inconclusive']}")
            else: cells.append(f"{r['named'] / trials:.2f}")
        L.append(f"| {pair} | {fault} {r['fed']} | " + ' | '.join(cells) + ' |')
    return '\n'.join(L)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--trials', type=int, default=200); ap.add_argument('--pool', type=int, default=200)
    ap.add_argument('--pairs', nargs='*', default=list(PAIRS))
    ap.add_argument('--merge', action='store_true', help='keep the stored results of the pairs not named in --pairs')
    ap.add_argument('--race', action='store_true', help='race the candidates (successive elimination) at these sizes too, as the deep search does; '
                    'writes doctor_calibration_race.{json,md}')
    a = ap.parse_args(argv)
    from eagle3_workbench.formats import resolve_path
    import eagle3_workbench.search as search, eagle3_workbench.stats as stats
    t0, pool, rows = time.perf_counter(), pool_prompts(a.pool), []
    for name in a.pairs:
        target, draft, trained = PAIRS[name]
        try: resolve_path(draft)
        except Exception as e: print(f"skipping {name}: {e}"); continue
        rows += calibrate_pair(name, target, draft, trained, pool, a.trials, race=True if a.race else None)
    OUT.mkdir(exist_ok=True)
    stem = 'doctor_calibration_race' if a.race else 'doctor_calibration'
    old = OUT/f'{stem}.json'
    if a.merge and old.exists():   # keep the stored rows of the pairs not rerun
        done = {r['pair'] for r in rows}
        rows = [r for r in json.loads(old.read_text())['rows'] if r['pair'] not in done] + rows
    meta = dict(trials=a.trials, pool_prompts=len(pool), sizes=list(SIZES), alpha=stats.ALPHA, min_prompts=search.MIN_PROMPTS,
                min_tokens=search.MIN_TOKENS, race=a.race, seconds=round(time.perf_counter() - t0))
    (OUT/f'{stem}.json').write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + '\n')
    md = (f"# Doctor calibration\n\n{a.trials} random subsets of a pool of {len(pool)} held-out prompts per size; each subset gets the "
          f"doctor's search (`wiring_sweep`: every ascending triple plus chunk orders; from 32 prompts on explored on a screen of 8 prompts, "
          f"its best 16 and the seeds scored on all{'; with --race: raced block by block instead, survivors and seeds scored on all' if a.race else ''}) and decision (`decide`, Holm over the candidates at family-wise "
          f"{stats.ALPHA}, minimum evidence {search.MIN_PROMPTS} prompts and {search.MIN_TOKENS} tokens). Correctly wired: how often it says "
          f"miswired or unusable (false alarm). Planted faults: the fraction of subsets where it says miswired AND recommends the trained "
          f"layers (power). {meta['seconds']} s.\n\n" + table_md(rows, a.trials) + '\n')
    (OUT/f'{stem}.md').write_text(md)
    print(md)

if __name__ == '__main__': main()
