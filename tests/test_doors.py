"""A door for every finding code: each failure class a deployment folder shows comes out of one command on that folder,
`diagnose --deployment DIR --json` (or `record --from-raw DIR`), run as a user runs it (`python -m eagle3_workbench.cli`,
forked: tests/forked_cli.py). Each class is planted the way its public thread describes it, beside a clean twin made the
same way that must not show it:
- raw passes (SGLang's record mode, vLLM's recorder): a recording of a tiny pair written back out as the raw passes each
  layout writes (`doors.raw_from_recording`, the layouts of tests/test_layouts.py), then a later pipeline stage naming its
  layers from 0 (`AUX_PP_LOCAL_IDS`), or an expert-parallel rank holding only its share of a pass's rows
  (`AUX_ROWS_SCATTERED`); clean, the passes are assembled and the doctor runs on the recording;
- a `--forward-hooks` capture of two tensor-parallel ranks of the zoo pair, the second running a layer whose output is
  scaled (`AUX_RANK_DIVERGENCE`: other weights on one rank), clean when both ranks run the same model;
- a hand-off dump: the target's aux concat sent where the draft's state belongs (`HANDOFF_WIDTH`, sglang#10059) or the
  target's last state (`HANDOFF_TARGET_STATE`), clean when the rows are the draft's own state after its extend over
  the prompt (computed here by the workbench's draft, as tests/test_handoff.py does)."""
import json, os, shutil
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file, save_file
from eagle3_workbench.testing import tiny_pair, random_prompts
from eagle3_workbench.recording import record, open_recording
from eagle3_workbench.doors import raw_from_recording

@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    "A tiny pair (6 layers) and its recording of 4 prompts, in a folder the CLI reads."
    tmp = tmp_path_factory.mktemp('doors')
    pair = tiny_pair(tmp/'pair')
    rec = record(pair, random_prompts(4, length=9), out=tmp/'rec', max_new_tokens=4)
    return tmp, pair, rec

def diagnose(forked_cli, cwd, *args):
    "`diagnose ... --json`: (exit code, the JSON, stderr)."
    p = forked_cli.run(['diagnose', *map(str, args), '--no-accept', '--json'], cwd)
    try: out = json.loads(p.stdout)
    except json.JSONDecodeError: raise AssertionError(f"exit {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}") from None
    return p.returncode, out, p.stderr

def codes(out): return [f['code'] for f in out['findings']]

def said_kind(err, folder, kind_words):
    "One stderr line says which kind the folder was read as."
    lines = [l for l in err.splitlines() if l.startswith('deployment: ')]
    assert len(lines) == 1 and f"deployment: {folder} read as {kind_words}" in lines[0], err

# ---- raw passes ----

def local_ids(raw:Path, stage:int=1):
    "Stage `stage` names its layers by their count on the stage (from 0), in its passes' JSON and tensor names alike."
    for proc in raw.glob('rank*_pid*'):
        place = json.loads((proc/'process.json').read_text())['place']
        if place['pp_rank'] != stage: continue
        a = place['start_layer']
        for js in proc.glob('raw-pass-*.json'):
            m = json.loads(js.read_text()); m['layers'] = [k - a for k in m['layers']]; js.write_text(json.dumps(m))
            x = load_file(js.with_suffix('.safetensors'))
            save_file({f"resid.{int(k[6:]) - a}" if k.startswith('resid.') else k: v for k, v in x.items()}, str(js.with_suffix('.safetensors')))

def scatter(raw:Path, rank:int=1, layer:int=3):
    "One expert-parallel rank keeps only every other row of resid[layer] in its first pass: its share, not the pass's tokens."
    f = next(raw.glob(f'rank{rank}_pid*'))/'raw-pass-000000.safetensors'
    x = load_file(f); x[f'resid.{layer}'] = x[f'resid.{layer}'][1::2].contiguous(); save_file(x, str(f))

def diverge(raw:Path, rank:int=3, layer:int=4):
    "Stage 1's second tensor rank holds other tokens' states in its second pass (rolled by one row): the same count, other values."
    f = next(raw.glob(f'rank{rank}_pid*'))/'raw-pass-000001.safetensors'
    x = load_file(f); x[f'resid.{layer}'] = x[f'resid.{layer}'].roll(1, 0).contiguous(); save_file(x, str(f))

RAW = "the raw passes of an engine recording"

@pytest.mark.parametrize('code, layout, plant', [('AUX_PP_LOCAL_IDS', dict(pp=2), local_ids), ('AUX_ROWS_SCATTERED', dict(tp=2, ep=2), scatter),
                                                 ('AUX_RANK_DIVERGENCE', dict(tp=2, pp=2), diverge)],
                         ids=['AUX_PP_LOCAL_IDS', 'AUX_ROWS_SCATTERED', 'AUX_RANK_DIVERGENCE-raw'])
def test_raw_layout_class_from_the_command(tiny, forked_cli, tmp_path, code, layout, plant):
    tmp, pair, rec = tiny
    raw = raw_from_recording(rec, tmp_path/'raw', chunk=8, target=pair.target_path, **layout)
    plant(raw)
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', raw, '--draft', pair.draft_path)
    said_kind(err, raw, RAW)
    assert rc == 1 and out['verdict'] == 'miswired' and codes(out) == [code], out
    assert out['deployment']['kind'] == 'raw' and out['deployment']['assembled'] is False and out['deployment']['findings'] == [code]
    assert out['deployment']['layout'] == dict(dict(tp=1, pp=1, dp=1, ep=1), **layout)

@pytest.mark.parametrize('layout', [dict(pp=2), dict(tp=2, ep=2), dict(tp=2, pp=2), dict(dp=2)], ids=['pp2', 'tp2-ep2', 'tp2-pp2', 'dp2'])
def test_raw_clean_twin_is_assembled_and_diagnosed(tiny, forked_cli, tmp_path, layout):
    "The same layouts unplanted: no layout class; the doctor ran on the assembled recording, its prompts the recording's."
    tmp, pair, rec = tiny
    raw = raw_from_recording(rec, tmp_path/'raw', chunk=8, target=pair.target_path, **layout)
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', raw, '--draft', pair.draft_path)
    said_kind(err, raw, RAW)
    assert not {'AUX_PP_LOCAL_IDS', 'AUX_ROWS_SCATTERED', 'AUX_RANK_DIVERGENCE'} & set(codes(out)), out
    assert out['deployment']['assembled'] is True and out['deployment']['sequences'] == len(rec.sequences)
    assert out['search']['prompts'] == len(rec.sequences) and out['configured_resid_layers'] == list(pair.wiring.resid_layers)
    assert rc == {'ok': 0, 'inconclusive': 3}.get(out['verdict'], 1)

def test_record_from_raw_is_the_recording(tiny, forked_cli, tmp_path):
    "record --from-raw assembles without diagnosing: the same tokens, greedy tokens, logits and residual stream as the recording written out."
    tmp, pair, rec = tiny
    raw = raw_from_recording(rec, tmp_path/'raw', chunk=8, target=pair.target_path, tp=2, pp=2)
    p = forked_cli.run(['record', '--from-raw', raw, '--out', tmp_path/'got', '--json'], tmp_path)
    assert p.returncode == 0, p.stderr
    info, got = json.loads(p.stdout), open_recording(tmp_path/'got')
    assert (info['out'], info['sequences'], info['logits']) == (str(tmp_path/'got'), len(rec.sequences), 'full')
    for i in range(len(rec.sequences)):
        assert torch.equal(got.tokens(i), rec.tokens(i)) and torch.equal(got.greedy(i), rec.greedy(i)) and torch.equal(got.logits(i), rec.logits(i))
        for k in rec.layers: assert torch.equal(got.resid(k, i), rec.resid(k, i)), (i, k)

def test_record_from_raw_refuses_whole(tiny, forked_cli, tmp_path):
    "A layout fault, a folder of no raw passes, an --out that exists: exit 2, one line naming the folder, nothing written."
    tmp, pair, rec = tiny
    raw = raw_from_recording(rec, tmp_path/'raw', chunk=8, target=pair.target_path, pp=2)
    local_ids(raw)
    (tmp_path/'empty').mkdir(); (tmp_path/'taken').mkdir()
    for src, out, words in ((raw, 'got', 'local layer indices'), (tmp_path/'empty', 'got', 'no raw passes: expected'),
                            (tmp_path/'raw', 'taken', 'already exists')):
        p = forked_cli.run(['record', '--from-raw', src, '--out', tmp_path/out], tmp_path)
        err = p.stderr.strip()
        assert p.returncode == 2 and '\n' not in err and words in err and 'Traceback' not in err, err
        assert str(src if words != 'already exists' else tmp_path/out) in err, err
    assert not (tmp_path/'got').exists() and not list(tmp_path.glob('.got.partial-*')) and not list((tmp_path/'taken').iterdir())

def test_a_folder_of_no_kind(forked_cli, tmp_path):
    (tmp_path/'dep').mkdir(); (tmp_path/'dep'/'notes.txt').write_text('x')
    p = forked_cli.run(['diagnose', '--deployment', 'dep', '--no-accept'], tmp_path)
    err = p.stderr.strip()
    assert p.returncode == 2 and '\n' not in err and err.startswith('eagle3-workbench diagnose: error: dep: not a capture folder, raw passes or a hand-off dump'), err
    assert all(w in err for w in ('process.json', 'records.jsonl', 'handoff.json', 'Pass*.pt')), err

# ---- a capture of two tensor-parallel ranks ----

@pytest.fixture(scope='module')
def zoo_capture(tmp_path_factory):
    "`capture(folder, scale)`: a --forward-hooks capture (full mode) of the zoo pair serving one prompt on ranks 0 and 1; rank 1's layer 2 output times `scale`."
    from torch import nn
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench.sglang.hook import forward_hooks_json, attach_forward_hooks, flush_all
    pair, prompt = load_pair('zoo:tiny-llama', 'zoo:tiny-llama-eagle3'), read_prompts(n=1)[0]
    tmp = tmp_path_factory.mktemp('capture')
    def one(folder, rank, scale):
        specs = forward_hooks_json(pair.wiring.resid_layers, pair.n_layers, folder, mode='full')
        handles = attach_forward_hooks(pair.target, specs, role='target') + attach_forward_hooks(nn.ModuleDict({'model': pair.draft}), specs, role='draft')
        if scale != 1: handles.append(pair.target.model.layers[2].register_forward_hook(lambda m, i, o: (o[0] * scale, *o[1:]) if isinstance(o, tuple) else o * scale))
        old = os.environ.get('RANK'); os.environ['RANK'] = str(rank)
        try:
            s = Session(pair, speculative_num_steps=2); s.extend(pair.tokenizer(prompt, add_special_tokens=False)['input_ids']); s.step()
            flush_all()
        finally:
            for h in handles: h.remove()
            if old is None: os.environ.pop('RANK')
            else: os.environ['RANK'] = old
    made = []
    def capture(folder, scale):
        "Each rank into a folder of its own (the hook keeps one writer per folder), then moved into `folder`, its pid made distinct."
        for rank in (0, 1):
            made.append(src := tmp/f'run{len(made)}')
            one(src, rank, scale if rank else 1)
            for d in src.iterdir(): shutil.move(str(d), str(folder/d.name.replace('_pid', f'_pid{rank}')))
        return folder
    return capture, prompt, tuple(pair.wiring.resid_layers)

@pytest.mark.parametrize('scale', [1.5, 1.0], ids=['AUX_RANK_DIVERGENCE', 'clean'])
def test_capture_ranks_from_the_command(zoo_capture, forked_cli, tmp_path, scale):
    capture, prompt, _ = zoo_capture
    cap = capture(tmp_path/'cap', scale)
    assert sorted(d.name.split('_')[0] for d in cap.iterdir()) == ['rank0', 'rank1']
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', cap, '--deployment-prompt', prompt, '--target', 'zoo:tiny-llama',
                            '--draft', 'zoo:tiny-llama-eagle3', '--n-prompts', 3)
    said_kind(err, cap, 'an SGLang --forward-hooks capture')
    assert out['deployment']['kind'] == 'sglang-hook' and out['deployment']['ranks'] == [0, 1]
    assert out['deployment_match'] is not None   # the fed layers identified from draft.fc.in, as before
    if scale == 1:
        assert 'AUX_RANK_DIVERGENCE' not in codes(out) and out['deployment']['ranks_agree'] is True, out['findings']
        return
    f = next(f for f in out['findings'] if f['code'] == 'AUX_RANK_DIVERGENCE')
    assert f['severity'] == 'error' and f['evidence']['ranks'] == [1] and out['verdict'] == 'miswired' and rc == 1
    fed = zoo_capture[2]   # the hooks record the fed layers: those after the scaled layer 2 (resid[3] on) differ, resid[k <= 2] do not
    pts = set(f['evidence']['points'])
    assert {f'target.resid[{k}]' for k in fed if k > 2} <= pts and not {f'target.resid[{k}]' for k in fed if k <= 2} & pts, pts
    assert out['deployment']['ranks_agree'] is False

# ---- a hand-off dump ----

def handoff(folder:Path, rows:torch.Tensor, prompts:list)->Path:
    folder.mkdir()
    save_file({'hidden_states': rows.float().contiguous()}, str(folder/'handoff.safetensors'))
    (folder/'handoff.json').write_text(json.dumps(dict(input_ids=prompts, settings=dict(disaggregation_mode='prefill', speculative_algorithm='EAGLE3'))))
    return folder

def _own_state(pair, rec, i):
    "The draft's state after its extend over prompt i: what SGLang 0.5.23's prefill node sends (tests/test_handoff.py)."
    P = rec.prompt_len(i)
    ids = rec.tokens(i)[:P].tolist()
    feats = torch.cat([rec.resid(k, i)[:P] for k in pair.wiring.resid_layers], -1)[None].float()
    with torch.no_grad(): h, _ = pair.draft(feats, torch.tensor([ids[1:] + [int(rec.greedy(i)[P - 1])]]), torch.tensor([list(range(P))]))
    return h[0, -1]

@pytest.mark.parametrize('sent', ['aux concat', 'target last state', 'draft state'], ids=['HANDOFF_WIDTH', 'HANDOFF_TARGET_STATE', 'clean'])
def test_handoff_from_the_command(tiny, forked_cli, tmp_path, sent):
    tmp, pair, rec = tiny
    n, N = len(rec.sequences), rec.n_layers
    prompts = [rec.tokens(i)[:rec.prompt_len(i)].tolist() for i in range(n)]
    last = lambda k: torch.stack([rec.resid(k, i)[rec.prompt_len(i) - 1] for i in range(n)])
    rows = {'aux concat': lambda: torch.cat([last(k) for k in pair.wiring.resid_layers], -1), 'target last state': lambda: last(N),
            'draft state': lambda: torch.stack([_own_state(pair, rec, i) for i in range(n)])}[sent]()
    ho = handoff(tmp_path/'ho', rows.flip(0), prompts[::-1])   # in another order than the recording's: matched by prompt ids
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', ho, '--recording', tmp/'rec', '--draft', pair.draft_path)
    said_kind(err, ho, 'a disaggregated hand-off dump')
    assert out['deployment']['kind'] == 'handoff' and out['deployment']['rows'] == n and out['deployment']['width'] == rows.shape[-1]
    got = [f for f in out['findings'] if f['code'].startswith('HANDOFF_')]
    if sent == 'draft state': assert got == [], got; return
    f, = got
    assert f['severity'] == 'error' and out['verdict'] == 'miswired' and rc == 1
    if sent == 'aux concat':
        assert f['code'] == 'HANDOFF_WIDTH' and f['evidence']['width'] == 3 * rec.target['hidden_size']
        assert f['evidence']['chunks'] == [f'resid[{k}]' for k in pair.wiring.resid_layers]
    else:
        assert f['code'] == 'HANDOFF_TARGET_STATE' and f['evidence']['layers'] == [f'resid[{N}]'] and len(f['evidence']['rows']) == n

def test_handoff_with_the_target_in_process(zoo_capture, forked_cli, tmp_path):
    """With --target instead of --recording, the hand-off prompts are recorded in-process. The zoo draft is narrower than its
    target (128 against 160): the target's last state sent is a row the target's width (sglang#13590), named by its width."""
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.prompts import read_prompts
    pair = load_pair('zoo:tiny-llama', 'zoo:tiny-llama-eagle3')
    prompts = [pair.tokenizer(p, add_special_tokens=False)['input_ids'][:12] for p in read_prompts(n=2)]
    rec, N = record(pair, prompts, max_new_tokens=0), pair.n_layers
    ho = handoff(tmp_path/'ho', torch.stack([rec.resid(N, i)[len(p) - 1] for i, p in enumerate(prompts)]), prompts)
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', ho, '--target', 'zoo:tiny-llama', '--draft', 'zoo:tiny-llama-eagle3', '--n-prompts', 3)
    said_kind(err, ho, 'a disaggregated hand-off dump')
    f, = [f for f in out['findings'] if f['code'].startswith('HANDOFF_')]
    H, D = rec.target['hidden_size'], pair.draft.config.hidden_size
    assert H != D and f['code'] == 'HANDOFF_WIDTH' and (f['evidence']['width'], f['evidence']['expected']) == (H, D) and rc == 1
    assert "sized by the target's hidden size" in f['message']

def test_a_tensor_dump_is_read_as_one(forked_cli, tmp_path):
    "An SGLang tensor dump of two ranks (no draft.fc.in in it): read as a tensor dump, its ranks checked, said in one line."
    from test_runtime_classes import write_dump   # SGLang's dump layout: the input norms' [normed, resid] of one prefill pass
    write_dump(tmp_path/'dump', 0, 0, [1, 2]); write_dump(tmp_path/'dump', 1, 0, [1, 2], scale=1.5)
    rc, out, err = diagnose(forked_cli, tmp_path, '--deployment', tmp_path/'dump', '--n-prompts', 2)
    said_kind(err, tmp_path/'dump', 'an SGLang tensor dump')
    assert out['deployment']['kind'] == 'sglang-dump' and out['deployment']['ranks'] == [0, 1] and 'AUX_RANK_DIVERGENCE' in codes(out)
