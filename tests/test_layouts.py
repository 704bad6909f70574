"""Recordings assembled from the raw passes of every parallel layout the engines run EAGLE-3 with, written here as
each layout's code path writes them, equal the single-rank recording of the same sequences; each way a layout goes
wrong is planted beside its clean counterpart and named in one line.

How each layout writes its raw passes (SGLang 0.5.23, paths inside the `sglang` package; vLLM 0.32 the same shape):
- pipeline parallel: `srt/distributed/utils.py:110-145` (`get_pp_indices`) gives stage s the layers
  `start..end-1` (an even split, the remainder to the last stages); `srt/models/llama.py:431-463` builds
  `embed_tokens` on the first stage only and `norm` on the last only; `llama.py:474-493` runs every pass of the batch
  on each stage, the first from the embedding, a later one from the previous stage's `PPProxyTensors`. So every stage
  writes the same passes (requests, tokens, positions); stage s the resid[k] of its layers' input norms, the first
  stage resid[0], the last resid[N] and the logits.
- data parallel: each replica is its own scheduler and model runner (`srt/managers/data_parallel_controller.py`
  sends each request to one of them), so each writes its own processes, holding its own requests.
- expert parallel: the MoE layers dispatch tokens to the ranks of their experts and combine them back
  (`srt/layers/moe/token_dispatcher/`), so the residual stream between layers holds every token of the pass on every
  rank; a reading before the combine, or a stream kept scattered over the ranks, holds other rows.
"""
import json, shutil
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file, save_file
from eagle3_workbench.records import raw_process_folder, write_raw_pass
from eagle3_workbench.layouts import PLACE_KEY
from eagle3_workbench.engine_recording import assemble, write_request

from test_engine_recordings import _target, H, V   # the assembler's tiny borrowed target
N = 5

def pp_indices(n_layers:int, rank:int, size:int)->tuple:
    "SGLang's `get_pp_indices` without a partition list: an even split, the remainder to the last stages (written from its docstring)."
    base, rem = divmod(n_layers, size)
    sizes = [base + (1 if r >= size - rem else 0) for r in range(size)]
    return sum(sizes[:rank]), sum(sizes[:rank + 1])

def stage_resid(rank:int, size:int)->list:
    "The resid indices SGLang's record hook reads on a stage: its layers' input norms, resid[0] first, resid[N] last."
    a, b = pp_indices(N, rank, size)
    return list(range(a, b)) + ([N] if rank == size - 1 else [])

SEQS = [[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0, 9], [3, 3, 3, 1, 1, 1], [11, 10, 9, 8]]
RIDS = ['a', 'b', 'c', 'd']
PROMPT = [3, 4, 2, 2]

def truth(seed=0)->list:
    "Per sequence, the residual stream and the logits every layout writes parts of."
    g = torch.Generator().manual_seed(seed)
    return [dict(resid=torch.randn(N + 1, len(s), H, generator=g), logits=torch.randn(len(s), V, generator=g)) for s in SEQS]

def _packed(idx:list, chunk:int)->list:
    "Passes of a chunked prefill of `chunk` rows over sequences `idx`: [(sequence, first row, end row)] each."
    passes, room = [[]], chunk
    for i in idx:
        a = 0
        while a < len(SEQS[i]):
            b = min(len(SEQS[i]), a + room); passes[-1].append((i, a, b)); room -= b - a; a = b
            if room == 0: passes.append([]); room = chunk
    return [p for p in passes if p]

def write_layout(raw:Path, per:list, tp=1, pp=1, dp=1, chunk=5, local_ids=False, ep=1)->Path:
    "The raw passes of a deployment of `dp` replicas x `pp` stages x `tp` ranks, as each process writes them."
    for d in range(dp):
        passes = _packed([i for i in range(len(SEQS)) if i % dp == d], chunk)   # the controller's round robin
        for s in range(pp):
            a, b = pp_indices(N, s, pp)
            layers = stage_resid(s, pp)
            for r in range(tp):
                place = dict(tp_rank=r, tp_size=tp, pp_rank=s, pp_size=pp, dp_rank=d, dp_size=dp, ep_rank=r % ep, ep_size=ep,
                             start_layer=a, end_layer=b)
                proc = raw_process_folder(raw, d * pp * tp + s * tp + r, {'engine': 'test', 'tp_size': tp, PLACE_KEY: place})
                lo, hi = r * V // tp, (r + 1) * V // tp
                for n, pcs in enumerate(passes):
                    cat = lambda f: torch.cat([f(i, x, y) for i, x, y in pcs])
                    names = [k - a if local_ids and s > 0 else k for k in layers]   # local: the stage's own count from 0
                    t = {f'resid.{j}': cat(lambda i, x, y: per[i]['resid'][k, x:y]) for j, k in zip(names, layers)}
                    t |= dict(token_ids=cat(lambda i, x, y: torch.tensor(SEQS[i][x:y])), positions=cat(lambda i, x, y: torch.arange(x, y)))
                    lg = None
                    if s == pp - 1:
                        lg = cat(lambda i, x, y: per[i]['logits'][x:y, lo:hi])
                        t |= dict(logits=lg, top_value=lg.max(-1).values, top_index=lg.argmax(-1) + lo)
                    write_raw_pass(proc, n, t, dict(mode='EXTEND', rids=[RIDS[i] for i, _, _ in pcs], seq_lens=[y - x for _, x, y in pcs],
                                   layers=sorted(names), how={}, logits=None if lg is None else dict(start=lo, end=hi, ids=None)))
    write_request(raw, dict(name='test', release='0'), 'unused', [s[:p] for s, p in zip(SEQS, PROMPT)], [s[p:] for s, p in zip(SEQS, PROMPT)], 5, rids=RIDS)
    return raw

@pytest.fixture(scope='module')
def base(tmp_path_factory):
    "The target, the truth, and the recording one process (no parallelism) makes of it."
    tmp = tmp_path_factory.mktemp('layouts')
    t, per = _target(tmp/'target', N), truth()
    return tmp, t, per, assemble(write_layout(tmp/'raw-1', per), tmp/'rec-1', target=t)

def same_recording(a, b):
    "Two recordings hold the same request, sequences, tokens, greedy tokens, logits and residual stream, bit for bit."
    assert a.manifest['request'] == b.manifest['request'] and len(a.sequences) == len(b.sequences) == len(SEQS)
    for i in range(len(SEQS)):
        for get in ('tokens', 'greedy', 'logits'): assert torch.equal(getattr(a, get)(i), getattr(b, get)(i)), (get, i)
        for k in a.layers: assert torch.equal(a.resid(k, i), b.resid(k, i)), (k, i)

def test_single_rank_is_the_truth(base):
    "The reference itself is the truth it was written from: tokens, the greedy token over the whole vocabulary, every resid[k]."
    _, _, per, one = base
    for i, s in enumerate(SEQS):
        assert one.tokens(i).tolist() == s and one.prompt_len(i) == PROMPT[i]
        assert torch.equal(one.greedy(i), per[i]['logits'].argmax(-1)) and torch.equal(one.logits(i), per[i]['logits'])
        for k in range(N + 1): assert torch.equal(one.resid(k, i), per[i]['resid'][k])

@pytest.mark.parametrize('layout', [dict(pp=2), dict(pp=3), dict(dp=2), dict(dp=3, chunk=4), dict(tp=2, pp=2),
                                    dict(dp=2, pp=2, tp=2), dict(tp=2, ep=2)], ids=lambda d: '-'.join(f'{k}{v}' for k, v in d.items()))
def test_layout_equals_the_single_rank_recording(base, layout, tmp_path):
    "Stages merged by layer, replicas by request, tensor ranks by vocabulary slice: the single-rank recording, bit for bit."
    _, t, per, one = base
    rec = assemble(write_layout(tmp_path/'raw', per, **layout), tmp_path/'rec', target=t)
    same_recording(rec, one)

def test_pp_indices_follow_sglang():
    "The split SGLang's docstring describes: 5 layers over 2 stages is 2 + 3, over 3 stages 1 + 2 + 2."
    assert [pp_indices(5, r, 2) for r in range(2)] == [(0, 2), (2, 5)]
    assert [pp_indices(5, r, 3) for r in range(3)] == [(0, 1), (1, 3), (3, 5)]

def _fails(raw, t, tmp_path, what):
    with pytest.raises(ValueError) as e: assemble(raw, tmp_path/'out', target=t)
    assert '\n' not in str(e.value) and what in str(e.value), str(e.value)
    return str(e.value)

def test_local_layer_ids_are_named(base, tmp_path):
    "A stage naming its layers from 0 (the configured global ids never match on it) is refused, naming its process.json."
    _, t, per, _ = base
    e = _fails(write_layout(tmp_path/'raw', per, pp=2, local_ids=True), t, tmp_path, 'local layer indices, not the global ids')
    assert 'process.json: stage 1 holds decoder layers 2..4 but its passes name resid[0, 1]' in e   # its local 2, 3 lie in its range, 0, 1 cannot

def test_a_stage_that_never_recorded(base, tmp_path):
    "A stage whose recorder never opened a pass (no folder): named, with the stage; the clean pp=2 case is above."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, pp=2)
    for d in raw.glob('rank1_*'): shutil.rmtree(d)
    _fails(raw, t, tmp_path, 'pipeline parallel 2, but stage 1 wrote no process folder here: its recorder never opened a pass')

def test_stage_layers_missing_are_named(base, tmp_path):
    "The last stage wrote resid[N] only (its layers' norms not hooked): the layers no stage holds are named."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, pp=2)
    for js in next(raw.glob('rank1_*')).glob('raw-pass-*.json'):
        m = json.loads(js.read_text()); m['layers'] = [N]; js.write_text(json.dumps(m))
    _fails(raw, t, tmp_path, f'resid[2, 3, 4] not recorded by any pipeline stage')

def test_stages_that_ran_other_tokens(base, tmp_path):
    "Stage 1's pass holds other tokens than stage 0's: the stages did not run one batch."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, pp=2)
    f = next(raw.glob('rank1_*'))/'raw-pass-000001.safetensors'
    x = load_file(f); x['token_ids'] = x['token_ids'].flip(0); save_file(x, str(f))
    _fails(raw, t, tmp_path, "raw-pass-000001.safetensors: token_ids differ from stage 0's: the stages ran other tokens")

def test_request_on_two_replicas(base, tmp_path):
    "One rid served by two data-parallel replicas (two runs in one folder, or a router that sent it twice): named."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, dp=2)
    req = json.loads((raw/'request.json').read_text())
    for js in next(p for p in raw.glob('rank*_*') if json.loads((p/'process.json').read_text())[PLACE_KEY]['dp_rank'] == 1).glob('raw-pass-*.json'):
        m = json.loads(js.read_text()); m['rids'] = ['a' if r == 'b' else r for r in m['rids']]; js.write_text(json.dumps(m))
    _fails(raw, t, tmp_path, "sequence 0 (rid a) is on data-parallel ranks [0, 1]: a request is served by one replica")
    assert req['sequences'][0]['rid'] == 'a'

def test_rows_scattered_over_expert_ranks(base, tmp_path):
    "Under expert parallel, a rank whose resid[k] holds half the pass's rows (scattered, or read before the combine) is named."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, tp=2, ep=2)
    f = next(raw.glob('rank1_*'))/'raw-pass-000000.safetensors'
    x = load_file(f); x['resid.3'] = x['resid.3'][1::2].contiguous(); save_file(x, str(f))
    _fails(raw, t, tmp_path, "raw-pass-000000.safetensors: resid.3 holds 2 rows for the pass's 5 tokens: its rows do not follow the tokens")

def test_ranks_that_gathered_other_rows(base, tmp_path):
    "A rank whose rows are the right count but other tokens' states (a gather over the wrong group): the ranks disagree."
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, tp=2, ep=2)
    f = next(raw.glob('rank1_*'))/'raw-pass-000000.safetensors'
    x = load_file(f); x['resid.3'] = x['resid.3'].roll(1, 0).contiguous(); save_file(x, str(f))
    _fails(raw, t, tmp_path, "raw-pass-000000.safetensors: resid.3 differs from rank 0's")

def test_place_out_of_range_is_named(base, tmp_path):
    _, t, per, _ = base
    raw = write_layout(tmp_path/'raw', per, pp=2)
    pj = next(raw.glob('rank1_*'))/'process.json'
    info = json.loads(pj.read_text()); info[PLACE_KEY]['pp_rank'] = 2; pj.write_text(json.dumps(info))
    _fails(raw, t, tmp_path, 'process.json: place: pp_rank=2, pp_size=2: expected integers with 0 <= rank < size')

# ------------------------------------------------------------------------------------------------------------------
# the failure classes a raw folder shows, as findings: each planted beside its clean counterpart
from eagle3_workbench.engine_recording import layout_findings

def _codes(raw): return [(f.code, f.severity) for f in layout_findings(raw)]

@pytest.mark.parametrize('layout', [dict(pp=2), dict(dp=2, pp=2, tp=2), dict(tp=2, ep=2)], ids=str)
def test_clean_layouts_show_no_class(base, layout, tmp_path):
    assert _codes(write_layout(tmp_path/'raw', base[2], **layout)) == []

def test_local_ids_class(base, tmp_path):
    assert _codes(write_layout(tmp_path/'raw', base[2], pp=2, local_ids=True)) == [('AUX_PP_LOCAL_IDS', 'error')]

def test_scattered_rows_class(base, tmp_path):
    raw = write_layout(tmp_path/'raw', base[2], tp=2, ep=2)
    f = next(raw.glob('rank1_*'))/'raw-pass-000002.safetensors'
    x = load_file(f); x['resid.1'] = x['resid.1'][:2].contiguous(); save_file(x, str(f))   # this rank's share of the tokens only
    assert _codes(raw) == [('AUX_ROWS_SCATTERED', 'error')]

def test_ranks_disagree_class(base, tmp_path):
    raw = write_layout(tmp_path/'raw', base[2], tp=2, pp=2)
    f = next(raw.glob('rank3_*'))/'raw-pass-000001.safetensors'   # stage 1, tensor rank 1
    x = load_file(f); x['resid.4'] = x['resid.4'].roll(1, 0).contiguous(); save_file(x, str(f))   # other tokens' states, same count
    assert _codes(raw) == [('AUX_RANK_DIVERGENCE', 'error')]
