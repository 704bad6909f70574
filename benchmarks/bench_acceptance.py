"""Acceptance on the zoo: accept length and per-position acceptance for the trained wiring, the classic mistakes and each engine's reading."""
from __future__ import annotations
from common import zoo, pair, row, unavailable, g

TITLE = 'acceptance'
QUESTION = 'How much acceptance does each wiring get on the zoo pairs (greedy chain, steps 5, topk 1)?'

PAIRS = ('tiny-dsv3', 'tiny-llama')

def wirings(p, trained:tuple, quick:bool)->list:
    "(label, resid tuple) in report order: the calibration list of the zoo card, then each engine's reading of the shipped config."
    from eagle3_workbench.zoo import wrong_wirings
    from eagle3_workbench.wiring import engine_readings
    w = {k: v for k, v in wrong_wirings(trained).items() if k != 'zero features'}
    if quick: w = {k: w[k] for k in ('trained', '[embedding, low, mid] (the original case)')}
    out = list(w.items())
    if not quick:
        for r in engine_readings(p.draft.config.raw, p.n_layers, p.model_type):
            out.append((f"{r.engine} reading of the shipped config", tuple(r.fed) if len(r.fed) == p.draft.config.num_aux else
                        ('short', tuple(r.fed))))
    return out

def run(quick:bool=False)->dict:
    from eagle3_workbench.engine import run_prompts
    z = zoo()
    n_prompts, tokens = (4, 16) if quick else (16, 32)
    prompts = z.prompts(n_prompts)
    rows = []
    for name in PAIRS:
        p = pair(name)
        n = p.n_layers
        trained = z.trained(f"{name}-eagle3", n)
        done, base = {}, None
        for label, w in wirings(p, trained, quick):
            metric = f"{name}: {label}"
            if w and w[0] == 'short':
                rows.append(unavailable(f"{metric} resid{list(w[1])}", f"this engine feeds only {len(w[1])} of "
                                        f"{p.draft.config.num_aux} states: the draft cannot run"))
                continue
            metric += f" resid{list(w)}"
            if not all(0 <= k < n for k in w):
                rows.append(unavailable(metric, f"outside resid[0..{n-1}]: no engine captures it")); continue
            if w not in done:
                done[w] = run_prompts(p, prompts, tokens, wiring=w, check_lossless=False, progress=False,
                                      speculative_num_steps=5, speculative_eagle_topk=1).summary
            s = done[w]
            if label == 'trained': base = s['accept_length']
            lo, hi = s['accept_length_ci']
            note = ('per-position acceptance ' + ' / '.join(f"{x:.3f}" for x in s['per_position_acceptance'])
                    + f"; accept rate {s['accept_rate']:.3f}; {s['cycles']} verify cycles")
            if label != 'trained' and base is not None:
                note += '; same tensors as trained' if w == trained else f"; {s['accept_length'] - base:+.3f} vs trained"
            rows.append(row(metric, s['accept_length'], '', f"95% CI {g(lo)}-{g(hi)}", note=note))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"{z.label}; {n_prompts} held-out zoo prompts x {tokens} new tokens, greedy chain (speculative_num_steps 5, "
                      f"topk 1); accept length = tokens emitted per verify including the bonus token, 95% bootstrap CI over "
                      f"prompts; 'trained' = the resid layers the zoo draft was trained on (build log).")
