"""Time to verdict: the wiring doctor on the zoo pair, with and without the SpecForge training dump, and on a 61-layer target
(DeepSeek-V3's depth at the zoo's width, random weights), where the search is a coordinate search instead of every triple."""
from __future__ import annotations
import json, shutil, tempfile, time
from pathlib import Path
from common import zoo, pair, med, spread, row, tiny

TITLE = 'doctor time to verdict'
QUESTION = ('How long does `diagnose` take to give its verdict on the zoo pair, with and without the training dump, '
            'and on a 61-layer target?')

def breakdown(p, prompts, dump)->str:
    "Where the time goes: the dump match alone, and diagnose without the accept-length runs."
    from eagle3_workbench.doctor import diagnose, read_training_dump, match_training_features
    a = time.perf_counter()
    samples, _ = read_training_dump(dump); match_training_features(p, samples)
    from eagle3_workbench import scores
    scores._PASSES.clear()   # cold, as the timed runs
    b = time.perf_counter()
    diagnose(p, prompts, training_dump=dump, accept=False)
    c = time.perf_counter()
    return (f"reading and matching the dump {b - a:.1f} s; diagnose with the dump but accept=False {c - b:.1f} s: the search over "
            f"every ascending wiring (one target pass, one draft step per candidate) is most of it, the paired accept length the rest")

def deep_pair(folder, n_layers:int=61, ids=(1, 29, 57), seed:int=0):
    """A random-weight target: the zoo's tiny-dsv3 config (DeepSeek-V3 architecture, hidden 128) with `n_layers` layers and the
    zoo's tokenizer; the draft: a copy of the zoo draft (random with respect to this target) with SpecForge ids `ids`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.formats import resolve_path
    folder, src = Path(folder), resolve_path(zoo().spec('tiny-dsv3'))
    cfg = AutoConfig.from_pretrained(src); cfg.num_hidden_layers = n_layers
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(cfg, experts_implementation='eager').save_pretrained(folder/'target')
    for f in ('tokenizer.json', 'tokenizer_config.json'): shutil.copy(src/f, folder/'target'/f)
    shutil.copytree(resolve_path(zoo().spec('tiny-dsv3-eagle3')), folder/'draft', ignore=shutil.ignore_patterns('training_dump'))
    c = json.loads((folder/'draft'/'config.json').read_text()); c['eagle_config']['eagle_aux_hidden_state_layer_ids'] = list(ids)
    (folder/'draft'/'config.json').write_text(json.dumps(c))
    return load_pair(str(folder/'target'), str(folder/'draft'))

def deep_rows(prompts, kw:dict, quick:bool=False)->list:
    "diagnose on a 61-layer target: configured = the engines' default (one start), and configured elsewhere (two starts; not in quick mode)."
    from eagle3_workbench.doctor import diagnose
    import eagle3_workbench.scores as scores
    rows = []
    with tempfile.TemporaryDirectory(prefix='e3w-deep-') as tmp:
        cases = (('configured = the default', (1, 29, 57)), ('configured off the default', (9, 19, 39)))
        for label, ids in cases[:1 if quick else 2]:
            p = deep_pair(Path(tmp)/label.replace(' ', '_'), ids=ids)
            scores._PASSES.clear()   # cold: the target pass is part of the time
            a = time.perf_counter()
            d = diagnose(p, prompts, **kw)
            x = time.perf_counter() - a
            note = (f"verdict {d.verdict}; {d.search['candidates']} candidate wirings ({d.search['how']}); "
                    f"{d.search['prompts']} prompts, {d.search['tokens']} positions; every ascending triple would be 35,990")
            rows.append(row(f"diagnose, 61-layer target, {label}", x, 's', 'n=1', '<= 60 s', x <= 60, note))
            del p
    return rows

def run(quick:bool=False)->dict:
    from eagle3_workbench.doctor import diagnose
    from eagle3_workbench import scores
    z = zoo()
    p = pair('tiny-dsv3')
    dump = z.path('tiny-dsv3-eagle3')/'training_dump'
    prompts = z.prompts()  # what diagnose uses by default (the zoo's held-out prompts)
    kw = dict(accept_prompts=2, accept_tokens=8) if quick else {}
    reps = 1 if quick else 2
    res = {'with': [], 'without': []}
    verdict = {}
    for r in range(reps):
        for which in (('with',) if tiny() else ('with', 'without') if r % 2 == 0 else ('without', 'with')):
            scores._PASSES.clear()   # cold every time: the target pass is part of the verdict's time
            a = time.perf_counter()
            d = diagnose(p, prompts, training_dump=dump if which == 'with' else None, **kw)
            res[which].append(time.perf_counter() - a)
            verdict[which] = (d.verdict, d.codes, len(d.sweep or []), d.search['candidates'])
    why = None if quick else breakdown(p, prompts, dump)
    rows = []
    for which, target in (('with', 10), ('without', 60)):
        if not res[which]: rows.append(row(f"diagnose {which} the training dump", None, 's', '', f'<= {target} s', None, 'not available in tiny mode')); continue
        x = med(res[which]); v, codes, nsweep, ncand = verdict[which]
        note = f"verdict {v}" + (f" ({', '.join(codes)})" if codes else '') + f"; {ncand} candidate wirings searched, {nsweep} shown"
        if x > target and why: note += f"; {why}"
        rows.append(row(f"diagnose {which} the training dump", x, 's', spread(res[which]), f'<= {target} s', x <= target, note))
    if tiny(): rows.append(row('diagnose, 61-layer target', None, 's', '', '<= 60 s', None, 'not available in tiny mode (run.py --tiny)'))
    else: rows += deep_rows(prompts, kw, quick)
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"in-process `diagnose(pair, prompts, training_dump=...)` on {p.target_path} with the pair already loaded "
                      f"(load time is in 'zoo load'); the {len(prompts)} zoo prompts"
                      + (", accept_prompts 2, accept_tokens 8 (quick)" if quick else ", default settings (accept length measured as configured and as recommended)")
                      + f"; {reps} run(s) each, alternating. The 61-layer rows: a random-weight target with tiny-dsv3's config at 61 layers "
                      "and the zoo draft (random for it) given SpecForge ids, timed from a cold start (target pass, search, accept length), once each.")
