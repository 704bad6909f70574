#!/usr/bin/env python
"""Check `eagle3_workbench.sglang` against a real SGLang, on a GPU machine.

Needs a CUDA GPU and SGLang. The `sglang` extra is installed with this repository, editable (the scheduler processes
SGLang starts must be able to import `eagle3_workbench`): `--install` runs `pip install -e .[sglang]` for it first, in
the interpreter that runs this script (it needs a package index), or do it yourself beforehand. Then:

    python scripts/gpu_sglang_check.py [--install] [--out DIR] [--port 30123] [--only zoo,llama,wide] [--skip live,server,dumper,record]
        [--timeout 900] [--record-dtype float32]

Three pairs are checked, each through both doors (and the zoo's through a recording):

- `zoo`: the zoo pair `zoo:tiny-dsv3` + `zoo:tiny-dsv3-eagle3` (a DeepSeek-V3-architecture target with MLA and MoE,
  and its EAGLE-3 draft), found with `eagle3_workbench.formats.resolve_path`.
- `llama`: the zoo pair `zoo:tiny-llama` + `zoo:tiny-llama-eagle3` (the pair the CPU recordings of
  `tests/fixtures/recordings/` are of).
- `wide`: a randomly initialised EAGLE-3 draft at hidden size 7168 (DeepSeek-V3's width: 56 heads of 128, 8 KV heads).
  SGLang hands the target's embedding to an EAGLE-3 draft, so the draft needs a target of the same width: a
  randomly initialised 4-layer Llama at hidden 7168 is written next to it (on the GPU, in bf16, about 1 GB). The
  draft's config is written with `draft_config_edit` to read resid[1, 2, 3].

For each pair:

1. `live`: in a fresh subprocess, `eagle3_workbench.sglang.launch.live_runner` builds a tensor-parallel-1 SGLang `ModelRunner`
   for the target (CUDA graphs off), hooks every resid[k] (each layer's input norm, the final norm) with the
   `--forward-hooks` factory, runs one prefill and two decode passes, and prints what the hooks recorded
   (`read_hook_folder` report, `presence_by_phase`). The
   prefill's `target.resid[k]` are then compared with the in-process `Capture` of the transformers model on the same
   token ids (`compare_captures`; SGLang's bf16 against fp32: 'close', not 'identical', is the expected verdict).
2. `server`: `python -m sglang.launch_server` with `--speculative-algorithm EAGLE3`, TP 1, the `--forward-hooks` JSON of
   `forward_hooks_json` for the draft's wiring, `--disable-cuda-graph` and `--decode-log-interval 1`; two greedy
   requests; the server is stopped (its own process group only). Printed: the hook folder report, `presence_by_phase`,
   the widths of `draft.fc.in` (3 x the target's hidden size) and `draft.hidden` (the draft's), the phases seen, and
   the acceptance timeline `read_server_log` finds in the server log (random drafts accept ~1.0 tokens: expected).
   Unless `--skip dumper`, the same server also runs SGLang's dumper (`DUMPER_ENABLE=1`, non-intrusive mode `all`,
   filtered to the batch's ids and positions and the draft fc's input): `read_dumper` reads its files, and its
   `draft.fc.in` must equal, bit for bit, the first `draft.fc.in` the `--forward-hooks` factory recorded (two doors,
   one tensor).

3. `record` (zoo pairs only): the target recorded inside SGLang with the record mode of the `--forward-hooks` factory,
   exactly as `scripts/sglang_record.py` does on CPU (`record_with_sglang`: `--disable-radix-cache`, generate greedily,
   then prompt + completion as one prefill; the raw passes of every rank assembled by
   `eagle3_workbench.engine_recording.assemble`), on 8 zoo prompts cut to 16 tokens with 31 continuation tokens and
   the draft's vocabulary's logits, in `--record-dtype` (default float32). Then the in-process recorder records the
   same prompts, and both are compared: tokens and greedy tokens, resid[k] and logits (printed), and the doctor from
   each with the zoo draft: the same verdict and recommended layers are required, accept lengths are printed side by
   side (within 0.01 in float32). SGLang reads a few DeepSeek-V3 config keys the zoo's `tiny-dsv3` does not write
   (transformers does not need them): the record step serves a copy of its folder whose config.json adds the
   DeepSeek-V3 hub values (`moe_layer_freq` 1, `topk_method` noaux_tc, `scoring_func` sigmoid, `ep_size` 1), which
   describe what transformers computes; the weights are links to the zoo's.

Everything is written under `--out` (default: a new temporary folder), which is printed at the end; the server logs are
there. Exits with status 2 and a message when no GPU is visible or SGLang is missing; a step that fails prints its
error and the script goes on; the exit status is 1 when any step failed.
"""
import argparse, os, shlex, subprocess, sys, tempfile, time, traceback
from pathlib import Path
from sglang_server import http_json, running_server   # scripts/, beside this file

PROMPTS = ["The quick brown fox jumps over the lazy dog. Then the dog", "def fibonacci(n):\n    if n < 2:\n        return"]

def say(*a): print(*a, flush=True)

def banner(s): say('\n' + '=' * 100 + f'\n{s}\n' + '=' * 100)

def install_sglang_extra():
    "pip install -e .[sglang] for this repository, in this interpreter."
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, '-m', 'pip', 'install', '-e', f'{root}[sglang]']
    say('installing the sglang extra: ' + ' '.join(cmd))
    r = subprocess.run(cmd)
    if r.returncode:
        print(f"gpu_sglang_check: pip install -e .[sglang] failed (status {r.returncode})", file=sys.stderr)
        sys.exit(2)

def require_gpu_and_sglang():
    import torch
    from importlib.util import find_spec
    why = []
    if not torch.cuda.is_available(): why.append("no CUDA GPU is visible (torch.cuda.is_available() is False): run this on a GPU machine")
    if find_spec('sglang') is None: why.append("SGLang is not installed: run with --install, or pip install -e .[sglang] from the repository root")
    if why:
        print('gpu_sglang_check: ' + '; '.join(why), file=sys.stderr)
        sys.exit(2)

# ------------------------------------------------------------------------------------------------------------------
# the pairs
# ------------------------------------------------------------------------------------------------------------------

ZOO_PAIRS = {'zoo': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3'), 'llama': ('zoo:tiny-llama', 'zoo:tiny-llama-eagle3')}

def zoo_pair(name='zoo'):
    from eagle3_workbench.formats import resolve_path
    return tuple(resolve_path(p) for p in ZOO_PAIRS[name])

DEEPSEEK_HUB_KEYS = {'moe_layer_freq': 1, 'topk_method': 'noaux_tc', 'scoring_func': 'sigmoid', 'ep_size': 1}

def sglang_target(target, out:Path)->Path:
    "The target as SGLang is given it: a DeepSeek-V3 folder gets a copy whose config adds the hub keys SGLang reads (weights linked)."
    import json
    cfg = json.loads((Path(target)/'config.json').read_text())
    missing = {k: v for k, v in DEEPSEEK_HUB_KEYS.items() if k not in cfg}
    if cfg.get('model_type') not in ('deepseek_v3', 'deepseek_v2') or not missing: return Path(target)
    dst = out/f"{Path(target).name}-for-sglang"
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(target).iterdir():
        if f.is_file() and f.name != 'config.json' and not (dst/f.name).exists(): (dst/f.name).symlink_to(f.resolve())
    (dst/'config.json').write_text(json.dumps({**cfg, **missing}, indent=1))
    return dst

def wide_pair(out:Path, n_layers=4, resid=(1, 2, 3), hidden=7168):
    "A random 4-layer Llama target and a random EAGLE-3 draft, both at hidden 7168, written under `out`."
    import torch
    from transformers import LlamaConfig, AutoModelForCausalLM, AutoTokenizer
    from eagle3_workbench.draft import Eagle3Draft
    from eagle3_workbench.draft_config import DraftConfig
    from eagle3_workbench.loading import save_draft
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.wiring import draft_config_edit
    tdir, ddir = out/'wide-target', out/'wide-draft-7168'
    if (tdir/'config.json').exists() and (ddir/'config.json').exists(): return tdir, ddir
    tok = None
    try: tok = AutoTokenizer.from_pretrained(str(resolve_path('zoo:tiny-dsv3')))
    except Exception as e: say(f"(no zoo tokenizer: {e}; the wide target gets none and the server runs with --skip-tokenizer-init)")
    vocab = len(tok) if tok is not None else 2048
    torch.manual_seed(0)
    tcfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2048, num_hidden_layers=n_layers,
                       num_attention_heads=56, num_key_value_heads=8, head_dim=128, max_position_embeddings=2048,
                       rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    with torch.device('cuda'):
        target = AutoModelForCausalLM.from_config(tcfg, dtype=torch.bfloat16)
    target.save_pretrained(tdir)
    if tok is not None: tok.save_pretrained(tdir)
    del target; torch.cuda.empty_cache()
    dcfg = dict(architectures=['LlamaForCausalLMEagle3'], model_type='llama', hidden_size=hidden, intermediate_size=2048,
                num_attention_heads=56, num_key_value_heads=8, head_dim=128, num_hidden_layers=1, hidden_act='silu',
                rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=2048, tie_word_embeddings=False,
                vocab_size=vocab, draft_vocab_size=vocab, torch_dtype='bfloat16')
    dcfg, diff = draft_config_edit(dcfg, resid, n_layers, 'llama')
    say(f"wide draft config edit:\n{diff}")
    with torch.device('cuda'):
        draft = Eagle3Draft(DraftConfig.from_dict(dcfg))
        for p in draft.parameters():
            if p.dim() > 1: torch.nn.init.normal_(p, std=0.02)   # norms keep their weight of ones
    draft.d2t.zero_(); draft.t2d.fill_(True)   # draft vocabulary = target vocabulary: identity map
    save_draft(draft, ddir, dcfg, dtype=torch.bfloat16)
    if tok is not None: tok.save_pretrained(ddir)
    del draft; torch.cuda.empty_cache()
    return tdir, ddir

# ------------------------------------------------------------------------------------------------------------------
# 1. the live runner (run in a fresh subprocess: SGLang initialises torch.distributed once per process)
# ------------------------------------------------------------------------------------------------------------------

def live_child(target:str, folder:str):
    import torch
    from eagle3_workbench.sglang.launch import live_runner
    from eagle3_workbench.sglang.compare import compare_captures, presence_by_phase
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.capture import Capture
    cap = live_runner(target, folder, input_len=16, decode_steps=2, mem_fraction_static=0.3)
    say(cap.report()); say(presence_by_phase(cap))
    for r in cap.merged[:6]: say(' ', r)
    pre = [r for r in cap.merged if r.phase == 'prefill']
    ids = next((r.token_ids for r in pre if r.token_ids), None)
    if not ids: raise RuntimeError("the prefill records carry no token ids: cannot compare with transformers")
    say(f"prefill token ids: {ids}")
    model, _ = load_target(target, device='cuda')
    with Capture(model, points='target.resid[*]') as hf:
        with torch.no_grad(), hf.phase('extend'): model(input_ids=torch.tensor([ids], device='cuda'))
    cmp = compare_captures(hf, pre, rtol=5e-2, labels=('transformers', 'sglang'))
    say(cmp)
    if bad := [r['point'] for r in cmp.rows if r['verdict'] == 'differs']:
        raise RuntimeError(f"SGLang's resid differs from transformers' by more than 5% (norm_mean) at {bad}")

def step_live(name, target, out):
    banner(f"[{name}] live runner on {target}")
    r = subprocess.run([sys.executable, __file__, '--live-child', str(target), str(out/f'{name}-live')], timeout=1200)
    if r.returncode: raise RuntimeError(f"live runner subprocess failed (status {r.returncode})")

# ------------------------------------------------------------------------------------------------------------------
# 2. --forward-hooks on a server
# ------------------------------------------------------------------------------------------------------------------

DUMPER_FILTER = r"name in ('input_ids', 'positions', 'seq_lens') or search(r'\.fc\.inputs', name) is not None"

def step_server(name, target, draft, out, port, timeout, dumper=True):
    from eagle3_workbench.formats import read_config
    from eagle3_workbench.wiring import resolve_wiring
    from eagle3_workbench.sglang.hook import forward_hooks_json
    from eagle3_workbench.sglang.launch import launch_command
    from eagle3_workbench.sglang.readers import read_hook_folder, read_dumper
    from eagle3_workbench.sglang.compare import presence_by_phase
    from eagle3_workbench.sglang.log import read_server_log
    banner(f"[{name}] sglang.launch_server --forward-hooks on {target} + {draft}")
    tcfg, dcfg = read_config(target), read_config(draft)
    n = tcfg['num_hidden_layers']
    wiring = resolve_wiring(dcfg, n, 'sglang', tcfg.get('model_type'))
    say(f"wiring: {wiring.reason}")
    folder, log = out/f'{name}-hooks', out/f'{name}-server.log'
    hooks = forward_hooks_json(wiring.resid_layers, n, folder, draft_spelling='both')
    has_tok = any((Path(target)/f).exists() for f in ('tokenizer.json', 'tokenizer_config.json'))
    cmd = launch_command(target, draft, steps=3, topk=1, num_draft_tokens=4, tp=1, forward_hooks=hooks, probing=True,
                         port=port, decode_log_interval=1, mem_fraction_static=0.3, trust_remote_code=True,
                         skip_tokenizer_init=not has_tok)
    say(cmd)
    argv = shlex.split(cmd.replace('\\\n', ' '))
    argv[0] = sys.executable
    env = dict(os.environ)
    if dumper:
        env.update(DUMPER_ENABLE='1', DUMPER_DIR=str(out/f'{name}-dumper'), DUMPER_NON_INTRUSIVE_MODE='all',
                   DUMPER_FILTER=DUMPER_FILTER, DUMPER_ENABLE_OUTPUT_CONSOLE='0')
        say(f"with SGLang's dumper: DUMPER_DIR={env['DUMPER_DIR']} DUMPER_FILTER={DUMPER_FILTER!r}")
    with running_server(argv, log, f'http://127.0.0.1:{port}/get_model_info', timeout, env):
        ids = [[(7 * i + 3 * j) % 200 + 10 for j in range(24)] for i in range(len(PROMPTS))]
        for i, prompt in enumerate(PROMPTS):
            body = {'sampling_params': {'max_new_tokens': 48, 'temperature': 0}}
            body.update({'text': prompt} if has_tok else {'input_ids': ids[i]})
            for attempt in range(5):
                try:
                    res = http_json(f'http://127.0.0.1:{port}/generate', body, timeout=300); break
                except Exception as e:
                    if attempt == 4: raise
                    say(f"(generate failed: {e}; retrying)"); time.sleep(5)
            meta = res.get('meta_info', {}) if isinstance(res, dict) else {}
            say(f"request {i}: completion_tokens={meta.get('completion_tokens')} spec_verify_ct={meta.get('spec_verify_ct')} "
                f"spec_accept_length={meta.get('spec_accept_length')}")
    cap = read_hook_folder(folder)
    say(cap.report())
    say(presence_by_phase(cap))
    for point in ('draft.fc.in', 'draft.fc.out', 'draft.hidden') + tuple(f'target.resid[{k}]' for k in wiring.resid_layers):
        rs = [r for r in cap.merged if r.point == point]
        widths = sorted({r.shape[-1] for r in rs})
        phases = sorted({r.phase for r in rs})
        say(f"{point:<20} {len(rs):>4} records, last dim {widths}, phases {phases}")
    fc = [r for r in cap.merged if r.point == 'draft.fc.in']
    if not fc: raise RuntimeError("no draft.fc.in was recorded: did the draft's model.fc fire? (see presence above)")
    want = len(wiring.resid_layers) * tcfg['hidden_size']
    if {r.shape[-1] for r in fc} != {want}: raise RuntimeError(f"draft.fc.in width {sorted({r.shape[-1] for r in fc})}, expected {want}")
    tl = read_server_log(log)
    acc = [r['accept_len'] for r in tl if r['accept_len'] is not None]
    say(f"acceptance timeline: {len(tl)} decode log lines, accept len {acc[:20]}{' ...' if len(acc) > 20 else ''}")
    if acc: say(f"mean accept len {sum(acc) / len(acc):.3f}")
    if dumper:
        banner(f"[{name}] SGLang's dumper, read back")
        dcap = read_dumper(out/f'{name}-dumper', keep_tensors=True)
        say(dcap.report()); say(presence_by_phase(dcap))
        dfc = [r for r in dcap.merged if r.point == 'draft.fc.in']
        if not dfc: raise RuntimeError("the dumper wrote no draft.fc.in (non_intrusive__model.fc.inputs.0)")
        from eagle3_workbench.records import load_tensor
        same = torch_equal(load_tensor(fc[0]), dfc[0].tensor)
        say(f"draft.fc.in: dumper {tuple(dfc[0].shape)} vs forward hook {tuple(fc[0].shape)}: "
            f"{'bitwise equal' if same else 'DIFFERENT'}")
        if not same: raise RuntimeError("the dumper's and the hook's first draft.fc.in differ")

# ------------------------------------------------------------------------------------------------------------------
# 3. a recording made inside SGLang, and the doctor from it
# ------------------------------------------------------------------------------------------------------------------

def step_record(name, out, port, timeout, dtype='float32', device=None):   # device: None (SGLang's choice, the GPU); 'cpu' runs it here
    import torch
    from sglang_record import record_with_sglang
    import recording_check
    tname, dname = ZOO_PAIRS[name]
    banner(f"[{name}] a recording of {tname} made inside SGLang (record mode), and the doctor from it")
    prompts, vocab = recording_check.prompt_ids(tname, None, 8, 16), recording_check.draft_vocab_ids(dname)
    source = dict(target=tname, prompts='zoo held-out', n_prompts=8, prompt_tokens=16)
    served = sglang_target(zoo_pair(name)[0], out)
    rec, info = record_with_sglang(served, out/f'{name}-recording', prompts, max_new_tokens=31, vocab_ids=vocab, raw=out/f'{name}-raw',
                                   dtype=dtype, port=port, timeout=timeout, source=source, device=device)
    say(f"{rec}\n{info['passes']} raw passes in {info['seconds']} s (server log {info['server_log']})")
    ref = recording_check.in_process(tname, prompts, 31, 'vocab', vocab, getattr(torch, dtype), source)
    got = recording_check.report(rec, ref, dname)
    recording_check.save(out/f'{name}-record-compare.json', dict(info=info, **got))
    a, b = got['doctor']['engine'], got['doctor']['in_process']
    if got['agreement']['same_tokens'] != len(prompts): raise RuntimeError("SGLang's greedy continuations differ from the in-process recorder's")
    if (a['verdict'], a['recommended']) != (b['verdict'], b['recommended']):
        raise RuntimeError(f"the doctor from SGLang's recording says {a['verdict']} {a['recommended']}, from the in-process one {b['verdict']} {b['recommended']}")

def torch_equal(a, b):
    import torch
    return a.shape == b.shape and torch.equal(a.cpu(), b.cpu())

# ------------------------------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--install', action='store_true', help="first pip install -e .[sglang] (this repository, with the sglang extra)")
    ap.add_argument('--out', type=Path, default=None, help="output folder (default: a new temporary folder)")
    ap.add_argument('--port', type=int, default=30123)
    ap.add_argument('--only', default='zoo,llama,wide', help="pairs to check: zoo, llama, wide (comma-separated)")
    ap.add_argument('--skip', default='', help="steps to skip: live, server, dumper, record (comma-separated)")
    ap.add_argument('--record-dtype', default='float32', help="the server's --dtype in the record step")
    ap.add_argument('--timeout', type=int, default=900, help="seconds to wait for a server to become ready")
    ap.add_argument('--live-child', nargs=2, metavar=('TARGET', 'FOLDER'), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.install and not args.live_child:
        import torch
        if torch.cuda.is_available(): install_sglang_extra()   # else require_gpu_and_sglang says why, having installed nothing
    require_gpu_and_sglang()
    if args.live_child:
        live_child(*args.live_child); return 0
    out = args.out or Path(tempfile.mkdtemp(prefix='e3w-sglang-'))
    out.mkdir(parents=True, exist_ok=True)
    failed, skip = [], set(filter(None, args.skip.split(',')))
    for name in filter(None, args.only.split(',')):
        try: target, draft = zoo_pair(name) if name in ZOO_PAIRS else wide_pair(out) if name == 'wide' else (None, None)
        except Exception:
            traceback.print_exc(); failed.append(f'{name}: building/finding the pair'); continue
        if target is None: say(f"unknown pair {name!r}"); failed.append(name); continue
        for step in ('server', 'live', 'record'):   # the server first: its GPU memory is back when it exits
            if step in skip or (step == 'record' and name not in ZOO_PAIRS): continue
            try:
                if step == 'server': step_server(name, sglang_target(target, out), draft, out, args.port, args.timeout, 'dumper' not in skip)
                elif step == 'live': step_live(name, target, out)
                else: step_record(name, out, args.port, args.timeout, args.record_dtype)
            except Exception:
                traceback.print_exc(); failed.append(f'{name}: {step}')
    banner(f"outputs under {out}\n" + ('all steps passed' if not failed else f"FAILED: {failed}"))
    return 1 if failed else 0

if __name__ == '__main__': sys.exit(main())
