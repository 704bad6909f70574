"""Time to first figure from a cold process: import, load the zoo pair, extend with a capture, render the pipeline figure."""
from __future__ import annotations
import json, subprocess, sys, time
from common import zoo, med, spread, row, unavailable, subprocess_env, g

TITLE = 'time to first figure'
QUESTION = 'From a cold `python`, how long until the first pipeline figure exists?'

CHILD = r'''
import inspect, json, sys, time
t0 = time.perf_counter()
import eagle3_workbench
from eagle3_workbench.loading import load_pair
from eagle3_workbench.capture import Capture
from eagle3_workbench.engine import Session
t1 = time.perf_counter()
pair = load_pair(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
with Capture(pair.target, pair.draft, points=['target.*', 'draft.*'], mode='stats') as cap:
    s = Session(pair, capture=cap)
    res = s.extend(sys.argv[3])
t3 = time.perf_counter()
out = dict(import_s=t1 - t0, load_s=t2 - t1, extend_s=t3 - t2)

def call(fn, objs):
    "Call fn with what its required parameters name; a lone unknown parameter gets the capture."
    ps = [p for p in inspect.signature(fn).parameters.values()
          if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if all(p.name in objs for p in ps): return fn(**{p.name: objs[p.name] for p in ps})
    if len(ps) == 1:
        err = None
        for k in ('capture', 'session', 'pair', 'result'):
            try: return fn(objs[k])
            except (TypeError, AttributeError, KeyError, ValueError) as e: err = e
        raise err
    raise TypeError(f"cannot tell what to pass to pipeline_figure{inspect.signature(fn)}")

try:
    from eagle3_workbench.figures import pipeline_figure
except Exception as e:
    out['figure'] = f"not available yet (eagle3_workbench.figures.pipeline_figure: {type(e).__name__}: {e})"
else:
    objs = dict(capture=cap, cap=cap, records=cap.records, pair=pair, session=s, sess=s, result=res, extend=res,
                extend_result=res, phase='extend', cycle=0)
    try:
        d = call(pipeline_figure, objs).to_dict()
        out['figure_s'] = time.perf_counter() - t3
        out['traces'] = len(d.get('data', [])) if isinstance(d, dict) else None
    except Exception as e:
        out['figure'] = f"pipeline_figure failed: {type(e).__name__}: {str(e)[:300]}"
print('RESULT ' + json.dumps(out))
'''

def run(quick:bool=False)->dict:
    z = zoo()
    t, d = z.spec('tiny-dsv3'), z.spec('tiny-dsv3-eagle3')
    prompt = z.prompts(1)[0]
    reps = 1 if quick else 3
    walls, parts = [], []
    for _ in range(reps):
        a = time.perf_counter()
        p = subprocess.run([sys.executable, '-c', CHILD, t, d, prompt], capture_output=True, text=True, env=subprocess_env(), timeout=300)
        walls.append(time.perf_counter() - a)
        line = next((l for l in p.stdout.splitlines() if l.startswith('RESULT ')), None)
        if p.returncode or line is None: raise RuntimeError(f"child failed (rc {p.returncode}): {p.stderr[-800:]}")
        parts.append(json.loads(line[7:]))
    last = parts[-1]
    br = (f"import {g(med([x['import_s'] for x in parts]))} s, load_pair {g(med([x['load_s'] for x in parts]))} s, "
          f"extend with capture {g(med([x['extend_s'] for x in parts]))} s")
    rows = []
    if 'figure_s' in last:
        w = med(walls)
        rows.append(row('cold process to pipeline figure .to_dict()', w, 's', spread(walls), '<= 10 s', w <= 10,
                        f"{br}, figure {g(med([x['figure_s'] for x in parts if 'figure_s' in x]))} s; includes interpreter start; "
                        f"the first load_pair in a process imports transformers and the target's modeling code (see 'zoo load')"))
    else:
        rows.append(unavailable('cold process to pipeline figure .to_dict()', last['figure'], '<= 10 s'))
        rows.append(row('cold process to a captured extend (no figure yet)', med(walls), 's', spread(walls),
                        note=f"{br}; includes interpreter start; info"))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"`python -c` child, {reps} run(s): import eagle3_workbench, load_pair({t!r}), Session.extend of one zoo prompt inside "
                      f"Capture(points=['target.*', 'draft.*'], mode='stats'), then eagle3_workbench.figures.pipeline_figure(...).to_dict(); "
                      f"wall time measured by the parent.")
