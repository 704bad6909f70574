#!/usr/bin/env python
"""Run `eagle3_workbench.sglang.live_runner` in a real SGLang `ModelRunner` on CPU, and check what its hooks record.

SGLang has a CPU backend (`--device cpu`; Intel AMX kernels when present, else `torch_native`). This script builds a
tensor-parallel-1 `ModelRunner` for the zoo's `tiny-llama` target with it, exactly as `live_runner` does on a GPU, runs
one prefill and two decode passes with the `--forward-hooks` factory attached, and compares every prefill `resid[k]`
the hooks recorded with an in-process `Capture` of the transformers model on the same token ids (fp32 on both sides:
the verdict must be 'close' at rtol 1e-4 for every k). A wrong reading of SGLang's residual stream shows up here as
norms that differ by an order of magnitude; that is how the switch of 0.5.23's decoder layers to "layer boundaries"
(the layer returns only its MLP output) was found.

Not in the test suite: it needs SGLang, which pins its own torch and pulls CUDA kernel packages. On a CPU machine with
this repository's environment (torch 2.13 CPU), make a virtual environment that reuses it and add SGLang without its
dependencies, then the pure-Python packages its import chain needs:

    python -m venv --system-site-packages /tmp/sglvenv
    /tmp/sglvenv/bin/pip install --no-deps sglang==0.5.23 aiohappyeyeballs aiohttp aiosignal compressed-tensors dill \\
        einops fastapi frozenlist gguf loguru msgspec multidict openai partial-json-parser propcache psutil pybase64 \\
        sentencepiece setproctitle starlette triton uvicorn uvloop yarl
    /tmp/sglvenv/bin/python scripts/sglang_cpu_check.py

SGLang imports some GPU-only packages at module level (sgl_kernel, flashinfer, tvm_ffi, ...) and torchvision (for
multimodal configs). Those cannot be installed next to a CPU torch, so this script puts import-only stand-ins in their
place before SGLang is imported. They are never part of the computation on the CPU path: if one were, the hooks'
tensors would not match transformers' and the check would fail. `zoo:tiny-dsv3` is not checked here: SGLang's CPU
rotary embedding for DeepSeek requires a `rope_scaling` config, which the zoo model does not have.

Exit status: 0 when every point is close, 1 when not, 2 when SGLang cannot be imported.
"""
import importlib.abc, importlib.machinery, json, subprocess, sys, tempfile, types
from pathlib import Path

STAND_INS = ('torchvision', 'sgl_kernel', 'flashinfer', 'tvm_ffi', 'deep_gemm', 'flash_attn', 'vllm', 'opentelemetry')

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
    import torch
    from eagle3_workbench.sglang import live_runner, compare_captures, presence_by_phase
    from eagle3_workbench.models import load_target
    from eagle3_workbench.capture import Capture
    cap = live_runner(target, folder, input_len=16, decode_steps=2, mem_fraction_static=0.3, dtype='float32', device='cpu')
    print(cap.report()); print(presence_by_phase(cap))
    pre = [r for r in cap.merged if r.phase == 'inferred:prefill']
    ids = next(r.token_ids for r in pre if r.token_ids)
    print(f"prefill token ids: {ids}")
    model, _ = load_target(target)
    with Capture(model, points='target.resid[*]') as hf:
        with torch.no_grad(), hf.phase('extend'): model(input_ids=torch.tensor([ids]))
    cmp = compare_captures(hf, [r for r in pre if r.point.startswith('target.resid')], rtol=1e-4, labels=('transformers', 'sglang'))
    print(cmp)
    readings = sorted({(r.point, r.stats.get('reading')) for r in pre}, key=lambda x: x[0])
    print('readings:', ', '.join(f'{p}: {how}' for p, how in readings))
    bad = [r['point'] for r in cmp.rows if r['verdict'] not in ('close', 'identical')]
    print('ALL CLOSE' if not bad else f'NOT CLOSE: {bad}')
    return 1 if bad else 0

def main()->int:
    if len(sys.argv) == 4 and sys.argv[1] == '--child': return child(sys.argv[2], sys.argv[3])
    install_stand_ins()
    try: import sglang.srt.server_args   # noqa: F401
    except Exception as e:
        print(f"sglang_cpu_check: SGLang cannot be imported here ({type(e).__name__}: {e}); see this script's docstring", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix='e3w-sglang-cpu-'))
    # one process per model: SGLang initialises torch.distributed once per process
    r = subprocess.run([sys.executable, __file__, '--child', 'zoo:tiny-llama', str(out/'tiny-llama')])
    print(f"outputs under {out}")
    return r.returncode

if __name__ == '__main__': sys.exit(main())
