"""SGLang bridge: what `--forward-hooks` with eagle3_workbench.sglang.hook:factory costs per forward pass, measured on CPU."""
from __future__ import annotations
import copy, shutil, tempfile
from pathlib import Path
import torch
from common import zoo, pair, interleaved, ratios, med, spread, row, g

TITLE = 'forward-hooks overhead (SGLang bridge)'
QUESTION = ('What does leaving the `--forward-hooks` factory on cost per forward pass, registered the way SGLang '
            'registers it, for prefill-, verify- and decode-sized passes?')

def _records(folder:Path)->int:
    "How many records the hook processes wrote under `folder`."
    return sum(len(f.read_text().splitlines()) for f in folder.glob('rank*/records.jsonl'))

def run(quick:bool=False)->dict:
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.sglang.hook import forward_hooks_json, attach_forward_hooks
    from eagle3_workbench.sglang.hook import flush_all
    p = pair('tiny-dsv3')
    n = p.n_layers
    wired = list(zoo().trained('tiny-dsv3-eagle3', n))
    base, _ = load_target(zoo().spec('tiny-dsv3'))
    tmp = Path(tempfile.mkdtemp(prefix='e3w-fwdhooks-'))
    # one copy per variant: hooks registered SGLang's way stay on a module, so bare must be a model without any
    layer_sets = {'wired': wired, 'all': list(range(n + 1)), 'sampled': wired}
    rates = {'sampled': 0.1}
    models, handles = {'bare': base}, []
    for name, layers in layer_sets.items():
        m = copy.deepcopy(base)
        handles += attach_forward_hooks(m, forward_hooks_json(layers, n, tmp/name, sample_rate=rates.get(name, 1.0)), role='target')
        models[name] = m
    golden, passes = (5 ** 0.5 - 1) / 2, 0   # passes each variant has run so far (one sink, one counter per variant)
    sizes = (64, 1) if quick else (512, 8, 1)
    reps = {512: 31, 64: 9, 8: 61, 1: 61}
    rows, checks = [], []
    try:
        for T in sizes:
            ids = torch.randint(0, base.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T))
            def fwd(m):
                @torch.no_grad()
                def go(): m(input_ids=ids, use_cache=False)
                return go
            before = {k: _records(tmp/k) for k in layer_sets}
            warmup = 2
            t = interleaved({k: fwd(m) for k, m in models.items()}, reps[T] if not quick else 5, warmup=warmup)
            flush_all()
            calls = len(t['bare']) + warmup   # forwards each variant ran, warm-up included
            per_pass = {k: (_records(tmp/k) - before[k]) / calls for k in layer_sets}
            # one record per resid[k]; model.norm, hooked for resid[N], also records its own output (target.norm);
            # sampled: whole passes whose number n has frac(n * golden ratio) < rate
            expect = {k: len(layers) + (n in layers) for k, layers in layer_sets.items()}
            picked = sum((i * golden) % 1 < rates['sampled'] for i in range(passes, passes + calls))
            expect['sampled'] = expect['sampled'] * picked / calls
            passes += calls
            b = med(t['bare'], 1e3)
            rows.append(row(f'bare forward, {T} token{"s" if T > 1 else ""}', b, 'ms', spread(t['bare'], 1e3, ' ms')))
            for k, layers in layer_sets.items():
                r = ratios(t[k], t['bare'])
                what = (f"resid{layers}" if k == 'wired' else f"resid{layers}, sample_rate {rates[k]}" if k == 'sampled'
                        else f"every resid[0..{n}]")
                rows.append(row(f'hooks on {what} / bare, {T} token{"s" if T > 1 else ""}', med(r), 'x', spread(r),
                                '<= 1.05x on a GPU; CPU: report', None,
                                f"{g(per_pass[k])} records written per pass (expected {g(expect[k])}); "
                                f"+{g(med(t[k], 1e3) - b)} ms per pass"))
                checks.append(abs(per_pass[k] - expect[k]) < 1e-9)
    finally:
        for h in handles: h.remove()
        flush_all()
        shutil.rmtree(tmp, ignore_errors=True)
    rows.append(row('every hooked pass wrote one record per hooked point', float(all(checks)), '', '', '1', all(checks),
                    'records.jsonl lines per forward, counted after each size (sample_rate 0.1: exactly the passes its pass numbers pick)'))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"target {p.target_path} ({p.model_type}, {n} layers, hidden "
                      f"{base.config.hidden_size}); specs from forward_hooks_json(...) registered with attach_forward_hooks "
                      f"(the factory resolved by path, fnmatch over named_modules(), as SGLang's hook manager does) on "
                      f"separate copies of the target; stats mode, records appended to records.jsonl per pass; use_cache=False, "
                      f"no_grad; variants interleaved per repeat (order rotated), ratios per repeat, then the median. "
                      f"No GPU here: the <= 5% target is for a GPU forward and is not judged on this CPU.")
