"""Torch threads chosen by the product (`eagle3_workbench.threads`) against every fixed setting, idle and busy.

The question the rule must answer: on this machine, with whatever else is running, is the count the CLI picks by
itself close to the best count? Each variant is the real command a user types (`eagle3-workbench run ...`, a fresh
process: import, load, decode), run side by side in one session, on an idle machine and with two other processes
spinning on the cores (bounded busy loops that end by themselves).
"""
from __future__ import annotations
import os, shutil, subprocess, sys, tempfile, time
from pathlib import Path
from common import ROOT, zoo, med, spread, row, unavailable, tiny

TITLE = 'threads'
QUESTION = "Does the thread count the product picks itself stay close to the best setting, idle and with the cores busy?"

def _wide_pair(out:Path, hidden:int=2048, layers:int=4)->tuple:
    "A random-init Llama target `hidden` wide and its EAGLE-3 draft, with the zoo's tokenizer (same 2048 vocabulary)."
    import torch
    from transformers import LlamaConfig, AutoModelForCausalLM
    from eagle3_workbench.draft import Eagle3Draft
    from eagle3_workbench.draft_config import DraftConfig
    from eagle3_workbench.loading import save_draft
    torch.manual_seed(0)
    t = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=2048, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                                                     num_attention_heads=hidden // 128, num_key_value_heads=max(1, hidden // 512),
                                                     max_position_embeddings=1024, tie_word_embeddings=False))
    t.save_pretrained(out/'target')
    for f in ('tokenizer.json', 'tokenizer_config.json'): shutil.copy(zoo().path('tiny-llama')/f, out/'target'/f)
    cfg = dict(architectures=['LlamaForCausalLMEagle3'], model_type='llama', hidden_size=hidden, intermediate_size=3 * hidden,
               num_attention_heads=hidden // 128, num_key_value_heads=max(1, hidden // 512), num_hidden_layers=1, vocab_size=2048,
               draft_vocab_size=1024, max_position_embeddings=1024, eagle_config=dict(eagle_aux_hidden_state_layer_ids=[0, 1, 2]))
    d = Eagle3Draft(DraftConfig.from_dict(cfg))
    for p in d.parameters(): torch.nn.init.normal_(p, std=0.02)
    d.d2t.zero_(); d.t2d[:1024] = True
    save_draft(d, out/'draft', cfg)
    return str(out/'target'), str(out/'draft')

def _spinners(n:int, seconds:float)->list:
    "n processes spinning on a core for at most `seconds` (they stop by themselves)."
    code = f"import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass"
    return [subprocess.Popen([sys.executable, '-c', code]) for _ in range(n)]

def _timed_run(argv:list, env:dict, timeout:float)->tuple:
    "(seconds, threads the run used) for one `eagle3-workbench run` in a fresh process."
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    dt = time.perf_counter() - t0
    if p.returncode: raise RuntimeError(f"{' '.join(argv)} failed (rc {p.returncode}): {p.stderr[-600:]}")
    return dt

def run(quick:bool=False)->dict:
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'EAGLE3_THREADS')}
    env['PYTHONPATH'] = os.pathsep.join(p for p in (str(ROOT), env.get('PYTHONPATH', '')) if p)
    env['TQDM_DISABLE'] = '1'
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    torch_default = int(subprocess.run([sys.executable, '-c', 'import torch; print(torch.get_num_threads())'], capture_output=True,
                                       text=True, env=env).stdout)
    counts = [1] if tiny() else sorted({1, 2, cores, torch_default})   # tiny: two runs prove the table
    cli = [shutil.which('eagle3-workbench') or sys.executable, *([] if shutil.which('eagle3-workbench') else ['-m', 'eagle3_workbench.cli'])]
    work = ['run', '--json', '--n-prompts', '1' if quick else '2', '--max-new-tokens', '8' if quick else '24']
    tmp = Path(tempfile.mkdtemp(prefix='e3w-threads-'))
    z = zoo()
    pairs = {'zoo tiny-dsv3 (128 wide)': (z.spec('tiny-dsv3'), z.spec('tiny-dsv3-eagle3'))}
    if not quick: pairs['random Llama 2048 wide, 4 layers'] = _wide_pair(tmp)   # where more threads should win
    reps = {'idle': 1 if quick else 3, 'busy': 1 if quick else 2}
    rows, table = [], {}
    try:
        for label, (t, d) in pairs.items():
            base = cli + work + ['--target', t, '--draft', d]
            variants = {'product default': base, **{f'--threads {n}': base + ['--threads', str(n)] for n in counts}}
            for cond in ('idle',) if tiny() else ('idle', 'busy'):   # tiny: no processes spinning beside the suite
                times = {k: [] for k in variants}
                for r in range(reps[cond]):
                    names = list(variants); names = names[r % len(names):] + names[:r % len(names)]
                    for k in names:
                        spin = _spinners(2, 900) if cond == 'busy' else []
                        try:
                            if spin: time.sleep(0.5)
                            times[k].append(_timed_run(variants[k], env, 900))
                        finally:
                            for s in spin: s.kill(); s.wait()
                table[(label, cond)] = times
                best_k = min((k for k in times if k != 'product default'), key=lambda k: med(times[k]))
                dflt, best = med(times['product default']), med(times[best_k])
                rows.append(row(f"{label}, {cond}: product default / best fixed ({best_k})", dflt / best, 'x',
                                spread(times['product default']), '<= 1.3x' if cond == 'busy' else '', dflt / best <= 1.3 if cond == 'busy' else None,
                                ', '.join(f"{k}: {med(v):.1f} s" for k, v in times.items())))
                if cond == 'idle':
                    what, before = f"{label}, idle: product default / torch's default ({torch_default} threads, before)", times.get(f'--threads {torch_default}')
                    rows.append(unavailable(what, 'not available in tiny mode (run.py --tiny runs --threads 1 only)', '<= 1.05x (no slower)') if before is None
                                else row(what, dflt / med(before), 'x', '', '<= 1.05x (no slower)', dflt / med(before) <= 1.05))
    finally: shutil.rmtree(tmp, ignore_errors=True)
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"`eagle3-workbench {' '.join(work)}` per variant in a fresh process (import + load + decode), {cores} usable cores, torch's own "
                      f"default {torch_default} threads; 'busy' = two other processes spinning on the cores throughout; "
                      f"{reps['idle']} idle / {reps['busy']} busy repeats per variant, order rotated")
