"The benchmark runner produces every benchmark's numbers (no timing assertions: timings belong in BENCHMARKS.md)."
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ('load', 'capture', 'forward_hooks', 'cycle', 'scale', 'acceptance', 'first_figure', 'doctor', 'recording', 'report', 'cli_help', 'threads')
KEYS = {'metric', 'value', 'target', 'met', 'note'}

def _not_measurable(row):
    "A row that says why it has no number (an optional package missing, a feature not there yet)."
    return row['value'] is None and any(w in row['note'] for w in ('not installed', 'not available', 'cannot run', 'no engine captures'))

@pytest.mark.slow
def test_every_benchmark_runs_and_prints_its_table(tmp_path):
    "`run.py --tiny`: each benchmark at its smallest size, no busy processes: it runs and every row is in BENCHMARKS.md."
    md, js = tmp_path/'B.md', tmp_path/'B.json'
    p = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'run.py'), '--tiny', '--threads', '1', '--out', str(md), '--json', str(js)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert md.exists()
    text = md.read_text()
    data = json.loads(js.read_text())
    assert data['errors'] == []
    assert list(data['benchmarks']) == list(BENCHMARKS)
    for name, res in data['benchmarks'].items():
        rows = res['rows']
        assert rows, name
        for r in rows:
            assert KEYS <= set(r), (name, r)
            assert isinstance(r['value'], (int, float)) or _not_measurable(r), (name, r)
            assert r['met'] in (True, False, None), (name, r)
            assert r['metric'] in text  # every row is in the markdown table
        numeric = [r for r in rows if isinstance(r['value'], (int, float))]
        assert numeric or all(_not_measurable(r) for r in rows), name
    for h in ('cores', 'RAM', 'python', 'torch', 'transformers', 'eagle3-workbench'):
        assert h in text

# ---------------------------------------------------------------------------------------------------------------------
# benchmarks/gpu_forward_hooks.py: the GPU overhead check, run here on CPU at small sizes so that it cannot rot unseen

SMALL = ['--layers', '8', '--hidden', '64', '--heads', '4', '--kv-heads', '2', '--intermediate', '128', '--vocab', '96']

def test_gpu_forward_hooks_script_runs_on_cpu(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'gpu_forward_hooks.py'), '--device', 'cpu', *SMALL,
                        '--tokens', '16,1', '--repeats', '2', '--warmup', '1', '--out', str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads((tmp_path/'gpu_forward_hooks.json').read_text())
    if os.environ.get('EAGLE3_SGLANG_SRC'): assert "SGLang's register_forward_hooks" in data['info']['registrar']
    assert [r['case'] for r in data['results']] == ['zoo', 'wide']
    for res in data['results']:
        got = sorted((r['who'], r['tokens'], r['variant']) for r in res['rows'])
        assert got == sorted((w, t, v) for t in (16, 1) for w, vs in (('target', ('bare', 'wired', 'all', 'sampled')),
                                                                      ('draft', ('bare', 'hooked'))) for v in vs)
        for r in res['rows']:
            if r['variant'] == 'bare': assert r['ms'] > 0
            else: assert r['records_ok'] and abs(r['records_per_pass'] - r['expected_records']) < 1e-9 and r['ratio'] > 0, r
        # sample_rate 0.1, 3 passes per size (2 repeats + 1 warm-up): 3 records in each pass n with frac(n * golden) < 0.1
        golden = (5 ** 0.5 - 1) / 2
        want = [3 * sum((n * golden) % 1 < 0.1 for n in range(i, i + 3)) / 3 for i in (0, 3)]
        assert [r['records_per_pass'] for r in res['rows'] if r['variant'] == 'sampled'] == pytest.approx(want)
        # default wiring of the 12-layer zoo target and of the 8-layer wide one: (2, N//2, N-3), read where the hook sits
        n = 12 if res['case'] == 'zoo' else 8
        assert res['check']['points'] == sorted(f'target.resid[{k}]' for k in (2, n // 2, n - 3))
        assert res['check']['worst_rel'] <= 1e-5
    md = (tmp_path/'gpu_forward_hooks.md').read_text()
    assert md.count('| zoo |') == 8 and md.count('| wide |') == 8   # 2 sizes x (wired, all, sampled, draft hooked)

def test_gpu_forward_hooks_script_without_gpu_says_so():
    import torch
    if torch.cuda.is_available(): pytest.skip('a CUDA GPU is visible: the no-GPU message cannot be shown')
    p = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'gpu_forward_hooks.py')], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert p.returncode == 2 and 'no CUDA GPU is visible' in p.stderr

def test_hook_variants_switch_cleanly(tmp_path):
    "The overhead check swaps hook tables per variant: a variant leaves exactly its hooks, and nothing stays after."
    sys.path.insert(0, str(ROOT/'benchmarks'))
    try: import gpu_forward_hooks as gfh
    finally: sys.path.remove(str(ROOT/'benchmarks'))
    import torch
    from transformers import LlamaConfig, AutoModelForCausalLM
    from eagle3_workbench.sglang.hook import forward_hooks_json, attach_forward_hooks
    from eagle3_workbench.sglang.readers import read_hook_folder
    from eagle3_workbench.sglang.hook import flush_all
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                                     num_attention_heads=2, num_key_value_heads=1)).eval()
    register = lambda model, js: attach_forward_hooks(model, js)
    before = gfh._tables(m)
    a = gfh.collect_hooks(m, register, forward_hooks_json([1, 2], 4, tmp_path/'a'))
    b = gfh.collect_hooks(m, register, forward_hooks_json([0, 4], 4, tmp_path/'b'))
    assert gfh._tables(m) == before   # collected hooks are off the model
    every, ids = set(m.modules()), torch.tensor([[1, 2, 3]])
    def fwd():
        with torch.no_grad(): m(input_ids=ids, use_cache=False)
        flush_all()
    fwd()
    assert not (tmp_path/'a').exists() and not (tmp_path/'b').exists()
    gfh.switch_to(a, every); fwd(); gfh.switch_to(b, every); fwd(); fwd(); gfh.switch_to({}, every); fwd()
    assert gfh._tables(m) == before
    pa, pb = read_hook_folder(tmp_path/'a').merged, read_hook_folder(tmp_path/'b').merged
    assert sorted(r.point for r in pa) == ['target.resid[1]', 'target.resid[2]']
    assert sorted(r.point for r in pb) == sorted(['target.resid[0]', 'target.norm', 'target.resid[4]'] * 2)   # two passes

# ---------------------------------------------------------------------------------------------------------------------
# benchmarks/truesize.py and scripts/gpu_doctor_truesize.py: the true-size run, here at its tiny stand-in

def test_true_size_run_finds_the_planted_wiring_at_tiny_size():
    "The synthetic recording (random-walk states, logits of the draft fed a planted wiring) read from disk: the doctor names the planted wiring, races, and bf16 agrees with float32."
    sys.path.insert(0, str(ROOT/'benchmarks'))
    try: import truesize
    finally: sys.path.remove(str(ROOT/'benchmarks'))
    r = truesize.measure(True, threads=1, dtype='bfloat16', whole=True)   # bfloat16 whatever this host computes it at: the check below compares it with float32
    s = truesize.summary(r)
    n = r['layers']
    assert r['configured'] == [2, n // 2, n - 3] and r['planted'] != r['configured']   # the engines' default is fed, the draft was trained elsewhere
    assert s['verdict'] == 'miswired' and r['new']['recommended'] == r['planted'], r['new']
    assert 'raced on blocks of 4, 4, 8, 16 prompts' in r['new']['search']['how'] and s['scored_in_full'] < s['explored']
    assert r['new']['search']['tokens'] == truesize.PROMPTS * (truesize.TOKENS - 1) >= 500   # the doctor's minimum evidence
    u = r['today_whole']   # the search before racing, in its own process on the same folders: not raced, the same answer
    assert 'raced' not in u['search']['how'] and u['recommended'] == r['planted'] and u['token_wirings'] != r['new']['token_wirings'], u['search']
    assert s['bf16_max_rel'] < 1e-3 and s['gap_b16'] > 0 and s['gap_f32'] > 0
    # the fp32 table's fit of the planted wiring beats its neighbour's on the same prompts: the planted answer is the true one
    f = r['today']['fits']
    assert sum(f[str(r['planted'])]) > sum(f[str(r['neighbour'])]) and sum(f[str(r['planted'])]) > sum(f[str(r['configured'])])

def test_true_size_precision_is_the_faster_one_on_this_host():
    "bfloat16 only where a draft step's matmul runs at least as fast in it (a CPU without bfloat16 units is ~200x slower)."
    sys.path.insert(0, str(ROOT/'benchmarks'))
    try: import truesize
    finally: sys.path.remove(str(ROOT/'benchmarks'))
    assert truesize.compute_dtype(dict(bfloat16=0.07, float32=15.9), 'cpu') == 'float32'
    assert truesize.compute_dtype(dict(bfloat16=101., float32=51.), 'cpu') == 'bfloat16'
    assert truesize.compute_dtype(dict(bfloat16=0.07, float32=15.9), 'cuda') == 'bfloat16'
    r = truesize.matmul_rates(1, 64, 256, 128)
    assert set(r) == {'bfloat16', 'float32'} and all(v > 0 for v in r.values())
    calls, real = [], truesize._rates
    try:   # a host without bfloat16 units is told by the small probe alone; elsewhere a block's rows decide
        truesize._rates = lambda m, k, n: calls.append(m) or dict(bfloat16=0.3, float32=20.)
        assert truesize.matmul_rates(1, 16, 64, 64, rows=256) == dict(bfloat16=0.3, float32=20.) and calls == [16]
        calls.clear(); truesize._rates = lambda m, k, n: calls.append(m) or (dict(bfloat16=40., float32=59.) if m == 16 else dict(bfloat16=400., float32=177.))
        assert truesize.compute_dtype(truesize.matmul_rates(1, 16, 64, 64, rows=256), 'cpu') == 'bfloat16' and calls == [16, 256]
    finally: truesize._rates = real

def test_gpu_doctor_script_without_gpu_skips_cleanly():
    import torch
    if torch.cuda.is_available(): pytest.skip('a CUDA GPU is visible: the no-GPU message cannot be shown')
    p = subprocess.run([sys.executable, str(ROOT/'scripts'/'gpu_doctor_truesize.py')], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0 and 'no CUDA GPU is visible: nothing measured' in p.stderr, p.stderr

# ---------------------------------------------------------------------------------------------------------------------
# benchmarks/fault_cost.py: what a planted fault costs in accept length, read as a miswired verdict reads it

@pytest.mark.slow
def test_fault_cost_runs_and_reads_each_interval(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'fault_cost.py'), '--tiny', '--out', str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = json.loads((tmp_path/'fault_cost.json').read_text())['rows']
    assert {r['fault'] for r in rows} >= {'chunk 0 +1', 'embedding in chunk 0'} and all(r['prompts'] == 4 for r in rows)
    for r in rows:   # the reading follows from the paired interval alone
        lo, hi = r['ci']
        want = 'costs' if lo > 0 else 'fix accepts less' if hi < 0 else 'no measurable cost'
        assert r['reading'] == want and lo <= r['cost'] <= hi, r
        assert abs(r['cost'] - (r['after'] - r['before'])) <= 0.02, r   # the paired change is the difference of the two accept lengths
    emb = next(r for r in rows if r['fault'] == 'embedding in chunk 0')
    assert emb['after'] > emb['before']   # the embedding for the low layer accepts less than the trained wiring
    assert (tmp_path/'fault_cost.md').read_text().count('\n| tiny-llama |') == len(rows)
