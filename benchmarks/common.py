"""Shared pieces of the benchmarks: where the zoo is, interleaved timing, summaries and result rows."""
from __future__ import annotations
import contextlib, gc, json, math, os, statistics, subprocess, sys, tempfile, time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINIZOO = Path(os.environ.get('E3W_BENCH_ZOO', '/tmp/minizoo'))

# --------------------------------------------------------------------------------------------------------------------
# the zoo
@dataclass
class Zoo:
    "Where the benchmarks find the zoo pairs: the package's zoo when it is built, otherwise a miniature one."
    root: Path
    label: str
    packaged: bool

    def spec(self, name:str)->str:
        "What to pass to `load_pair` for a zoo model: `zoo:NAME` for the package zoo, else the directory."
        return f"zoo:{name}" if self.packaged else str(self.root/name)

    def path(self, name:str)->Path: return self.root/name

    def prompts(self, n:int|None=None)->list:
        lines = [l for l in (self.root/'prompts.jsonl').read_text().splitlines() if l.strip()]
        return [json.loads(l)['prompt'] for l in lines[:n]]

    def build_log(self)->dict:
        f = self.root/'build_log.json'
        return json.loads(f.read_text()) if f.exists() else {}

    def trained(self, draft_name:str, n_layers:int)->tuple:
        "The resid layers a zoo draft was trained on (build log; the engines' default otherwise)."
        got = self.build_log().get('models', {}).get(draft_name, {}).get('resid_layers')
        if got: return tuple(got)
        from eagle3_workbench.conventions import default_resid_layers
        return default_resid_layers(n_layers)

@lru_cache(None)
def zoo()->Zoo:
    "The package zoo when `zoo_data/ZOO.md` exists; else $E3W_BENCH_ZOO or /tmp/minizoo; else a miniature build in a temp dir."
    from eagle3_workbench.target import zoo_root
    if (zoo_root()/'ZOO.md').exists(): return Zoo(zoo_root(), 'package zoo (eagle3_workbench/zoo_data)', True)
    if (MINIZOO/'tiny-dsv3').exists(): return Zoo(MINIZOO, f'miniature zoo at {MINIZOO} (the package zoo is not built yet)', False)
    from eagle3_workbench.zoo import ZooRecipe
    from eagle3_workbench.card import build_zoo
    out = Path(tempfile.mkdtemp(prefix='e3w-minizoo-'))
    print(f"[benchmarks] no zoo found: building a miniature one in {out}", file=sys.stderr, flush=True)
    build_zoo(out, ZooRecipe.miniature())
    return Zoo(out, f'miniature zoo built at {out} (the package zoo is not built)', False)

_PAIRS = {}
def pair(name:str='tiny-dsv3'):
    "A zoo pair, loaded once per process."
    if name not in _PAIRS:
        from eagle3_workbench.loading import load_pair
        z = zoo()
        _PAIRS[name] = load_pair(z.spec(name), z.spec(f"{name}-eagle3"))
    return _PAIRS[name]

def drop_pairs(): _PAIRS.clear(); gc.collect()

# --------------------------------------------------------------------------------------------------------------------
# timing
def timed(fn)->float:
    "Seconds for one call of `fn`, with the garbage collector paused."
    en = gc.isenabled(); gc.disable()
    try:
        t0 = time.perf_counter(); fn(); return time.perf_counter() - t0
    finally:
        if en: gc.enable()

def interleaved(variants:dict, # name -> zero-argument callable
                repeats:int, warmup:int=1,
                setup=None, # optional setup(name), run untimed before each call of that variant
               )->dict: # name -> list of seconds, one per repeat
    "Time every variant once per repeat, rotating the order each repeat, so that drift hits all variants alike."
    names = list(variants)
    for _ in range(warmup):
        for n in names:
            if setup: setup(n)
            variants[n]()
    out = {n: [] for n in names}
    for r in range(repeats):
        gc.collect()
        k = r % len(names)
        for n in names[k:] + names[:k]:
            if setup: setup(n)
            out[n].append(timed(variants[n]))
    return out

def ratios(a:list, b:list)->list:
    "Per-repeat ratios a[i] / b[i] (both measured in the same repeat)."
    return [x / y for x, y in zip(a, b)]

def quantile(xs, q):
    xs = sorted(xs)
    if len(xs) == 1: return xs[0]
    p = q * (len(xs) - 1); i = int(math.floor(p)); f = p - i
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * f

def summ(xs)->dict:
    "Median, quartiles, min and max."
    xs = list(xs)
    return dict(median=statistics.median(xs), q1=quantile(xs, .25), q3=quantile(xs, .75), min=min(xs), max=max(xs), n=len(xs))

def g(x, d=3)->str:
    "A number with `d` significant digits, no scientific notation for ordinary magnitudes."
    if x is None: return '-'
    if isinstance(x, int): return f"{x:,}"
    if x == 0 or not math.isfinite(x): return str(x)
    if abs(x) >= 10 ** d: return f"{x:,.0f}"
    return f"{x:.{max(0, d - 1 - int(math.floor(math.log10(abs(x)))))}f}"

def spread(xs, scale:float=1.0, unit:str='')->str:
    "'IQR a-b, min-max c-d, n=N' of a sample (after multiplying by `scale`)."
    s = summ([x * scale for x in xs])
    if s['n'] == 1: return 'n=1'
    return f"IQR {g(s['q1'])}-{g(s['q3'])}{unit}, range {g(s['min'])}-{g(s['max'])}{unit}, n={s['n']}"

def med(xs, scale:float=1.0)->float: return statistics.median(xs) * scale

# --------------------------------------------------------------------------------------------------------------------
# rows
def row(metric:str, value, unit:str='', spread:str='', target:str='', met=None, note:str='')->dict:
    "One result row. `value` is a number, or None when it could not be measured (then `note` says why)."
    if value is not None and not isinstance(value, (int, float)): raise TypeError(f"{metric}: value must be a number or None")
    return dict(metric=metric, value=value, unit=unit, spread=spread, target=target, met=met, note=note)

def unavailable(metric:str, why:str, target:str='')->dict:
    return row(metric, None, target=target, met=None, note=why)

def module_available(name:str)->tuple:
    "(True, '') when `name` imports, else (False, the reason)."
    import importlib
    try: importlib.import_module(name); return True, ''
    except Exception as e: return False, f"{type(e).__name__}: {e}"

TINY_ENV = 'E3W_BENCH_TINY'
def tiny()->bool:
    "`run.py --tiny`: the smallest sizes, no busy processes; the suite checks that every benchmark runs, not its numbers."
    return os.environ.get(TINY_ENV) == '1'

def threads()->int:
    import torch
    return torch.get_num_threads()

@contextlib.contextmanager
def busy(n:int=2, seconds:float=1800):
    "`n` other processes spinning on the cores while the block runs (bounded: each ends by itself after `seconds`)."
    code = f"import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass"
    spin = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(n)]
    try: time.sleep(0.5); yield spin
    finally:
        for p in spin: p.kill(); p.wait()

def subprocess_env()->dict:
    "Environment for child processes: same thread count, the repository importable."
    env = dict(os.environ)
    env['OMP_NUM_THREADS'] = env['MKL_NUM_THREADS'] = str(threads())
    env['PYTHONPATH'] = os.pathsep.join(p for p in (str(ROOT), env.get('PYTHONPATH', '')) if p)
    env.setdefault('TQDM_DISABLE', '1')
    return env
