"""Time to verdict: the wiring doctor on the zoo pair, with and without the SpecForge training dump."""
from __future__ import annotations
import time
from common import zoo, pair, med, spread, row

TITLE = 'doctor time to verdict'
QUESTION = 'How long does `diagnose` take to give its verdict on the zoo pair, with and without the training dump?'

def breakdown(p, prompts, dump)->str:
    "Where the time goes: the dump match alone, and diagnose without the accept-length runs."
    from eagle3_workbench.doctor import diagnose, read_training_dump, match_training_features
    a = time.perf_counter()
    samples, _ = read_training_dump(dump); match_training_features(p, samples)
    b = time.perf_counter()
    diagnose(p, prompts, training_dump=dump, accept=False)
    c = time.perf_counter()
    return f"reading and matching the dump {b - a:.1f} s; diagnose with the dump but accept=False {c - b:.1f} s"

def run(quick:bool=False)->dict:
    from eagle3_workbench.doctor import diagnose
    z = zoo()
    p = pair('tiny-dsv3')
    dump = z.path('tiny-dsv3-eagle3')/'training_dump'
    prompts = z.prompts()  # what diagnose uses by default (the zoo's held-out prompts)
    kw = dict(accept_prompts=2, accept_tokens=8) if quick else {}
    reps = 1 if quick else 2
    res = {'with': [], 'without': []}
    verdict = {}
    for r in range(reps):
        for which in (('with', 'without') if r % 2 == 0 else ('without', 'with')):
            a = time.perf_counter()
            d = diagnose(p, prompts, training_dump=dump if which == 'with' else None, **kw)
            res[which].append(time.perf_counter() - a)
            verdict[which] = (d.verdict, d.codes, len(d.sweep or []))
    why = None if quick else breakdown(p, prompts, dump)
    rows = []
    for which, target in (('with', 10), ('without', 60)):
        x = med(res[which]); v, codes, nsweep = verdict[which]
        note = f"verdict {v}" + (f" ({', '.join(codes)})" if codes else '') + f"; {nsweep} candidate wirings swept"
        if x > target and why: note += f"; {why}"
        rows.append(row(f"diagnose {which} the training dump", x, 's', spread(res[which]), f'<= {target} s', x <= target, note))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"in-process `diagnose(pair, prompts, training_dump=...)` on {p.target_path} with the pair already loaded "
                      f"(load time is in 'zoo load'); the {len(prompts)} zoo prompts"
                      + (", accept_prompts 2, accept_tokens 8 (quick)" if quick else ", default settings (accept length measured as configured and as recommended)")
                      + f"; {reps} run(s) each, alternating.")
