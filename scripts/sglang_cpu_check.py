#!/usr/bin/env python
"""Check `eagle3_workbench.sglang` against a real SGLang on CPU: the live runner and a `--forward-hooks` server.

SGLang has a CPU backend (`--device cpu`; Intel AMX kernels when present, else `torch_native`). Two steps, each on the
zoo's `tiny-llama` target, each comparing every prefill `resid[k]` the hooks recorded with an in-process `Capture` of
the transformers model on the same token ids (fp32 on both sides: the verdict must be 'close' at rtol 1e-4):

1. `live`: `live_runner(..., device='cpu')` builds a tensor-parallel-1 `ModelRunner` exactly as it does on a GPU and
   runs one prefill and two decode passes with the `--forward-hooks` factory attached, on every resid[0..N].
2. `server`: `python -m sglang.launch_server --device cpu` with the `--forward-hooks` JSON of `forward_hooks_json`
   for the draft's wiring (so SGLang's own hook manager registers the factory, in its scheduler subprocess), one
   greedy request, then the hook folder and the server log are read back. The draft is not loaded: EAGLE-3 on SGLang
   0.5.23's CPU backend stops at start-up (its KV-cache copy for speculative decoding is a Triton kernel).

A wrong reading of SGLang's residual stream shows up here as norms that differ by an order of magnitude; that is how
the switch of 0.5.23's decoder layers to "layer boundaries" (the layer returns only its MLP output) was found.

Not in the test suite: it needs SGLang, which pins its own torch and pulls CUDA kernel packages. On a CPU machine with
this repository's environment (torch 2.13 CPU), make a virtual environment that reuses it and add SGLang without its
dependencies, then the pure-Python packages its import chain needs:

    python -m venv --system-site-packages ../sglvenv
    ../sglvenv/bin/pip install --no-deps sglang==0.5.23 aiohappyeyeballs aiohttp aiosignal apache-tvm-ffi \\
        compressed-tensors dill einops fastapi frozenlist gguf loguru msgspec multidict openai partial-json-parser \\
        propcache psutil pybase64 python-multipart sentencepiece setproctitle soundfile starlette triton uvicorn \\
        uvloop xgrammar yarl
    ../sglvenv/bin/python scripts/sglang_cpu_check.py

SGLang imports some GPU-only packages at module level (sgl_kernel, flashinfer, deep_gemm, ...) and torchvision (for
multimodal configs). Those cannot be installed next to a CPU torch, so this script puts import-only stand-ins in their
place before SGLang is imported (in the server's subprocesses too, through a `sitecustomize` on `PYTHONPATH`). They
are never part of the computation on the CPU path: if one were, the hooks' tensors would not match transformers' and
the check would fail. `zoo:tiny-dsv3` is not checked here: SGLang's CPU
rotary embedding for DeepSeek requires a `rope_scaling` config, which the zoo model does not have.

    ../sglvenv/bin/python scripts/sglang_cpu_check.py [--skip live|server] [--port 30123]

Exit status: 0 when every point is close in every step, 1 when not, 2 when SGLang cannot be imported.
"""
import argparse, importlib.abc, importlib.machinery, os, shlex, subprocess, sys, tempfile, types
from pathlib import Path
from sglang_server import http_json, running_server   # scripts/, beside this file

STAND_INS = ('torchvision', 'sgl_kernel', 'flashinfer', 'deep_gemm', 'flash_attn', 'vllm', 'opentelemetry', 'llguidance',
             'outlines', 'outlines_core')
PROMPT = "The quick brown fox jumps over the lazy dog. Then the dog"

class _Anything(type):
    "A class whose every attribute, call, item and union is itself: enough for import-time references."
    def __getattr__(cls, k):
        if k.startswith('__'): raise AttributeError(k)
        return _Anything(k, (), {})
    def __call__(cls, *a, **k): return cls
    def __or__(cls, o): return cls
    def __ror__(cls, o): return cls
    def __getitem__(cls, k): return cls
    def __iter__(cls): return iter(())

class _StandInModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith('__'): raise AttributeError(k)
        return _Anything(k, (), {})

class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in STAND_INS: return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = _StandInModule(spec.name); m.__path__ = []; return m
    def exec_module(self, module): pass

def install_stand_ins():
    "Import-only stand-ins for the GPU packages (and torchvision, with a version for transformers' checks)."
    sys.meta_path.insert(0, _StandIns())
    meta = Path(tempfile.mkdtemp(prefix='e3w-standins-'))/'torchvision-0.28.0.dist-info'
    meta.mkdir(parents=True)
    (meta/'METADATA').write_text('Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n')
    sys.path.append(str(meta.parent))

def child(target:str, folder:str)->int:
    install_stand_ins()
    from eagle3_workbench.sglang.launch import live_runner
    from eagle3_workbench.sglang.compare import presence_by_phase
    cap = live_runner(target, folder, input_len=16, decode_steps=2, mem_fraction_static=0.3, dtype='float32', device='cpu')
    print(cap.report()); print(presence_by_phase(cap))
    pre = [r for r in cap.merged if r.phase == 'prefill']
    ids = next(r.token_ids for r in pre if r.token_ids)
    print(f"prefill token ids: {ids}")
    return compare_with_transformers(target, pre, ids)

def compare_with_transformers(target, records, ids)->int:
    "Compare the resid[k] records of one prefill with transformers' on the same ids; 0 when every one is close."
    import torch
    from eagle3_workbench.sglang.compare import compare_captures
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.capture import Capture
    model, _ = load_target(target)
    with Capture(model, points='target.resid[*]') as hf:
        with torch.no_grad(), hf.phase('extend'): model(input_ids=torch.tensor([ids]))
    mine = [r for r in records if r.point.startswith('target.resid')]
    cmp = compare_captures(hf, mine, rtol=1e-4, by_phase=False, labels=('transformers', 'sglang'))
    print(cmp)
    print('readings:', ', '.join(f'{p}: {how}' for p, how in sorted({(r.point, r.origin.reading if r.origin else None) for r in mine})))
    recorded = {r.point for r in mine}
    bad = [r['point'] for r in cmp.rows if r['point'] in recorded and r['verdict'] not in ('close', 'identical')]
    print('ALL CLOSE' if not bad and recorded else f'NOT CLOSE: {bad or "nothing recorded"}')
    return 1 if bad or not recorded else 0

def stand_in_path()->str:
    "A folder with a sitecustomize that installs the stand-ins: SGLang's subprocesses import it at start."
    d = Path(tempfile.mkdtemp(prefix='e3w-sitecustomize-'))
    (d/'sitecustomize.py').write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                                      f"import sglang_cpu_check\nsglang_cpu_check.install_stand_ins()\n")
    return str(d)

def step_server(out:Path, port:int)->int:
    "A --forward-hooks server on CPU (target only), one request, the records compared with transformers."
    from eagle3_workbench.formats import resolve_path, read_config
    from eagle3_workbench.wiring import resolve_wiring
    from eagle3_workbench.sglang.hook import forward_hooks_json
    from eagle3_workbench.sglang.launch import launch_command
    from eagle3_workbench.sglang.readers import read_hook_folder
    from eagle3_workbench.sglang.compare import presence_by_phase
    from eagle3_workbench.sglang.log import read_server_log
    target, draft = resolve_path('zoo:tiny-llama'), resolve_path('zoo:tiny-llama-eagle3')
    n = read_config(target)['num_hidden_layers']
    wiring = resolve_wiring(read_config(draft), n, 'sglang', read_config(target).get('model_type'))
    folder, log = out/'server-hooks', out/'server.log'
    cmd = launch_command(target, draft, tp=1, forward_hooks=forward_hooks_json(wiring.resid_layers, n, folder), probing=True,
                         port=port, decode_log_interval=1, mem_fraction_static=0.3)
    argv = shlex.split(cmd.replace('\\\n', ' '))
    argv[0] = sys.executable
    i = argv.index('--speculative-algorithm')   # the target alone: see the docstring
    argv = argv[:i] + [a for j, a in enumerate(argv[i:], i) if not (a.startswith('--speculative') or argv[j - 1].startswith('--speculative'))]
    argv += ['--device', 'cpu', '--dtype', 'float32']
    print(' '.join(argv))
    try: http_json(f'http://127.0.0.1:{port}/model_info', timeout=3)
    except Exception: pass
    else: raise RuntimeError(f"something already answers on port {port}: stop it or pass --port")
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [stand_in_path(), os.environ.get('PYTHONPATH')]))}
    with running_server(argv, log, f'http://127.0.0.1:{port}/model_info', 600, env):
        res = http_json(f'http://127.0.0.1:{port}/generate', {'text': PROMPT, 'sampling_params': {'max_new_tokens': 8, 'temperature': 0}}, 300)
        print(f"completion: {res.get('text')!r}")
    cap = read_hook_folder(folder)
    print(cap.report()); print(presence_by_phase(cap))
    tl = read_server_log(log)
    print(f"server log: {len(tl)} decode lines, graph flags {sorted({str(r.get('cpu_graph', r.get('cuda_graph'))) for r in tl})}")
    registered = [l.split(' on ')[-1] for l in log.read_text().splitlines() if 'Registered forward hook' in l]
    print(f"SGLang registered the factory on: {registered}")
    whole = [p for p in sorted({r.origin.pass_id for r in cap.records})
             if all(r.positions and r.positions[0] == 0 for r in cap.records if r.origin.pass_id == p)
             and any(r.phase == 'prefill' for r in cap.records if r.origin.pass_id == p)]
    if not whole: print('NOT CLOSE: no prefill from position 0 was recorded'); return 1
    recs = [r for r in cap.records if r.origin.pass_id == whole[0]]
    print(f"pass {whole[0]}: a prefill of {len(recs[0].positions)} tokens")
    return compare_with_transformers(str(target), recs, recs[0].token_ids)

def main()->int:
    if len(sys.argv) == 4 and sys.argv[1] == '--child': return child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--skip', default='', help='steps to skip: live, server (comma-separated)')
    ap.add_argument('--port', type=int, default=30123)
    args = ap.parse_args()
    install_stand_ins()
    try: import sglang.srt.server_args   # noqa: F401
    except Exception as e:
        print(f"sglang_cpu_check: SGLang cannot be imported here ({type(e).__name__}: {e}); see this script's docstring", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix='e3w-sglang-cpu-'))
    skip, failed = set(filter(None, args.skip.split(','))), []
    if 'live' not in skip:
        print('=' * 30, 'live runner (SGLang ModelRunner on CPU)')
        # a process of its own: SGLang initialises torch.distributed once per process
        if subprocess.run([sys.executable, __file__, '--child', 'zoo:tiny-llama', str(out/'live-hooks')]).returncode: failed.append('live')
    if 'server' not in skip:
        print('=' * 30, '--forward-hooks on sglang.launch_server --device cpu')
        try:
            if step_server(out, args.port): failed.append('server')
        except Exception as e:
            print(f"server step failed: {type(e).__name__}: {e}"); failed.append('server')
    print(f"outputs under {out}; " + ('every step close' if not failed else f'FAILED: {failed}'))
    return 1 if failed else 0

if __name__ == '__main__': sys.exit(main())
