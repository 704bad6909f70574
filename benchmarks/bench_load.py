"""Zoo load time: `load_pair('zoo:tiny-dsv3')`, first call in a fresh process and repeated in a warm one."""
from __future__ import annotations
import json, subprocess, sys
from common import zoo, med, spread, row, subprocess_env

TITLE = 'zoo load'
QUESTION = "How long does `load_pair('zoo:tiny-dsv3')` (target, draft, tokenizer, wiring) take?"

CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
from eagle3_workbench.loading import load_pair
t1 = time.perf_counter()
# what load_pair imports on its first call: transformers and the target's modeling code (timed apart from the load)
import importlib
from transformers import AutoModelForCausalLM, AutoTokenizer
from eagle3_workbench.formats import read_config, resolve_path
mt = read_config(resolve_path(sys.argv[1]))['model_type']
importlib.import_module(f"transformers.models.{mt}.modeling_{mt}")
t1b = time.perf_counter()
load_pair(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
warm = []
for _ in range(int(sys.argv[3])):
    a = time.perf_counter(); load_pair(sys.argv[1], sys.argv[2]); warm.append(time.perf_counter() - a)
print('RESULT ' + json.dumps(dict(import_pkg=t1 - t0, import_tf=t1b - t1, first=t2 - t1, warm=warm)))
'''

def run(quick:bool=False)->dict:
    z = zoo()
    t, d = z.spec('tiny-dsv3'), z.spec('tiny-dsv3-eagle3')
    procs, warm_n = (1, 3) if quick else (3, 5)
    firsts, warm, imports, tf = [], [], [], []
    for _ in range(procs):
        p = subprocess.run([sys.executable, '-c', CHILD, t, d, str(warm_n)], capture_output=True, text=True,
                           env=subprocess_env(), timeout=300)
        line = next((l for l in p.stdout.splitlines() if l.startswith('RESULT ')), None)
        if p.returncode or line is None: raise RuntimeError(f"load child failed (rc {p.returncode}): {p.stderr[-800:]}")
        r = json.loads(line[7:])
        firsts.append(r['first']); warm += r['warm']; imports.append(r['import_pkg']); tf.append(r['import_tf'])
    f, w = med(firsts), med(warm)
    return dict(title=TITLE, question=QUESTION,
                setup=f"`load_pair({t!r}, {d!r})` in {procs} fresh Python process(es) (after `import eagle3_workbench.loading`; "
                      f"the first call includes importing transformers and the target's modeling code, timed separately); then {warm_n} more calls in each warm process.",
                rows=[
        row("load_pair, first call in a fresh process", f, 's', spread(firsts), '< 2 s', f < 2,
            f"of it: importing transformers and the target's modeling code {med(tf):.2f} s, the load itself "
            f"{med([a - b for a, b in zip(firsts, tf)]):.2f} s; a warm call takes {w:.2f} s"),
        row("load_pair, repeated in a warm process", w, 's', spread(warm), '< 2 s', w < 2),
        row("import eagle3_workbench.loading (fresh process)", med(imports), 's', spread(imports), note='before load_pair; info'),
    ])
