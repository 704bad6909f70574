"""The readers on what SGLang's own code writes: its `--forward-hooks` registration, its tensor dump and its dumper,
run on CPU on models with SGLang's calling conventions (see sglang_source.py for how the three files are loaded).
The expected tensors are computed independently, the unfused way."""
import json
import pytest, torch
from eagle3_workbench.records import fingerprint, load_tensor
from eagle3_workbench.sglang.hook import forward_hooks_json
from eagle3_workbench.sglang.readers import read_hook_folder, read_debug_tensor_dump, read_dumper
from sglang_source import sglang_source, missing_reason, sglang_debug_tools, ForwardBatch
from test_sglang import SglTarget, LlamaForCausalLMEagle3

SRC = sglang_source()
pytestmark = pytest.mark.skipif(SRC is None, reason=missing_reason())   # tests/conftest.py fetches the pinned wheel's files

@pytest.fixture(scope='module')
def sgl():
    with sglang_debug_tools(SRC) as tools: yield tools

def fbatch(mode, pos, ids, hidden=None):
    "A forward batch the dump code recognises, with the fields it reads."
    return ForwardBatch(forward_mode=type('Mode', (), {'name': mode})(), positions=pos, input_ids=ids, hidden_states=hidden,
                        seq_lens=torch.tensor([int(pos.max()) + 1]), req_pool_indices=torch.tensor([0]), rids=None, batch_size=1)

def unfused_resid(target, ids):
    with torch.no_grad():
        rs = [target.model.embed_tokens(ids)]
        for layer in target.model.layers: rs.append(rs[-1] + layer.mlp(layer.input_layernorm(rs[-1])))
    return rs

PASSES = [('EXTEND', torch.arange(5)), ('TARGET_VERIFY', torch.arange(5, 8)), ('DECODE', torch.tensor([8]))]

def test_sglang_registers_the_factory(sgl, tmp_path):
    torch.manual_seed(0)
    target, draft = SglTarget(), LlamaForCausalLMEagle3(spelling='0.5.23')
    specs = json.loads(forward_hooks_json([0, 2, 3], 3, tmp_path, mode='full'))
    sgl.hook_manager.register_forward_hooks(target, specs)   # SGLang's own registration: globs, factory path, config
    sgl.hook_manager.register_forward_hooks(draft, specs)
    ids, feats = torch.tensor([3, 5, 7, 9]), torch.randn(4, 24)
    with torch.no_grad():
        target(ids, torch.arange(4), fbatch('EXTEND', torch.arange(4), ids))
        draft(ids, torch.arange(4), fbatch('DRAFT_EXTEND', torch.arange(4), ids, feats))
    cap = read_hook_folder(tmp_path)
    rs = unfused_resid(target, ids)
    for k in (0, 2, 3): assert torch.equal(load_tensor(next(r for r in cap.records if r.point == f'target.resid[{k}]')), rs[k]), k
    fc_in = next(r for r in cap.records if r.point == 'draft.fc.in')
    assert torch.equal(load_tensor(fc_in), feats) and (fc_in.phase, fc_in.phase_source) == ('draft_extend', 'inferred')

def test_tensor_dump_written_by_sglang(sgl, tmp_path):
    torch.manual_seed(0)
    target = SglTarget()
    sgl.tensor_dump.register_forward_hook_for_model(target, str(tmp_path), None, 1, 0, 0)   # dump_dir, layers, tp, rank, pp
    outs, resid = [], []
    with torch.no_grad():
        for mode, pos in PASSES:
            ids = (pos * 7 + 3) % 40
            outs.append(target(ids, pos, fbatch(mode, pos, ids))); resid.append(unfused_resid(target, ids))
    cap = read_debug_tensor_dump(tmp_path, n_layers=3, num_draft_tokens=3, modules=True)
    assert cap.ranks == [0] and cap.processes[0]['tp'] == 0
    got = {(r.point, r.origin.pass_id): r for r in cap.records}
    for n in range(3):
        for k in range(4): assert got[(f'target.resid[{k}]', n)].stats['fingerprint'] == fingerprint(resid[n][k]), (n, k)
    assert [got[('target.resid[1]', n)].phase for n in range(3)] == ['prefill', 'verify', 'decode']
    assert {r.phase_source for r in cap.records} == {'inferred'} and {r.origin.source for r in cap.records} == {'sglang-dump'}
    # the off-by-one, against SGLang's own writer: the `model` entry read as pass n is pass n's output; the last is not written
    model = {r.origin.pass_id: r for r in cap.records if r.point == 'module:target:model'}
    assert sorted(model) == [0, 1] and all(model[n].stats['fingerprint'] == fingerprint(outs[n]) for n in (0, 1))
    assert all(model[n].origin.detail['pass_file'] == n + 1 for n in (0, 1))

def test_tensor_dump_split_layout_written_by_sglang(sgl, tmp_path):
    "With EAGLE, SGLang's model runners dump into DIR/target and DIR/draft (load_model_utils.maybe_register_debug_tensor_dump_hook)."
    torch.manual_seed(0)
    target, draft = SglTarget(), LlamaForCausalLMEagle3(spelling='0.5.23')
    sgl.tensor_dump.register_forward_hook_for_model(target, str(tmp_path/'target'), None, 1, 0, 0)
    sgl.tensor_dump.register_forward_hook_for_model(draft, str(tmp_path/'draft'), None, 1, 0, 0)
    ids, pos, feats = torch.tensor([3, 5, 7, 9]), torch.arange(4), torch.randn(4, 24)
    with torch.no_grad():
        target(ids, pos, fbatch('EXTEND', pos, ids))
        draft(ids, pos, fbatch('DRAFT_EXTEND', pos, ids, feats))
        fc_out = draft.model.fc(feats)
        h, r = draft.model.layers[0](pos, draft.model.embed_tokens(ids), fc_out, None, None)
    cap = read_debug_tensor_dump(tmp_path)
    assert any('split' in n for n in cap.notes) and {p['group'] for p in cap.processes} == {'target', 'draft'}
    d = {r.point: r for r in cap.records if r.origin.group == 'draft'}
    assert d['draft.fc.out'].stats['fingerprint'] == fingerprint(fc_out) and (d['draft.fc.out'].phase, d['draft.fc.out'].phase_source) == ('draft_extend', 'inferred')
    assert d['draft.hidden'].stats['fingerprint'] == fingerprint(h + r)
    assert {'draft.hidden_norm', 'draft.input_layernorm', 'draft.norm'} <= set(d)

def test_dumper_written_by_sglang(sgl, tmp_path):
    torch.manual_seed(0)
    target, draft = SglTarget(), LlamaForCausalLMEagle3(spelling='0.5.23')
    d = sgl.dumper.dumper
    d.configure(enable=True, dir=str(tmp_path), exp_name='dump_20261130_000000_000000', non_intrusive_mode='all',
                enable_output_console=False)
    hooked = [d.register_non_intrusive_dumper(target), d.register_non_intrusive_dumper(draft)]
    ids, feats = torch.tensor([3, 5, 7, 9]), torch.randn(4, 24)
    try:
        with torch.no_grad():
            target(ids, torch.arange(4), fbatch('EXTEND', torch.arange(4), ids)); d.step()            # step 0
            draft(ids, torch.arange(4), fbatch('DRAFT_EXTEND', torch.arange(4), ids, feats))          # step 1: three calls
            for p in (4, 5): draft(ids[:1], torch.tensor([p]), fbatch('DECODE', torch.tensor([p]), ids[:1], torch.randn(1, 12)))
            d.step()
            vids = ids[:3]
            target(vids, torch.arange(4, 7), fbatch('TARGET_VERIFY', torch.arange(4, 7), vids))       # step 2, and a hand dump
            d.dump('layer_probe', torch.full((3, 8), 2.0), layer_id=2)
            d.step()
    finally:
        for h in hooked: h.remove()
        d.configure(enable=False)
    cap = read_dumper(tmp_path, keep_tensors=True, n_layers=3, num_draft_tokens=3, names={'layer_probe': 'target.resid[{layer_id}]'})
    assert cap.source == 'sglang-dumper' and cap.ranks == [0] and any('step=' in n for n in cap.notes)
    rs = unfused_resid(target, ids)
    pre = {r.point: r for r in cap.records if r.origin.pass_id == 0}
    for k in range(4): assert torch.equal(pre[f'target.resid[{k}]'].tensor, rs[k]), k
    assert pre['target.resid[0]'].phase == 'prefill' and pre['target.resid[0]'].token_ids == ids.tolist()
    assert {r.phase_source for r in cap.records} == {'inferred'} and {r.origin.source for r in cap.records} == {'sglang-dumper'}
    step1 = sorted((r.origin.detail['call'], r.phase, r.point) for r in cap.records if r.origin.pass_id == 1)
    assert [c for c in step1 if c[2].startswith('draft.fc')] == [(0, 'draft_extend', 'draft.fc.in'),
                                                                 (0, 'draft_extend', 'draft.fc.out')]
    assert {(c, ph) for c, ph, p in step1 if p == 'draft.hidden'} == {(0, 'draft_extend'), (1, 'draft'), (2, 'draft')}
    fc_in = next(r for r in cap.records if r.point == 'draft.fc.in')
    assert torch.equal(fc_in.tensor, feats)
    ver = [r for r in cap.records if r.origin.pass_id == 2]
    assert {r.phase for r in ver} == {'verify'}
    assert torch.equal(next(r for r in ver if r.point == 'target.resid[3]').tensor, unfused_resid(target, vids)[3])
    probe = [r for r in ver if r.origin.reading == 'dumped']
    assert [(r.point, r.stats['norm_mean']) for r in probe] == [('target.resid[2]', pytest.approx(2.0 * 8 ** 0.5))]

@pytest.mark.slow
def test_doctor_on_a_dumper_capture_alone(sgl, tmp_path):
    "The zoo pair with the original fault planted, dumped by SGLang's dumper with a name filter, diagnosed from the files."
    from torch import nn
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench.doctor import fed_from_capture
    pair = load_pair('zoo:tiny-dsv3')
    fault = (0, 2, 6)   # [embedding, trained low, trained mid] in slots trained on [low, mid, high]
    d = sgl.dumper.dumper
    d.configure(enable=True, dir=str(tmp_path), exp_name='dump_20261130_000000_000001', non_intrusive_mode='all',
                enable_output_console=False, filter=r"name == 'input_ids' or search(r'\.fc\.inputs', name) is not None")
    hooked = [d.register_non_intrusive_dumper(pair.target), d.register_non_intrusive_dumper(nn.ModuleDict({'model': pair.draft}))]
    prompt = read_prompts(n=1)[0]
    try:
        s = Session(pair, wiring=fault, speculative_num_steps=3)
        s.extend(prompt); d.step(); s.step(); d.step()
    finally:
        for h in hooked: h.remove()
        d.configure(enable=False, filter=None)
    cap = read_dumper(tmp_path, keep_tensors=True)
    assert {r.point for r in cap.records} == {'draft.fc.in'}
    fed, sim, findings = fed_from_capture(pair, cap.records, prompt)
    assert fed == fault and findings == [], (fed, findings)
