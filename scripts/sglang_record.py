#!/usr/bin/env python
"""Record a target inside a real SGLang server and assemble the recording (the engine recording chapter).

The server runs the record mode of the `--forward-hooks` factory (`eagle3_workbench.sglang.hook`, `record_hooks_json`):
every prefill of the target, every layer's resid[k] and the logits, written raw by every rank. This script, run with
this repository's Python, tokenises the prompts, starts `python -m sglang.launch_server` in the interpreter given by
`--sglang-python` (default: this one), sends the two requests of each prompt (generate greedily; then prompt +
completion as one prefill with max_new_tokens 1 and its own rid), stops the server, and assembles the recording with
`eagle3_workbench.engine_recording.assemble`. `--compare` then holds it against the in-process recorder on the same
prompts (tokens, greedy tokens, resid[k], logits; `--doctor-draft D` also the doctor's answers).

Flags given to SGLang: `--disable-radix-cache` (else a prompt cached by its generate request is prefilled from where
the cache ends), `--disable-cuda-graph` (hooks do not fire in graph replays; only prefills are recorded, so this only
saves capture time), `--chunked-prefill-size` when asked (the recording is stitched by position). On CPU
(`--device cpu`, SGLang's CPU backend) the server needs the import-only stand-ins of scripts/sglang_cpu_check.py (its
docstring sets the environment up): they are put in the server's processes through a sitecustomize.

    python scripts/sglang_record.py --sglang-python ../sglvenv/bin/python --device cpu --target zoo:tiny-llama \\
        --out DIR [--n-prompts 8] [--prompt-tokens 16] [--max-new-tokens 31] [--logits-draft zoo:tiny-llama-eagle3] \\
        [--store-dtype bfloat16] [--chunked-prefill-size 32] [--raw DIR] [--compare] [--doctor-draft zoo:tiny-llama-eagle3]

Tensor parallel, pipeline stages or data-parallel replicas on CPU (`--tp 2`, `--pp 2`, `--dp 2`): SGLang wants each
process's cores, e.g. `SGLANG_CPU_OMP_THREADS_BIND="0|1"` in the environment, and a small KV cache on a small
machine (`--server-args="--max-total-tokens 8192"`); tests/fixtures/recordings/README.md has the runs. Every process
writes its place (stage, replica, rank) beside its raw passes, and the assembler joins them.

Exit status: 0 recorded (and, with --compare, tokens identical to the in-process recorder's), 1 not, 2 SGLang did not run.
"""
from __future__ import annotations
import argparse, json, os, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from sglang_server import http_json, running_server   # scripts/, beside this file
import recording_check

ROOT = Path(__file__).resolve().parent.parent

def _post_all(base:str, bodies:list, timeout:float=600)->list:
    "POST /generate for every body, concurrently (so the server batches them, as it would real traffic)."
    with ThreadPoolExecutor(max(1, min(8, len(bodies)))) as ex:
        return list(ex.map(lambda b: http_json(f'{base}/generate', b, timeout), bodies))

def record_with_sglang(target, # the target's directory or zoo:NAME
                       out, # the recording folder to write
                       prompts:list, # token-id lists
                       max_new_tokens:int=31, vocab_ids=None, raw=None, python=None, device=None, dtype='float32',
                       store_dtype=None, tp:int=1, pp:int=1, dp:int=1, port:int=30160, chunked_prefill_size:int|None=None, timeout:float=900,
                       extra_args=(), source:dict|None=None, borrow=('embed_tokens', 'lm_head'), force_absorbed_mla=None):
    "Run SGLang with the record mode on `prompts` and assemble the recording: (Recording, what happened)."
    import torch
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.sglang.hook import record_hooks_json
    from eagle3_workbench.engine_recording import write_request, assemble
    path = resolve_path(target)
    raw = Path(raw or tempfile.mkdtemp(prefix='e3w-sglang-raw-')).resolve()
    recording_check.fresh_raw(raw)
    raw.mkdir(parents=True, exist_ok=True)
    if force_absorbed_mla is None:   # SGLang's CPU backend computes an MLA target's fresh prefills wrongly otherwise (the hook chapter)
        force_absorbed_mla = device == 'cpu' and 'kv_lora_rank' in json.loads((path/'config.json').read_text())
    argv = [python or sys.executable, '-m', 'sglang.launch_server', '--model-path', str(path), '--tp', str(tp), '--dtype', dtype,
            '--port', str(port), '--disable-radix-cache', '--disable-cuda-graph', '--mem-fraction-static', '0.3',
            '--forward-hooks', record_hooks_json(raw, logit_ids=vocab_ids, force_absorbed_mla=force_absorbed_mla)]
    if chunked_prefill_size: argv += ['--chunked-prefill-size', str(chunked_prefill_size)]
    for flag, n in (('--pp-size', pp), ('--dp-size', dp)):
        if n > 1: argv += [flag, str(n)]
    if device: argv += ['--device', device]
    argv += list(extra_args)
    paths = [str(ROOT)]
    if device == 'cpu':
        from sglang_cpu_check import stand_in_path
        paths.insert(0, stand_in_path())
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, paths + [os.environ.get('PYTHONPATH')]))}
    base, log, t0 = f'http://127.0.0.1:{port}', raw.parent/f'{raw.name}-server.log', time.time()
    with running_server(argv, log, f'{base}/model_info', timeout, env):
        sp = lambda n: {'max_new_tokens': n, 'temperature': 0}
        gen = _post_all(base, [{'input_ids': p, 'sampling_params': sp(max_new_tokens)} for p in prompts])
        completions = [list(r['output_ids']) for r in gen]
        rids = [f'e3w-record-{i}' for i in range(len(prompts))]
        _post_all(base, [{'input_ids': p + c, 'rid': rid, 'sampling_params': sp(1)} for p, c, rid in zip(prompts, completions, rids)])
    info = json.loads(next(raw.glob('rank0_pid*/process.json')).read_text())
    engine = dict(name='sglang', release=info.get('release'), device=device or 'cuda', dtype=dtype, tp=tp, **{k: n for k, n in (('pp', pp), ('dp', dp)) if n > 1},
                  flags='--disable-radix-cache --disable-cuda-graph' + (f' --chunked-prefill-size {chunked_prefill_size}' if chunked_prefill_size else '')
                  + (' (hook config force_absorbed_mla)' if force_absorbed_mla else ''))
    write_request(raw, engine, str(target), prompts, completions, max_new_tokens, rids=rids, source=source)
    rec = assemble(raw, out, logits='vocab' if vocab_ids is not None else 'full', vocab_ids=vocab_ids,
                   dtype=getattr(torch, store_dtype) if store_dtype else None, borrow=tuple(borrow))
    passes = sum(1 for _ in raw.glob('rank*/raw-pass-*.json'))
    return rec, dict(raw=str(raw), server_log=str(log), seconds=round(time.time() - t0, 1), passes=passes, argv=argv[1:],
                     force_absorbed_mla=force_absorbed_mla,
                     finish=[(r.get('meta_info') or {}).get('finish_reason') for r in gen])

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--target', default='zoo:tiny-llama'); ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--sglang-python', help='the interpreter of an environment with SGLang (default: this one)')
    ap.add_argument('--device', help="'cpu' for SGLang's CPU backend (default: SGLang's own choice)")
    ap.add_argument('--dtype', default='float32', help="the server's --dtype")
    ap.add_argument('--tp', type=int, default=1); ap.add_argument('--port', type=int, default=30160)
    ap.add_argument('--pp', type=int, default=1, help='pipeline-parallel stages (--pp-size): each stage writes its layers')
    ap.add_argument('--dp', type=int, default=1, help='data-parallel replicas (--dp-size): each writes the requests it served')
    ap.add_argument('--chunked-prefill-size', type=int)
    ap.add_argument('--timeout', type=float, default=900)
    ap.add_argument('--force-absorbed-mla', choices=('auto', 'on', 'off'), default='auto',
                    help="an MLA target's every pass on SGLang's absorbed path (auto: on for --device cpu and a config with kv_lora_rank)")
    ap.add_argument('--server-args', default='', help='more sglang.launch_server flags (one string; write --server-args="--x y")')
    recording_check.add_request_args(ap, 'the server')
    a = ap.parse_args(argv)
    prompts = recording_check.prompt_ids(a.target, a.prompts, a.n_prompts, a.prompt_tokens)
    vocab = recording_check.draft_vocab_ids(a.logits_draft) if a.logits_draft else None
    source = dict(prompts=a.prompts or 'zoo held-out', n_prompts=a.n_prompts, prompt_tokens=a.prompt_tokens)
    try: recording_check.fresh_raw(a.raw)
    except ValueError as e: print(f"sglang_record: {e}", file=sys.stderr); return 2
    try:
        rec, info = record_with_sglang(a.target, a.out, prompts, max_new_tokens=a.max_new_tokens, vocab_ids=vocab, raw=a.raw,
                                       python=a.sglang_python, device=a.device, dtype=a.dtype, store_dtype=a.store_dtype, tp=a.tp, pp=a.pp, dp=a.dp,
                                       port=a.port, chunked_prefill_size=a.chunked_prefill_size, timeout=a.timeout,
                                       extra_args=a.server_args.split(), source=source, borrow=a.borrow.split(','),
                                       force_absorbed_mla={'auto': None, 'on': True, 'off': False}[a.force_absorbed_mla])
    except RuntimeError as e:   # the server's run, not the command line: a failure, not bad input
        print(f"sglang_record: SGLang did not run: {e}", file=sys.stderr); return 1
    print(f"{a.out}: {rec}\n{info['passes']} raw passes under {info['raw']} in {info['seconds']} s; finish reasons {info['finish']}", flush=True)
    if not a.compare: return 0
    import torch
    ref = recording_check.in_process(a.target, prompts, a.max_new_tokens, 'vocab' if vocab else 'full', vocab,
                                     getattr(torch, a.store_dtype) if a.store_dtype else None, dict(target=a.target, **source), a.borrow.split(','))
    got = recording_check.report(rec, ref, a.doctor_draft, a.doctor_engine)
    if a.store_dtype and a.store_dtype != 'float32':   # the engine's own precision, before the storage dtype rounds it
        from eagle3_workbench.engine_recording import assemble
        full = assemble(info['raw'], Path(info['raw']).parent/f"{Path(info['raw']).name}-float32", logits='vocab' if vocab else 'full', vocab_ids=vocab, dtype=torch.float32)
        print('in float32:', end=' '); got['float32'] = recording_check.report(full, recording_check.in_process(
            a.target, prompts, a.max_new_tokens, 'vocab' if vocab else 'full', vocab, torch.float32, dict(target=a.target, **source)))
    recording_check.save(Path(info['raw']).parent/f"{Path(info['raw']).name}-compare.json", dict(info=info, **got))
    return 0 if got['agreement']['same_tokens'] == len(prompts) else 1

if __name__ == '__main__': sys.exit(main())
