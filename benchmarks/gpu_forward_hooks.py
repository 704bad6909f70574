#!/usr/bin/env python
"""What leaving `--forward-hooks` with eagle3_workbench.sglang.hook:factory on costs per forward pass, on a GPU, at the width
and depth of the models people debug (DeepSeek-V3 / Kimi-K2: 61 layers, hidden 7168).

Needs only PyTorch with CUDA and transformers, not SGLang: the models are transformers' own (their module names,
`model.layers.{k}.input_layernorm`, `model.norm`, are SGLang's), and the draft is the workbench's EAGLE-3 draft under
SGLang's names (`model.fc`, `model.midlayer`). The hooks are registered by SGLang's own `register_forward_hooks`
(`srt/model_executor/hook_manager.py`, loaded by path from `$EAGLE3_SGLANG_SRC` or an installed sglang, as
tests/sglang_source.py does) when that file is there, else by `attach_forward_hooks` (the same fnmatch over
`named_modules()`); the output says which. So it runs on a GPU machine that cannot install SGLang (one with no network:
SGLang 0.5.23 pins torch 2.14.1 and ships a cp311 wheel of 39 MB plus its kernel packages).

    python benchmarks/gpu_forward_hooks.py [--out DIR] [--cases zoo,wide] [--tokens 512,8,1] [--repeats 21]
           [--layers 61] [--hidden 7168] [--intermediate 18432] [--device cuda]

Cases:

- `wide`: a randomly initialised Llama target, 61 layers at hidden 7168 (56 heads of 128, 8 KV heads, MLP 18432,
  vocabulary 2048) in bf16, built on the GPU (31.3 B parameters, 63 GB), and a random EAGLE-3 draft at the same width.
- `zoo`: the zoo pair `zoo:tiny-dsv3` + `zoo:tiny-dsv3-eagle3` (fp32), where kernel launches dominate a forward.

Variants, timed side by side: the target bare, with the hooks of the default wiring (resid[2, N//2, N-3]: three input
norms), the same with `sample_rate` 0.1 (one pass in ten recorded, as one would leave it on in production) and with
every resid[0..N]; the draft bare and with its fc and midlayer hooked. Stats mode, as deployed: stats
on the GPU, one transfer per hooked point, records appended per pass. Each repeat runs every variant once (order
rotated), each forward between two `torch.cuda.synchronize()`; the ratio is taken per repeat, then the median. The hooks
of a variant are switched by swapping the modules' hook tables (the model is too large to copy), outside the timing.

Checks printed with the numbers: records per hooked pass (one per hooked point), and that the `target.resid[k]` the hook
recorded in the first 512-token pass matches the per-token norms of transformers' `hidden_states[k]` for the same ids.
Writes `gpu_forward_hooks.json` and `.md` under `--out`. Exit status 2 without a CUDA GPU (unless `--device cpu`,
for a smoke run at small sizes), 1 when a check fails.
"""
from __future__ import annotations
import argparse, gc, json, platform, shutil, statistics, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT/'benchmarks'), str(ROOT/'tests')]
import torch  # noqa: E402
from common import interleaved, ratios, spread, g  # noqa: E402

def say(*a): print(*a, flush=True)

# --------------------------------------------------------------------------------------------------------------------
# registration: SGLang's own code when its source is at hand

def sglang_registrar():
    "(register(model, specs_json), description): SGLang's register_forward_hooks if its source is found, else ours."
    from sglang_source import sglang_source, sglang_debug_tools
    src = sglang_source()
    if src is not None and (src/'srt/model_executor/hook_manager.py').exists():
        with sglang_debug_tools(src) as tools: fn = tools.hook_manager.register_forward_hooks
        return (lambda model, js: fn(model, json.loads(js))), f"SGLang's register_forward_hooks from {src}"
    from eagle3_workbench.sglang.hook import attach_forward_hooks
    return (lambda model, js: attach_forward_hooks(model, js)), ("eagle3_workbench.sglang.attach_forward_hooks (no SGLang "
            "source: set EAGLE3_SGLANG_SRC to an sglang package folder to register with SGLang's own code)")

_TABLES = ('_forward_hooks', '_forward_hooks_with_kwargs', '_forward_hooks_always_called',
           '_forward_pre_hooks', '_forward_pre_hooks_with_kwargs')

def _tables(model)->dict:
    return {m: {t: dict(getattr(m, t)) for t in _TABLES} for m in model.modules()}

def collect_hooks(model, register, specs_json)->dict:
    "Register the specs, take the hooks they added off the model again, and return them (module -> hook tables)."
    before = _tables(model)
    register(model, specs_json)
    added = {}
    for m, tabs in _tables(model).items():
        new = {t: {k: v for k, v in d.items() if k not in before[m][t]} for t, d in tabs.items()}
        if any(new.values()): added[m] = new
        for t in _TABLES:
            for k in new[t]: getattr(m, t).pop(k)
    return added

def switch_to(hooks:dict, every:set):
    "Leave exactly `hooks` on the modules in `every` (what collect_hooks returned, for one variant)."
    for m in every:
        for t in _TABLES:
            d = getattr(m, t); d.clear(); d.update(hooks.get(m, {}).get(t, {}))

# --------------------------------------------------------------------------------------------------------------------
# models

class SGLangNamed(torch.nn.Module):
    "The workbench's draft under SGLang's module names (model.fc, model.midlayer), calling it unchanged."
    def __init__(self, draft): super().__init__(); self.model = draft
    def forward(self, *a, **k): return self.model(*a, **k)

def wide_pair(args, device):
    import torch
    from transformers import LlamaConfig, AutoModelForCausalLM
    from eagle3_workbench.draft import Eagle3Draft
    from eagle3_workbench.draft_config import DraftConfig
    from eagle3_workbench.conventions import default_resid_layers
    from eagle3_workbench.wiring import draft_config_edit
    h, heads, kv, hd = args.hidden, args.heads, args.kv_heads, args.hidden // args.heads
    dtype = torch.bfloat16 if device == 'cuda' else torch.float32
    torch.manual_seed(0)
    tcfg = LlamaConfig(vocab_size=args.vocab, hidden_size=h, intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                       num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, max_position_embeddings=4096,
                       tie_word_embeddings=False)
    t0 = time.perf_counter()
    with torch.device(device): target = AutoModelForCausalLM.from_config(tcfg, dtype=dtype).eval()
    dcfg = dict(architectures=['LlamaForCausalLMEagle3'], model_type='llama', hidden_size=h, intermediate_size=args.intermediate,
                num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd, num_hidden_layers=1, hidden_act='silu',
                rms_norm_eps=1e-5, vocab_size=args.vocab, draft_vocab_size=args.vocab)
    dcfg, _ = draft_config_edit(dcfg, default_resid_layers(args.layers), args.layers, 'llama')
    with torch.device(device):
        draft = Eagle3Draft(DraftConfig.from_dict(dcfg))
        for p in draft.parameters():
            if p.dim() > 1: torch.nn.init.normal_(p, std=0.02)
        draft.embed_tokens = torch.nn.Embedding(args.vocab, h)
    draft = draft.to(dtype).eval()
    n_params = sum(p.numel() for p in target.parameters())
    say(f"wide pair built on {device} in {time.perf_counter() - t0:.1f} s: target {args.layers} layers x hidden {h} "
        f"({n_params / 1e9:.2f} B parameters, {n_params * target.dtype.itemsize / 2**30:.1f} GiB {target.dtype}), "
        f"draft fc {3 * h} -> {h}")
    return target, draft, f"random Llama {args.layers} x {h} ({n_params / 1e9:.1f} B params, {target.dtype})"

def zoo_pair(device):
    from eagle3_workbench.loading import load_pair
    p = load_pair('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', device=device)
    return p.target.eval(), p.draft.eval(), f"zoo:tiny-dsv3 ({p.n_layers} layers x hidden {p.target.config.hidden_size}, fp32)"

# --------------------------------------------------------------------------------------------------------------------
# timing

def sync(device):
    import torch
    if device == 'cuda': torch.cuda.synchronize()

def measure(call, variants:dict, every:set, repeats:int, warmup:int, device)->dict:
    "Seconds per forward for every variant, interleaved; the variant's hooks are swapped in (and synced) untimed."
    def timed_call(): call(); sync(device)
    def setup(name): switch_to(variants[name], every); sync(device)
    try: return interleaved({n: timed_call for n in variants}, repeats, warmup, setup=setup)
    finally: switch_to({}, every)

def records_in(folder:Path)->int:
    return sum(len(f.read_text().splitlines()) for f in folder.glob('rank*/records.jsonl'))

def check_against_hidden_states(target, hooks:dict, every:set, folder:Path, ids, layers)->dict:
    "One hooked pass that also returns transformers' hidden_states: the hook's resid[k] per-token norms against them."
    import torch
    from eagle3_workbench.sglang.readers import read_hook_folder
    from eagle3_workbench.sglang.hook import flush_all
    switch_to(hooks, every)
    try:
        with torch.no_grad(): hs = target(input_ids=ids, use_cache=False, output_hidden_states=True).hidden_states
    finally: switch_to({}, every)
    flush_all()
    recs = read_hook_folder(folder).merged
    worst = 0.0
    for k in layers:
        if k >= len(hs) - 1: continue   # hidden_states[-1] is after the final norm, not resid[N]
        want = torch.linalg.vector_norm(hs[k][0].float(), dim=-1).cpu()
        got = torch.tensor(next(r for r in recs if r.point == f'target.resid[{k}]').stats['norms'])
        worst = max(worst, float(((got - want).abs() / want.abs().clamp_min(1e-12)).max()))
    return dict(points=sorted({r.point for r in recs}), records=len(recs), worst_rel=worst)

def run_case(name, target, draft, label, args, device, register, tmp:Path)->dict:
    import torch
    from eagle3_workbench.sglang.hook import forward_hooks_json
    from eagle3_workbench.sglang.hook import flush_all
    from eagle3_workbench.conventions import default_resid_layers
    n = target.config.num_hidden_layers
    wired = list(default_resid_layers(n))
    sets = {'wired': wired, 'all': list(range(n + 1)), 'sampled': wired}
    rate = {'sampled': 0.1}
    tv = {'bare': {}}
    for k, layers in sets.items():
        tv[k] = collect_hooks(target, register, forward_hooks_json(layers, n, tmp/f'{name}-{k}', sample_rate=rate.get(k, 1.0)))
    dmodel = SGLangNamed(draft)
    dv = {'bare': {}, 'hooked': collect_hooks(dmodel, register, forward_hooks_json([], n, tmp/f'{name}-draft', draft_spelling='both'))}
    every_t, every_d = set(target.modules()), set(dmodel.modules())
    th = target.config.hidden_size
    say(f"[{name}] {label}: hooked modules, target wired {len(tv['wired'])}, all {len(tv['all'])}; draft {len(dv['hooked'])}")
    rows, ok = [], True
    expect = {k: len(v) + (n in v) for k, v in sets.items()} | {'hooked': 3}   # model.norm also records target.norm
    full, passes, golden = expect['sampled'], 0, (5 ** 0.5 - 1) / 2   # sampled: the passes whose number n has frac(n * golden) < rate
    for T in args.tokens:
        g_ = torch.Generator().manual_seed(T)
        ids = torch.randint(0, target.config.vocab_size, (1, T), generator=g_).to(device)
        feats = (torch.randn(1, T, 3 * th, generator=g_) * 0.5).to(device, draft.fc.weight.dtype)
        pos = torch.arange(T, device=device)[None]
        @torch.no_grad()
        def t_call(): target(input_ids=ids, use_cache=False)
        @torch.no_grad()
        def d_call(): dmodel(feats, ids, pos)
        for who, call, variants, every, hooked in (('target', t_call, tv, every_t, ('wired', 'all', 'sampled')),
                                                   ('draft', d_call, dv, every_d, ('hooked',))):
            folders = {k: tmp/f"{name}-{'draft' if who == 'draft' else k}" for k in hooked}
            before = {k: records_in(f) for k, f in folders.items()}
            t = measure(call, variants, every, args.repeats, args.warmup, device)
            flush_all()
            calls = args.repeats + args.warmup
            if who == 'target':
                expect['sampled'] = full * sum((i * golden) % 1 < rate['sampled'] for i in range(passes, passes + calls)) / calls
                passes += calls
            bare = statistics.median(t['bare'])
            rows.append(dict(case=name, who=who, tokens=T, variant='bare', ms=bare * 1e3, spread=spread(t['bare'], 1e3, ' ms')))
            for k in hooked:
                per_pass = (records_in(folders[k]) - before[k]) / calls
                r = ratios(t[k], t['bare'])
                good = abs(per_pass - expect[k]) < 1e-9
                ok &= good
                rows.append(dict(case=name, who=who, tokens=T, variant=k, ratio=statistics.median(r), spread=spread(r),
                                 added_ms=(statistics.median(t[k]) - bare) * 1e3, records_per_pass=per_pass,
                                 expected_records=expect[k], records_ok=good))
            say('  ' + ' | '.join(fmt(x) for x in rows[-1 - len(hooked):]))
    # the hooks recorded what the model computed: a fresh wired pass on the largest size, against hidden_states
    T = max(args.tokens)
    ids = torch.randint(0, target.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T)).to(device)
    folder = tmp/f'{name}-check'
    chk = check_against_hidden_states(target, collect_hooks(target, register, forward_hooks_json(wired, n, folder)),
                                      every_t, folder, ids, wired)
    good = chk['worst_rel'] <= 1e-5 and chk['records'] == expect['wired']
    ok &= good
    say(f"  [{name}] resid{wired} recorded by the hook vs transformers' hidden_states, {T} tokens: worst relative "
        f"difference of per-token norms {chk['worst_rel']:.2e} ({'ok' if good else 'MISMATCH'})")
    return dict(case=name, label=label, rows=rows, check=chk, check_ok=good, ok=ok)

def fmt(r:dict)->str:
    if r['variant'] == 'bare': return f"{r['who']} {r['tokens']} tok bare {g(r['ms'])} ms"
    return (f"{r['variant']} {g(r['ratio'])}x ({'+' if r['added_ms'] >= 0 else ''}{g(r['added_ms'])} ms, {g(r['records_per_pass'])} rec/pass"
            f"{'' if r['records_ok'] else ' EXPECTED ' + str(r['expected_records'])})")

def markdown(results:list, info:dict)->str:
    L = ['# forward-hooks overhead on a GPU', '', f"- {info['when']}; {info['device']}; torch {info['torch']}, "
         f"transformers {info['transformers']}; hooks registered by {info['registrar']}", '',
         '| case | model | tokens | variant | forward | ratio to bare | added per pass | records per pass |', '|---|---|---|---|---|---|---|---|']
    for res in results:
        bare = {}
        for r in res['rows']:
            key = (r['who'], r['tokens'])
            if r['variant'] == 'bare': bare[key] = r; continue
            b = bare[key]
            L.append(f"| {res['case']} | {r['who']} | {r['tokens']} | {r['variant']} | {g(b['ms'])} ms ({b['spread']}) | "
                     f"{g(r['ratio'])}x ({r['spread']}) | {g(r['added_ms'])} ms | {g(r['records_per_pass'])}"
                     f"{'' if r['records_ok'] else ' (expected ' + str(r['expected_records']) + ')'} |")
    L.append('')
    for res in results:
        L.append(f"- {res['case']}: {res['label']}; hook vs hidden_states worst relative difference {res['check']['worst_rel']:.2e}")
    return '\n'.join(L) + '\n'

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', type=Path, default=None, help='folder for gpu_forward_hooks.json / .md (default: a new temporary folder)')
    ap.add_argument('--cases', default='zoo,wide')
    ap.add_argument('--tokens', default='512,8,1', help='forward sizes: prefill-, verify- and decode-sized')
    ap.add_argument('--repeats', type=int, default=21)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--layers', type=int, default=61)
    ap.add_argument('--hidden', type=int, default=7168)
    ap.add_argument('--heads', type=int, default=56)
    ap.add_argument('--kv-heads', type=int, default=8)
    ap.add_argument('--intermediate', type=int, default=18432)
    ap.add_argument('--vocab', type=int, default=2048)
    ap.add_argument('--device', default='cuda', choices=('cuda', 'cpu'), help='cpu: a smoke run of this script, at small sizes')
    args = ap.parse_args(argv)
    args.tokens = [int(x) for x in args.tokens.split(',')]
    import torch, transformers
    if args.device == 'cuda' and not torch.cuda.is_available():
        print('gpu_forward_hooks: no CUDA GPU is visible (torch.cuda.is_available() is False); '
              '--device cpu runs this script at small sizes as a smoke test', file=sys.stderr)
        return 2
    register, how = sglang_registrar()
    out = args.out or Path(tempfile.mkdtemp(prefix='e3w-gpu-hooks-'))
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix='e3w-gpu-hooks-records-'))
    dev = torch.cuda.get_device_name() if args.device == 'cuda' else f"CPU ({platform.processor() or platform.machine()})"
    info = dict(when=time.strftime('%Y-%m-%d %H:%M %Z'), device=dev, torch=torch.__version__,
                transformers=transformers.__version__, registrar=how)
    say(f"{dev}; torch {torch.__version__}; hooks registered by {how}")
    results = []
    try:
        for case in filter(None, args.cases.split(',')):
            target, draft, label = zoo_pair(args.device) if case == 'zoo' else wide_pair(args, args.device)
            try: results.append(run_case(case, target, draft, label, args, args.device, register, tmp))
            finally:
                del target, draft; gc.collect()
                if args.device == 'cuda': torch.cuda.empty_cache()
    finally: shutil.rmtree(tmp, ignore_errors=True)
    (out/'gpu_forward_hooks.json').write_text(json.dumps(dict(info=info, results=results), indent=1, default=str))
    md = markdown(results, info)
    (out/'gpu_forward_hooks.md').write_text(md)
    say('\n' + md + f"\nwritten under {out}")
    return 0 if all(r['ok'] for r in results) else 1

if __name__ == '__main__': sys.exit(main())
