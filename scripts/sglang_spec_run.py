#!/usr/bin/env python
"""Serve a zoo pair with SGLang's real EAGLE-3 on CPU, for several wirings of the draft config, and keep what it wrote.

For each case the draft folder is copied to a temporary folder and only its config.json's layer ids are changed (the zoo
is never written). SGLang 0.5.23 reads `eagle_config.eagle_aux_hidden_state_layer_ids` only (not the top-level key:
`model_executor/model_runner_components/spec_aux_hidden_state.py:185-196`) and captures resid[n + 1] for each id n
(`models/llama.py:933-941`; without ids its default layers [2, N // 2, N - 3] with no + 1). The zoo draft has only the
top-level ids (the resid[k] it was trained on, [2, 5, 7] for tiny-llama), so:

- `correct`: the config as shipped (SGLang's default capture, resid[2, 5, 7]);
- `off_by_one`: eagle_config's ids = the top-level ids (resid[k + 1]: one layer late);
- `embedding`: eagle_config's ids = the top-level ids - 1, the lowest replaced by -1 (resid[0], the embedding);
- `fixed`: eagle_config's ids as `eagle3-workbench diagnose --draft <the off_by_one copy> --engine sglang==0.5.23
  --json` recommends (`recommended.for_engine`; its JSON is kept as `fixed/diagnose.json`);
- `off_by_one_toplevel`: the top-level ids + 1 and no eagle_config (SGLang does not read them).

Each case starts `python -m sglang.launch_server` (greedy, float32, `--speculative-algorithm EAGLE3
--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4`), sends the first N zoo held-out
prompts as ONE batched `/generate` request (token ids as `eagle3-workbench run` tokenises them: the target tokenizer,
no special tokens; `temperature 0`), GETs `/get_server_info`, stops the server and writes
`OUT/<case>/{responses.jsonl,server_info.json,server.log}` (responses in the batch's order, one per line, keys sorted;
machine paths replaced by names: TARGET, DRAFT, SGLANG_VENV, PYTHON_HOME, SITECUSTOMIZE, SCRIPTS).

How EAGLE-3 runs on SGLang 0.5.23's CPU path. Launched as the other CPU scripts launch SGLang (`--device cpu`, the
`torch_native` attention backend), EAGLE-3 stopped at start-up when first tried (not rerun here): "EAGLE is not
supported in decode attention backend torch_native"; with `--attention-backend triton`, Triton found "0 active
drivers" (no GPU). Past that (read in 0.5.23's source), the draft's tree build (`sglang/kernels/ops/speculative/
spec_tree.py`, `build_tree_kernel_efficient_func`) has no branch for this host: `is_cuda()`, `is_hip()`, `is_musa()`,
`is_npu()`, `is_xpu()` are all False and `is_cpu()` is False unless `SGLANG_USE_CPU_ENGINE=1` (whose branch calls
sgl_kernel's compiled CPU ops, absent here), so past `reject_out_of_tree_path` (a no-op for the in-tree CPU platform)
it calls the CUDA name `sgl_build_tree_kernel_efficient`, never imported (NameError). What this script changes, all outside SGLang's files:

1. the server's environment: `TRITON_INTERPRET=1` (Triton's own interpreter runs every `@triton.jit` kernel on CPU
   tensors with numpy: the triton attention backend's kernels and the spec_tree kernels, unmodified);
2. the server's flags: `--device cpu --attention-backend triton --dtype float32 --disable-cuda-graph`;
3. one runtime patch, applied by a `sitecustomize` on the server's `PYTHONPATH` (with the import-only GPU stand-ins of
   scripts/sglang_cpu_check.py): right after `sglang.kernels.ops.speculative.spec_tree` is imported, its module global
   `_is_xpu` is set to True. That module alone reads it, in `build_tree_kernel_efficient_func` and
   `verify_tree_greedy_func`: their XPU branches call the module's Triton kernels `sgl_build_tree_kernel_triton` and
   `verify_tree_greedy_triton` (the same algorithm as the CUDA kernels, written in Triton). Nothing else is patched:
   `sglang.srt.utils.is_xpu()` stays False everywhere else, the device stays `cpu`.

Slow: each verify cycle of a batch of 8 takes tens of seconds under the interpreter on 2 cores.

    python scripts/sglang_spec_run.py --sglang-python ../sglvenv/bin/python [--cases correct,off_by_one,embedding,fixed,off_by_one_toplevel] \\
        [--n-prompts 8] [--max-new-tokens 32] [--out tests/fixtures/sglang-spec] [--port 30170]

The SGLang virtual environment: scripts/sglang_cpu_check.py's docstring. Exit status: 0 every case served, 1 not.
"""
from __future__ import annotations
import argparse, json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path
from sglang_server import http_json, running_server   # scripts/, beside this file

ROOT = Path(__file__).resolve().parent.parent
CASES = ('correct', 'off_by_one', 'embedding', 'fixed', 'off_by_one_toplevel')
SPEC = ['--speculative-algorithm', 'EAGLE3', '--speculative-num-steps', '3', '--speculative-eagle-topk', '1',
        '--speculative-num-draft-tokens', '4']
PATCH = '''
import importlib.abc, sys
class _XpuTreeBranch(importlib.abc.MetaPathFinder):
    "After spec_tree is imported, select its XPU (Triton) branch: see scripts/sglang_spec_run.py."
    NAME = 'sglang.kernels.ops.speculative.spec_tree'
    def find_spec(self, name, path, target=None):
        if name != self.NAME: return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally: sys.meta_path.insert(0, self)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module); module._is_xpu = True
            print('sglang_spec_run: spec_tree._is_xpu = True (its Triton tree kernels)', file=sys.stderr, flush=True)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _XpuTreeBranch())
'''

def site_path()->str:
    "A folder with a sitecustomize: the GPU stand-ins and the spec_tree patch, in every SGLang process."
    d = Path(tempfile.mkdtemp(prefix='e3w-spec-site-'))
    (d/'sitecustomize.py').write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                                      f"import sglang_cpu_check\nsglang_cpu_check.install_stand_ins()\n" + PATCH)
    return str(d)

def edited_draft(draft:Path, edit:dict|None, into:Path)->Path:
    "A copy of the draft folder, its config.json with `edit` applied: {'nested' or 'top_level': ids}; None: as shipped."
    out = into/'draft'
    shutil.copytree(draft, out)
    if not edit: return out
    cfg = json.loads((out/'config.json').read_text())
    for where, ids in edit.items():
        if where == 'top_level': cfg['eagle_aux_hidden_state_layer_ids'] = list(ids)
        else: cfg['eagle_config'] = {**(cfg.get('eagle_config') or {}), 'eagle_aux_hidden_state_layer_ids': list(ids)}
    (out/'config.json').write_text(json.dumps(cfg, indent=2) + '\n')
    return out

def recommended_ids(draft:Path, target:str, keep:Path)->tuple|None:
    "('nested' or 'top_level', ids): what `eagle3-workbench diagnose --engine sglang==0.5.23 --json` recommends; its JSON kept in `keep`."
    cmd = [sys.executable, '-m', 'eagle3_workbench.cli', 'diagnose', '--target', target, '--draft', str(draft),
           '--engine', 'sglang==0.5.23', '--json']
    print(' '.join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.mkdtemp(prefix='e3w-diagnose-'))
    print(f"diagnose exit {p.returncode}", flush=True)   # 1: miswired, as planted
    keep.mkdir(parents=True, exist_ok=True)
    (keep/'diagnose.json').write_text(p.stdout)
    rec = (json.loads(p.stdout).get('recommended') or {}).get('for_engine') or {}
    if not rec.get('ids'): return None
    return ('nested' if rec['field'].startswith('eagle_config.') else 'top_level'), rec['ids']

def scrub(folder:Path, names:dict):
    "Replace machine paths in the files SGLang wrote by names (`names`: path -> name), longest first; nothing else changes."
    for f in sorted(folder.iterdir()):
        t = f.read_text()
        for path, name in sorted(names.items(), key=lambda kv: -len(kv[0])): t = t.replace(path, name)
        f.write_text(t)

def serve_case(python, target:Path, draft:Path, prompts:list, max_new_tokens:int, out:Path, port:int, timeout:float)->dict:
    "One server, one batched request, the server's info; writes out/{responses.jsonl,server_info.json,server.log}."
    out.mkdir(parents=True, exist_ok=True)
    argv = [python, '-m', 'sglang.launch_server', '--model-path', str(target), '--speculative-draft-model-path', str(draft), *SPEC,
            '--device', 'cpu', '--attention-backend', 'triton', '--dtype', 'float32', '--disable-cuda-graph',
            '--disable-radix-cache', '--mem-fraction-static', '0.3', '--max-total-tokens', '8192', '--max-running-requests', str(len(prompts)),
            '--skip-server-warmup', '--random-seed', '0', '--decode-log-interval', '1', '--port', str(port)]
    print(' '.join(argv), flush=True)
    site = site_path()
    env = {**os.environ, 'TRITON_INTERPRET': '1', 'PYTHONPATH': os.pathsep.join(filter(None, [site, os.environ.get('PYTHONPATH')]))}
    base, log, t0 = f'http://127.0.0.1:{port}', out/'server.log', time.time()
    with running_server(argv, log, f'{base}/model_info', timeout, env):
        t1 = time.time()
        res = http_json(f'{base}/generate', {'input_ids': prompts, 'sampling_params': {'max_new_tokens': max_new_tokens, 'temperature': 0}}, 6 * 3600)
        t2 = time.time()
        info = http_json(f'{base}/get_server_info', timeout=60)
    with open(out/'responses.jsonl', 'w') as f:
        for r in res: f.write(json.dumps(r, sort_keys=True) + '\n')
    (out/'server_info.json').write_text(json.dumps(info, indent=1, sort_keys=True) + '\n')
    scrub(out, {str(target): 'TARGET', str(draft): 'DRAFT', site: 'SITECUSTOMIZE', str(Path(python).parent.parent): 'SGLANG_VENV',
                str(Path(__file__).parent): 'SCRIPTS', sys.base_prefix: 'PYTHON_HOME'})
    return dict(start_s=round(t1 - t0), generate_s=round(t2 - t1))

def main()->int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--sglang-python', default=sys.executable)
    ap.add_argument('--target', default='zoo:tiny-llama')
    ap.add_argument('--draft', default='zoo:tiny-llama-eagle3')
    ap.add_argument('--cases', default=','.join(CASES))
    ap.add_argument('--n-prompts', type=int, default=8)
    ap.add_argument('--max-new-tokens', type=int, default=32)
    ap.add_argument('--out', default=str(ROOT/'tests/fixtures/sglang-spec'))
    ap.add_argument('--port', type=int, default=30170)
    ap.add_argument('--timeout', type=float, default=1800, help='seconds to wait for each server to start')
    a = ap.parse_args()
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench.loading import load_tokenizer
    target, draft = resolve_path(a.target), resolve_path(a.draft)
    tok = load_tokenizer(target)
    prompts = [tok(p, add_special_tokens=False)['input_ids'] for p in read_prompts(None, a.n_prompts)]
    shipped = json.loads((draft/'config.json').read_text())['eagle_aux_hidden_state_layer_ids']
    work = Path(tempfile.mkdtemp(prefix='e3w-spec-run-'))
    ids = sorted(shipped)   # the zoo draft's resid[k], top level: SGLang 0.5.23 feeds resid[n + 1] for eagle_config's n
    edits = dict(correct=None, off_by_one={'nested': ids}, embedding={'nested': [-1] + [i - 1 for i in ids[1:]]},
                 off_by_one_toplevel={'top_level': [i + 1 for i in ids]})
    failed, done = [], {}
    for case in filter(None, a.cases.split(',')):
        if case not in CASES: print(f"--cases: {case!r}: expected one of {', '.join(CASES)}", file=sys.stderr); return 2
        d = work/case; d.mkdir()
        if case == 'fixed':
            probe = edited_draft(draft, edits['off_by_one'], work/'diagnosed')
            rec = recommended_ids(probe, a.target, Path(a.out)/case)
            if rec is None: print('fixed: diagnose recommended no ids'); failed.append(case); continue
            edits['fixed'] = {**edits['off_by_one'], rec[0]: rec[1]}
        copy = edited_draft(draft, edits[case], d)
        print(f"== {case}: {edits[case] or 'config as shipped'}", flush=True)
        try: t = serve_case(a.sglang_python, target, copy, prompts, a.max_new_tokens, Path(a.out)/case, a.port, a.timeout)
        except Exception as e: print(f"{case} failed: {type(e).__name__}: {str(e)[-3000:]}", flush=True); failed.append(case); continue
        done[case] = dict(edit=edits[case], **t)
        print(f"{case}: {done[case]}", flush=True)
    print(json.dumps(done))
    return 1 if failed else 0

if __name__ == '__main__': sys.exit(main())
