"""The SGLang chapter without SGLang: the hook factory registered the way SGLang registers it, in two processes as two
ranks; the readers on folders and text written in the documented layouts; the launch and config helpers."""
import json, os, shutil, subprocess, sys, textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
import pytest, torch
from torch import nn

import eagle3_workbench.sglang.hook as sg_hook, eagle3_workbench.sglang.launch as sg_launch
from eagle3_workbench.records import Record, Origin, fingerprint, tensor_stats, load_tensor
from eagle3_workbench.sglang.hook import factory, forward_hooks_json, attach_forward_hooks, module_points
from eagle3_workbench.sglang.readers import read_hook_folder, read_debug_tensor_dump, read_dumper
from eagle3_workbench.sglang.log import read_server_log, read_debug_lines
from eagle3_workbench.sglang.compare import compare_captures, presence_by_phase
from eagle3_workbench.sglang.launch import launch_command, live_runner
from eagle3_workbench.wiring import draft_config_edit
from eagle3_workbench.testing import save_tiny_target

N = 6  # layers of conftest's tiny target

# ---------------------------------------------------------------------------------------------------------------------
# Two ranks, two processes, registered exactly as SGLang's hook_manager.register_forward_hooks does it
# ---------------------------------------------------------------------------------------------------------------------

CHILD = textwrap.dedent('''
    import fnmatch, importlib, json, os, sys, torch
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.records import tensor_stats
    target_dir, specs_json, out_json = sys.argv[1:4]
    model, _ = load_target(target_dir)
    if os.environ.get('PERTURB_LAYER'):
        with torch.no_grad(): model.model.layers[int(os.environ['PERTURB_LAYER'])].mlp.down_proj.weight.add_(0.05)
    # SGLang's procedure: resolve the factory by path, call it once per spec, fnmatch over named_modules, register each match
    name_to_module = dict(model.named_modules())
    for spec in json.loads(specs_json):
        mod, fn = spec['hook_factory'].split(':', 1)
        hook = getattr(importlib.import_module(mod), fn)(spec.get('config') or {})
        for name, m in name_to_module.items():
            if any(fnmatch.fnmatch(name, p) for p in spec['target_modules']): m.register_forward_hook(hook)
    ids = torch.arange(1, 9)[None]
    with torch.no_grad():
        model(input_ids=ids)                                             # pass 0
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states  # pass 1, and transformers' own answer
    json.dump({str(k): tensor_stats(h) for k, h in enumerate(hs)}, open(out_json, 'w'))
''')

@pytest.fixture(scope='module')
def ranks(tmp_path_factory):
    "Folder A: ranks 0 and 1 of the same model; folder B: rank 0 (copied from A) and a perturbed rank 1."
    tmp = tmp_path_factory.mktemp('ranks')
    target = save_tiny_target(tmp/'target')
    specs = {f: forward_hooks_json(range(N + 1), N, tmp/f) for f in 'AB'}
    runs = [('A', '0', {}), ('A', '1', {}), ('B', '1', {'PERTURB_LAYER': '3'})]
    procs = []
    for folder, rank, extra in runs:
        env = {**os.environ, 'RANK': rank, **extra}
        out = tmp/f'hf_{folder}{rank}.json'
        procs.append((subprocess.Popen([sys.executable, '-c', CHILD, str(target), specs[folder], str(out)], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out))
    for p, _ in procs:
        log, _ = p.communicate(timeout=600)
        assert p.returncode == 0, log[-3000:]
    a0 = next((tmp/'A').glob('rank0_pid*'))
    shutil.copytree(a0, tmp/'B'/a0.name)
    return SimpleNamespace(tmp=tmp, A=tmp/'A', B=tmp/'B', hf=json.loads((tmp/'hf_A0.json').read_text()))

def test_each_process_writes_its_own_rank_folder(ranks):
    dirs = sorted(p.name for p in ranks.A.iterdir())
    assert [d.split('_')[0] for d in dirs] == ['rank0', 'rank1']
    assert len({d.split('_pid')[1] for d in dirs}) == 2          # two processes, two pids: no collision
    for d in ranks.A.iterdir():
        assert {'records.jsonl', 'process.json'} <= {p.name for p in d.iterdir()}
        assert not (d/'errors.log').exists(), (d/'errors.log').read_text()
        info = json.loads((d/'process.json').read_text())
        assert d.name == f"rank{info['rank']}_pid{info['pid']}"

def test_read_hook_folder_merges_ranks_and_they_agree(ranks):
    cap = read_hook_folder(ranks.A)
    assert cap.ranks == [0, 1] and cap.agree, cap.report()
    assert len(cap.merged) * 2 == len(cap.records)
    points = [f'target.resid[{k}]' for k in range(N + 1)] + ['target.norm']   # model.norm yields resid[N] and its own output
    for rank in (0, 1):
        got = [(r.origin.pass_id, r.point) for r in cap.records if r.origin.rank == rank]
        assert sorted(got) == sorted((p, pt) for p in (0, 1) for pt in points)   # a pass counter per process
    assert 'agree on every point' in cap.report()

def test_recorded_resid_equals_transformers_hidden_states(ranks):
    cap = read_hook_folder(ranks.A)
    for k in range(N):   # hidden_states[N] is after the final norm: not resid[N]
        for p in (0, 1):
            r = next(r for r in cap.merged if r.point == f'target.resid[{k}]' and r.origin.pass_id == p)
            assert r.stats['fingerprint'] == ranks.hf[str(k)]['fingerprint'], (k, p)
            assert r.stats['norm_mean'] == pytest.approx(ranks.hf[str(k)]['norm_mean'], rel=1e-6)
            assert r.token_ids == list(range(1, 9))
    last = next(r for r in cap.merged if r.point == f'target.resid[{N}]')
    assert last.origin.reading == 'norm_input' and last.origin.module == 'model.norm'
    assert last.stats['fingerprint'] != ranks.hf[str(N)]['fingerprint']   # the normed last entry is another tensor:
    normed = next(r for r in cap.merged if r.point == 'target.norm')       # the final norm's output
    assert normed.stats['fingerprint'] == ranks.hf[str(N)]['fingerprint']

def test_perturbed_rank_is_reported(ranks):
    cap = read_hook_folder(ranks.B)
    assert not cap.agree and cap.disagreeing_ranks == [1]
    bad = sorted({d['point'] for d in cap.disagreements})
    assert bad == ['target.norm'] + [f'target.resid[{k}]' for k in (4, 5, 6)]   # layer 3 was changed: its output on
    assert {d['pass'] for d in cap.disagreements} == {0, 1}
    assert 'rank 1 vs rank 0' in cap.report()
    assert read_hook_folder(ranks.A, ranks=[0, 1, 2]).missing_ranks == [2]

# ---------------------------------------------------------------------------------------------------------------------
# In-process: SGLang's calling conventions (pairs, ForwardBatch), name discovery, the draft's spellings
# ---------------------------------------------------------------------------------------------------------------------

class FusedNorm(nn.Module):
    def __init__(self, h): super().__init__(); self.weight = nn.Parameter(torch.ones(h))
    def forward(self, x, residual=None):
        if residual is not None: x = residual = x + residual
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return n if residual is None else (n, residual)

class Layer(nn.Module):
    def __init__(self, h): super().__init__(); self.input_layernorm, self.mlp = FusedNorm(h), nn.Linear(h, h, bias=False)
    def forward(self, positions, hidden_states, forward_batch, residual):
        if residual is None: residual, hidden_states = hidden_states, self.input_layernorm(hidden_states)
        else: hidden_states, residual = self.input_layernorm(hidden_states, residual)
        return self.mlp(hidden_states), residual

class Inner(nn.Module):
    def __init__(self, h, n): super().__init__(); self.embed_tokens, self.layers, self.norm = nn.Embedding(40, h), nn.ModuleList(Layer(h) for _ in range(n)), FusedNorm(h)
    def forward(self, input_ids, positions, forward_batch):
        h, r = self.embed_tokens(input_ids), None
        for layer in self.layers: h, r = layer(positions, h, forward_batch, r)
        return self.norm(h, r)[0]

class SglTarget(nn.Module):
    def __init__(self, h=8, n=3): super().__init__(); self.model = Inner(h, n)
    def forward(self, ids, pos, fb): return self.model(ids, pos, fb)

class Mid(nn.Module):
    def __init__(self, h): super().__init__(); self.input_layernorm, self.hidden_norm, self.mlp = FusedNorm(h), FusedNorm(h), nn.Linear(2 * h, h, bias=False)
    def forward(self, positions, embeds, hidden_states, forward_batch, residual):
        residual = hidden_states
        h = self.mlp(torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden_states)], -1))
        return h, residual

class DraftInner(nn.Module):
    def __init__(self, h, th, spelling):
        super().__init__()
        self.embed_tokens, self.fc, self.norm = nn.Embedding(40, h), nn.Linear(3 * th, h, bias=False), FusedNorm(h)
        if spelling == '0.5.6': self.midlayer = Mid(h)
        else: self.layers = nn.ModuleList([Mid(h)])
    def forward(self, input_ids, positions, forward_batch):
        e, h = self.embed_tokens(input_ids), forward_batch.hidden_states
        if h.shape[-1] != e.shape[-1]: h = self.fc(h)
        mid = self.midlayer if hasattr(self, 'midlayer') else self.layers[0]
        h, r = mid(positions, e, h, forward_batch, None)
        return self.norm(h, r)[0]

class LlamaForCausalLMEagle3(nn.Module):
    def __init__(self, h=12, th=8, spelling='0.5.6'): super().__init__(); self.model = DraftInner(h, th, spelling)
    def forward(self, ids, pos, fb): return self.model(ids, pos, fb)

def fb(mode, pos, ids, hidden=None):
    return SimpleNamespace(forward_mode=SimpleNamespace(name=mode), positions=pos, input_ids=ids, hidden_states=hidden,
                           seq_lens=torch.tensor([int(pos.max()) + 1]), batch_size=1)

def sglang_register(model, specs_json):
    "SGLang's hook_manager.register_forward_hooks, replicated: no name registration, the hook must find names itself."
    import fnmatch, importlib
    for spec in json.loads(specs_json):
        mod, fn = spec['hook_factory'].split(':', 1)
        hook = getattr(importlib.import_module(mod), fn)(spec.get('config') or {})
        for name, m in dict(model.named_modules()).items():
            if any(fnmatch.fnmatch(name, p) for p in spec['target_modules']): yield m.register_forward_hook(hook)

@pytest.mark.parametrize('spelling', ['0.5.6', '0.5.23'])
def test_target_and_draft_in_one_process(tmp_path, spelling):
    torch.manual_seed(0)
    target, draft = SglTarget(), LlamaForCausalLMEagle3(spelling=spelling)
    js = forward_hooks_json([0, 2, 3], 3, tmp_path, mode='full')
    handles = list(sglang_register(target, js)) + list(sglang_register(draft, js))
    ids = torch.tensor([3, 5, 7, 9])
    try:
        with torch.no_grad():
            target(ids, torch.arange(4), fb('EXTEND', torch.arange(4), ids))                       # pass 0
            feats = torch.randn(4, 24)
            draft(ids, torch.arange(4), fb('DRAFT_EXTEND', torch.arange(4), ids, feats))           # pass 1
            draft(ids[:1], torch.tensor([4]), fb('DECODE', torch.tensor([4]), ids[:1], torch.randn(1, 12)))  # pass 2: no fc
            target(ids[:3], torch.arange(4, 7), fb('TARGET_VERIFY', torch.arange(4, 7), ids[:3]))  # pass 3
    finally:
        for h in handles: h.remove()
    cap = read_hook_folder(tmp_path)
    got = sorted((r.origin.pass_id, r.phase, r.point) for r in cap.records)
    assert got == [(0, 'prefill', 'target.norm'), (0, 'prefill', 'target.resid[0]'),
                   (0, 'prefill', 'target.resid[2]'), (0, 'prefill', 'target.resid[3]'),
                   (1, 'draft_extend', 'draft.fc.in'), (1, 'draft_extend', 'draft.fc.out'),
                   (1, 'draft_extend', 'draft.hidden'), (2, 'draft', 'draft.hidden'),
                   (3, 'verify', 'target.norm'), (3, 'verify', 'target.resid[0]'),
                   (3, 'verify', 'target.resid[2]'), (3, 'verify', 'target.resid[3]')]
    assert {(r.phase_source, r.phase_evidence.split()[0]) for r in cap.records} == {('inferred', 'forward_mode')}
    assert {(r.origin.role, r.origin.source) for r in cap.records} == {('target', 'sglang-hook'), ('draft', 'sglang-hook')}
    # target layer 0 matched the draft glob but was not asked for; model.norm gives resid[3] and its own output
    from eagle3_workbench.records import load_tensor
    fc_in = next(r for r in cap.records if r.point == 'draft.fc.in')
    assert torch.equal(load_tensor(fc_in), feats) and fc_in.shape == (4, 24)
    # resid[k] = hidden_states + residual of layer k-1, the unfused residual stream
    with torch.no_grad():
        rs = [target.model.embed_tokens(ids)]
        for layer in target.model.layers: rs.append(rs[-1] + layer.mlp(layer.input_layernorm(rs[-1])))
    for k in (0, 2, 3):
        r = next(r for r in cap.records if r.point == f'target.resid[{k}]' and r.origin.pass_id == 0)
        assert torch.equal(load_tensor(r), rs[k]), k
    assert next(r for r in cap.records if r.point == 'target.resid[2]').origin.reading == 'residual_sum'
    assert next(r for r in cap.records if r.point == 'target.resid[3]').positions == [0, 1, 2, 3]

def test_phase_from_positions_without_forward_mode(tmp_path):
    torch.manual_seed(0)
    target = SglTarget()
    js = forward_hooks_json([1], 3, tmp_path)
    spec = json.loads(js); spec[0]['config']['num_draft_tokens'] = 3
    handles = list(sglang_register(target, json.dumps(spec)))
    nomode = lambda pos: SimpleNamespace(positions=pos)   # no forward_mode: the phase comes from the anchor's positions
    try:
        with torch.no_grad():
            for pos in (torch.arange(5), torch.arange(5, 8), torch.tensor([8])): target.model(pos % 40, pos, nomode(pos))
    finally:
        for h in handles: h.remove()
    cap = read_hook_folder(tmp_path)
    assert [r.phase for r in cap.records] == ['prefill', 'verify', 'decode']
    assert all(r.phase_source == 'inferred' and 'positions' in r.phase_evidence for r in cap.records)
    assert [r.positions for r in cap.records] == [[0, 1, 2, 3, 4], [5, 6, 7], [8]]

def first_layout(d:dict)->dict:
    "A record dict as the first version of the hook wrote it: origin and phase evidence inside `stats`, 'inferred:' phases."
    o = d['origin']
    stats = {**d['stats'], 'source': o['source'], 'module': o['module'], 'role': o['role'], 'reading': o['reading'],
             'capture': o['detail']['capture'], 'pass': o['pass_id'], 'rank': o['rank'], 'pid': o['pid'],
             'inferred_phase': d['phase'], 'phase_inferred': True, 'phase_evidence': d['phase_evidence']}
    rest = {k: v for k, v in d.items() if k not in ('origin', 'phase_source', 'phase_evidence')}
    return {**rest, 'phase': f"inferred:{d['phase']}", 'stats': stats}

def test_hook_folder_of_the_first_layout_reads_the_same(tmp_path):
    "Hook folders written by the first version (origin inside stats, 'inferred:' phases) read as today's."
    torch.manual_seed(0)
    target = SglTarget()
    handles = list(sglang_register(target, forward_hooks_json([0, 2, 3], 3, tmp_path/'now', mode='full')))
    try:
        with torch.no_grad():
            for mode, pos in (('EXTEND', torch.arange(4)), ('DECODE', torch.tensor([4]))): target(pos + 3, pos, fb(mode, pos, pos + 3))
    finally:
        for h in handles: h.remove()
    now = next((tmp_path/'now').iterdir())
    old = tmp_path/'old'/now.name; old.mkdir(parents=True)
    for f in now.glob('pass*.safetensors'): shutil.copy(f, old/f.name)
    lines = [json.loads(l) for l in (now/'records.jsonl').read_text().splitlines()]
    (old/'records.jsonl').write_text(''.join(json.dumps(first_layout(d)) + '\n' for d in lines))
    a, b = read_hook_folder(tmp_path/'now'), read_hook_folder(tmp_path/'old')
    strip = lambda r: {**r.to_dict(), 'location': r.location.rsplit('/', 1)[-1]}
    assert [strip(r) for r in a.records] == [strip(r) for r in b.records] and len(a.records) == 8
    assert {(r.phase, r.phase_source) for r in b.records} == {('prefill', 'inferred'), ('decode', 'inferred')}
    assert all(set(r.stats) == set(tensor_stats(torch.zeros(1))) for r in b.records)   # statistics only
    assert torch.equal(load_tensor(b.records[0]), load_tensor(a.records[0]))

def test_the_factory_imports_no_heavy_module():
    """A server resolving the factory and making a hook loads neither transformers nor the doctor, models or capture,
    nor the SGLang modules that do not run in a server; asking for a reader loads the readers."""
    heavy = ['transformers', 'eagle3_workbench.doctor', 'eagle3_workbench.loading', 'eagle3_workbench.draft', 'eagle3_workbench.capture',
             'eagle3_workbench.sglang.readers', 'eagle3_workbench.sglang.log', 'eagle3_workbench.sglang.compare',
             'eagle3_workbench.sglang.launch']
    show = f"print([m for m in {heavy!r} if m in sys.modules])"
    code = '\n'.join(['import sys', 'import eagle3_workbench.sglang', show, 'import eagle3_workbench.sglang.hook', show,
                      'import importlib; importlib.import_module("eagle3_workbench.sglang.hook").factory({"folder": "/tmp/x"})', show,
                      'from eagle3_workbench.sglang.readers import read_hook_folder', show])
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ['[]', '[]', '[]', "['eagle3_workbench.sglang.readers']"], out

def test_hooks_and_capture_see_the_same_tensors(tmp_path):
    "The factory's records of a transformers Llama are Capture's, point for point; a bf16 copy's are close, not identical."
    import copy
    from transformers import LlamaConfig, AutoModelForCausalLM
    from eagle3_workbench.capture import Capture
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
         num_attention_heads=4, num_key_value_heads=2), attn_implementation='eager').eval()
    ids = torch.arange(1, 9)[None]
    def hooked(model, folder):
        handles = attach_forward_hooks(model, forward_hooks_json(range(5), 4, folder, draft_spelling='none'))
        try:
            with torch.no_grad(): model(input_ids=ids)
        finally:
            for h in handles: h.remove()
        return read_hook_folder(folder)
    with Capture(hf, points='target.resid[*]') as cap:
        with torch.no_grad(), cap.phase('extend'): hf(input_ids=ids)
    fp32, bf16 = hooked(hf, tmp_path/'fp32'), hooked(copy.deepcopy(hf).to(torch.bfloat16), tmp_path/'bf16')
    same = compare_captures(cap, fp32, by_phase=False).rows
    assert {r['verdict'] for r in same if r['point'].startswith('target.resid')} == {'identical'} and len(same) == 6
    assert {r['verdict'] for r in compare_captures(fp32, bf16).rows if r['point'].startswith('target.resid')} == {'close'}

def test_factory_config_errors():
    with pytest.raises(ValueError, match=r"config\['folder'\]"): factory({})
    with pytest.raises(ValueError, match='unknown config key'): factory({'folder': '/tmp/x', 'max_tokens': 3})
    with pytest.raises(ValueError, match="'stats', 'full' or 'record'"): factory({'folder': '/tmp/x', 'mode': 'disk'})

def test_hook_never_raises_into_the_server(tmp_path, monkeypatch):
    hook = factory({'folder': str(tmp_path)})
    lin = nn.Linear(2, 2)
    assert hook(lin, (torch.zeros(1, 2),), object()) is None   # an output it cannot read: nothing recorded
    def boom(*a, **k): raise RuntimeError('boom')
    monkeypatch.setattr(sg_hook, 'tensor_stats', boom)
    assert hook(lin, (torch.zeros(1, 2),), torch.zeros(1, 2)) is None   # a failure is logged, not raised
    log = next(tmp_path.glob('rank*_pid*'))/'errors.log'
    assert 'RuntimeError: boom' in log.read_text()

def test_module_points_both_spellings():
    assert module_points('target', 'model.layers.58.input_layernorm') == [('target.resid[58]', 'norm_residual')]
    assert module_points('target', 'model.layers.57') == [('module:target:model.layers.57', 'output')]
    assert module_points('draft', 'model.layers.0.self_attn') == module_points('draft', 'model.midlayer.self_attn') == [('draft.attn', 'output')]

def test_forward_hooks_json():
    spec = json.loads(forward_hooks_json((0, 2, 30, 58), 61, '/x', draft_spelling='0.5.23'))[0]
    assert spec['hook_factory'] == 'eagle3_workbench.sglang.hook:factory'
    assert spec['target_modules'] == ['model.embed_tokens', 'model.layers.2.input_layernorm', 'model.layers.30.input_layernorm',
                                      'model.layers.58.input_layernorm', 'model.fc', 'model.layers.0', 'model']
    assert spec['config']['n_layers'] == 61
    with pytest.raises(ValueError, match='draft_spelling'): forward_hooks_json([2], 61, '/x', draft_spelling='0.6')

def test_attach_forward_hooks_registers_names_and_handles(tmp_path):
    target = SglTarget()
    handles = attach_forward_hooks(target, forward_hooks_json([1, 2], 3, tmp_path))
    assert len(handles) == 4   # the norms of layers 1 and 2, the draft glob model.layers.0 (matched, never recorded), the anchor
    for h in handles: h.remove()
    assert sum(len(m._forward_hooks) for m in target.modules()) == 0

# ---------------------------------------------------------------------------------------------------------------------
# SGLang's debug tensor dump, in both documented layouts
# ---------------------------------------------------------------------------------------------------------------------

def write_target_dump(base, rank, pid, passes, scale=1.0):
    "Pass files as SGLang writes them: leaves and batch info of pass n, the `model` output of pass n-1."
    d = Path(base)/f'TP{rank}_PP0_Rank{rank}_pid{pid}'; d.mkdir(parents=True)
    prev = None
    for n, (pos, resid) in enumerate(passes):
        data = {'model.embed_tokens': resid[0], 'model.layers.0.input_layernorm': resid[0] * 2,
                'model.layers.1.input_layernorm': [resid[1] * 2, resid[1] * scale],
                'model.layers.2.input_layernorm': [resid[2] * 2, resid[2]], 'model.norm': [resid[3] * 2, resid[3]],
                'model.layers.1.mlp.down_proj': resid[1] + 1,
                'model.forward_batch_info.positions': pos, 'model.forward_batch_info.input_ids': pos + 10,
                'model.forward_batch_info.seq_lens': torch.tensor([int(pos.max()) + 1])}
        if prev is not None: data['model'] = prev
        torch.save(data, d/f'Pass{n:05d}.pt')
        prev = resid[3] * 3
    return d

@pytest.fixture
def passes():
    torch.manual_seed(1)
    return [(pos, [torch.randn(len(pos), 8) for _ in range(4)]) for pos in (torch.arange(5), torch.arange(5, 8), torch.tensor([8]))]

def test_debug_dump_single_folder(tmp_path, passes):
    write_target_dump(tmp_path, 0, 11, passes); write_target_dump(tmp_path, 1, 12, passes)
    cap = read_debug_tensor_dump(tmp_path, n_layers=3, num_draft_tokens=3)
    assert cap.source == 'sglang-dump' and cap.ranks == [0, 1] and cap.agree, cap.report()
    m = {(r.point, r.origin.pass_id): r for r in cap.merged}
    for n, (pos, resid) in enumerate(passes):
        for k in range(4): assert m[(f'target.resid[{k}]', n)].stats['fingerprint'] == fingerprint(resid[k])
    assert [(m[('target.resid[1]', n)].phase, m[('target.resid[1]', n)].phase_source) for n in range(3)] == \
           [('prefill', 'inferred'), ('verify', 'inferred'), ('decode', 'inferred')]
    assert m[('target.resid[1]', 0)].token_ids == list(range(10, 15))
    assert ('target.resid[0]', 0) in m and not any(r.point == 'target.resid[0]' and r.origin.module.endswith('input_layernorm') for r in cap.records)
    shifted = sorted((r.origin.pass_id, r.origin.detail['pass_file'], r.origin.detail['pass_shift']) for r in cap.merged if r.point == 'module:target:model')
    assert shifted == [(0, 1, -1), (1, 2, -1)]   # Pass00000 has no model entry; the last pass's is never written
    assert any('pass n-1' in n for n in cap.notes)
    assert not any(r.point.startswith('module:target:model.layers') for r in cap.records)
    assert any(r.point == 'module:target:model.layers.1.mlp.down_proj' for r in read_debug_tensor_dump(tmp_path, modules=True).records)

def test_debug_dump_disagreeing_tp_rank(tmp_path, passes):
    write_target_dump(tmp_path, 0, 11, passes); write_target_dump(tmp_path, 1, 12, passes, scale=1.5)
    cap = read_debug_tensor_dump(tmp_path)
    assert cap.disagreeing_ranks == [1] and {d['point'] for d in cap.disagreements} == {'target.resid[1]'}

def test_debug_dump_split_layout(tmp_path, passes):
    write_target_dump(tmp_path/'target', 0, 11, passes)
    d = tmp_path/'draft'/'TP0_PP0_Rank0_pid11'; d.mkdir(parents=True)
    fc, normed, hidden = torch.randn(1, 12), torch.randn(1, 12), torch.randn(1, 12)
    torch.save({'model.fc': fc, 'model.layers.0.hidden_norm': fc * 2, 'model.norm': [normed, hidden],
                'model.forward_batch_info.positions': torch.tensor([9]), 'model.forward_batch_info.seq_lens': torch.tensor([10])},
               d/'Pass00000.pt')
    cap = read_debug_tensor_dump(tmp_path)
    draft = {r.point: r for r in cap.records if r.origin.group == 'draft'}
    assert set(draft) == {'draft.fc.out', 'draft.hidden_norm', 'draft.norm', 'draft.hidden'}
    assert draft['draft.hidden'].stats['fingerprint'] == fingerprint(hidden) and (draft['draft.fc.out'].phase, draft['draft.fc.out'].phase_source) == ('draft', 'inferred')
    assert any('split' in n for n in cap.notes) and cap.agree

@dataclass
class NotATensor:
    x: int = 1

def test_debug_dump_refuses_pickled_objects(tmp_path):
    d = tmp_path/'TP0_PP0_Rank0_pid1'; d.mkdir()
    torch.save({'model.embed_tokens': torch.zeros(2, 3), 'extra': NotATensor()}, d/'Pass00000.pt')
    with pytest.raises(ValueError, match=r'Pass00000\.pt: refused to load.*weights_only=True'): read_debug_tensor_dump(tmp_path)
    torch.save({'model.embed_tokens': torch.zeros(2, 3), 'note': 'hello'}, d/'Pass00000.pt')   # loads, but is no tensor
    with pytest.raises(ValueError, match=r"Pass00000\.pt: entry 'note' is a str"): read_debug_tensor_dump(tmp_path)

# SGLang's dumper (DUMPER_ENABLE=1): what its current code writes is tested in test_sglang_source.py; here the older
# file format, several ranks in one run folder, and the errors

def dumper_file(run, value, old=False, **tags):
    "One dumper file: the tags in its name; the value bare (older versions) or with its meta."
    run.mkdir(parents=True, exist_ok=True)
    torch.save(value if old else {'value': value, 'meta': dict(tags)}, run/('___'.join(f'{k}={v}' for k, v in tags.items()) + '.pt'))

def test_dumper_old_format_ranks_and_names(tmp_path):
    run = tmp_path/'sglang_dump_1764460800.123'
    torch.manual_seed(0)
    aux, hidden = torch.randn(4, 24), torch.randn(4, 8)
    for rank, scale in ((0, 1.0), (1, 1.0), (2, 1.5)):
        for i, (name, value, extra) in enumerate([('input_ids', torch.arange(10, 14), {}), ('positions', torch.arange(4), {}),
                                                  ('eagle3_aux', aux, {}), ('hidden', hidden * scale, {'layer_id': 3})], 1):
            dumper_file(run, value, old=True, forward_pass_id=1, rank=rank, name=name, dump_index=i, **extra)
    cap = read_dumper(tmp_path, names={'eagle3_aux': 'draft.fc.in'})   # the parent folder, holding one run
    assert cap.source == 'sglang-dumper' and cap.ranks == [0, 1, 2] and any('forward_pass_id=' in n for n in cap.notes)
    assert cap.disagreeing_ranks == [2] and {d['point'] for d in cap.disagreements} == {'debug:hidden[layer_id=3]'}
    fc = [r for r in cap.merged if r.point == 'draft.fc.in']
    assert len(fc) == 1 and fc[0].stats['fingerprint'] == fingerprint(aux)
    assert (fc[0].phase, fc[0].phase_source) == ('prefill', 'inferred') and fc[0].token_ids == [10, 11, 12, 13] and fc[0].origin.pass_id == 1

def test_dumper_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match='DUMPER_ENABLE=1'): read_dumper(tmp_path)
    for run in ('dump_20261130_010101_000001', 'dump_20261130_020202_000002'):
        dumper_file(tmp_path/run, torch.zeros(2), step=0, rank=0, dump_index=1, name='x')
    with pytest.raises(ValueError, match='holds 2 dumper runs'): read_dumper(tmp_path)
    run = tmp_path/'dump_20261130_010101_000001'
    torch.save(torch.zeros(2), run/'stray.pt')
    with pytest.raises(ValueError, match=r"stray\.pt: not a file of SGLang's dumper"): read_dumper(run)
    (run/'stray.pt').unlink()
    dumper_file(run, NotATensor(), step=0, rank=0, dump_index=2, name='y')
    with pytest.raises(ValueError, match=r'name=y.*refused to load.*weights_only=True'): read_dumper(run)
    dumper_file(run, ['rid-1', 'rid-2'], step=0, rank=0, dump_index=2, name='y')   # loads, but is no tensor
    cap = read_dumper(run)
    assert [r.point for r in cap.records] == ['debug:x'] and any('not tensors' in n for n in cap.notes)

def test_missing_folders_are_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match='forward-hooks'): read_hook_folder(tmp_path)
    with pytest.raises(FileNotFoundError, match='TP\\*_PP\\*'): read_debug_tensor_dump(tmp_path)

# ---------------------------------------------------------------------------------------------------------------------
# Logs and hand-patched lines
# ---------------------------------------------------------------------------------------------------------------------

LOG = """\
[2026-01-05 09:00:00 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16
[2026-01-05 09:00:10 TP0] Decode batch. #running-req: 1, #token: 123, token usage: 0.00, accept len: 2.31, accept rate: 0.46, cuda graph: True, gen throughput (token/s): 45.2, #queue-req: 0,
[2026-01-05 09:00:11 TP0] Decode batch. #running-req: 1, #token: 163, token usage: 0.00, accept len: 1.04, accept rate: 0.01, cuda graph: False, gen throughput (token/s): 9.95, #queue-req: 0,
[2026-01-05 09:00:12 DP1 TP5 EP5] Decode batch. #running-req: 4, #token: 900, token usage: 0.02, pre-allocated usage: 0.10, #retracted-req: 0, accept len: 3.50, cpu graph: False, gen throughput (token/s): 100.00, #queue-req: 2, #cache_miss: 1
"""

def test_read_server_log_text_and_path(tmp_path):
    tl = read_server_log(LOG)
    assert [r['accept_len'] for r in tl] == [2.31, 1.04, 3.5]
    assert [r['accept_rate'] for r in tl] == [0.46, 0.01, None]
    assert [r['cuda_graph'] for r in tl] == [True, False, None] and tl[2]['cpu_graph'] is False
    assert [r['tp'] for r in tl] == [0, 0, 5] and tl[0]['time'] == '2026-01-05 09:00:10'
    assert (tl[2]['pre_allocated_usage'], tl[2]['retracted_req'], tl[2]['queue_req'], tl[2]['gen_throughput']) == (0.1, 0, 2, 100.0)
    (tmp_path/'server.log').write_text(LOG)
    assert read_server_log(tmp_path/'server.log') == tl == read_server_log(str(tmp_path/'server.log'))

def test_read_server_log_current_format():
    "0.5.23's decode line (metrics_reporter.report_decode_stats): a comma, an optional [iteration], a Ray actor prefix."
    tl = read_server_log("(SchedulerActor pid=4242, ip=10.0.0.7) [2026-11-30 10:00:04 DP0 TP3 EP3] Decode batch [1234], "
                         "#running-req: 2, #token: 512, token usage: 0.01, accept len: 2.84, accept rate: 0.61, cap len: 3.00, "
                         "cuda graph: False, gen throughput (token/s): 180.22, #queue-req: 0\n"
                         "[2026-11-30 10:00:05 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, accept len: 1.00, "
                         "accept rate: 0.00, cuda graph: True, gen throughput (token/s): 3.10, #queue-req: 0")
    assert [(r['tp'], r['iter'], r['accept_len'], r['accept_rate'], r['cuda_graph']) for r in tl] == \
           [(3, 1234, 2.84, 0.61, False), (0, None, 1.0, 0.0, True)]
    assert tl[0]['cap_len'] == 3.0 and tl[0]['running_req'] == 2 and tl[1]['time'] == '2026-11-30 10:00:05'

def test_read_debug_lines():
    text = ("EAGLE3_DEBUG[target.layer3] phase=decode shape=(1, 4096), norm=123.4, first5=[0.1, -0.2, ...]\n"
            "EAGLE3_DEBUG[target.resid[30]] phase=verify shape=(6, 7168) mean=0.01 absmax=12.5 nan=0 cycle=4\n"
            "EAGLE3_DEBUG[weird tag] norm=nan")
    recs = read_debug_lines(text, names=lambda t: 'target.resid[3]' if t == 'target.layer3' else None)
    assert [r.point for r in recs] == ['target.resid[3]', 'target.resid[30]', 'debug:weird tag']
    assert isinstance(recs[0], Record) and recs[0].stats['norm_mean'] == 123.4 and recs[0].stats['first5'] == [0.1, -0.2]
    assert recs[0].stats['mean'] is None and recs[0].stats['std'] is None and recs[0].phase_source == 'printed'
    assert (recs[1].cycle, recs[1].stats['absmax'], recs[1].stats['norm_mean'], recs[1].stats['nan']) == (4, 12.5, None, 0)
    assert recs[2].shape == () and recs[2].stats['shape'] == () and recs[2].stats['norm'] != recs[2].stats['norm']
    assert [(r.origin.source, r.origin.detail['line'], r.origin.detail['tag']) for r in recs] == \
           [('debug-line', 1, 'target.layer3'), ('debug-line', 2, 'target.resid[30]'), ('debug-line', 3, 'weird tag')]
    assert not {'source', 'line', 'tag', 'rank', 'missing', 'cycle', 'phase'} & set(recs[1].stats)   # statistics only
    assert 'printed' in repr(recs[0])
    assert Record.from_dict(json.loads(json.dumps(recs[1].to_dict()))).stats['absmax'] == 12.5

# ---------------------------------------------------------------------------------------------------------------------
# Comparison and presence
# ---------------------------------------------------------------------------------------------------------------------

def rec(point, phase, t, rank=0, pass_=0, phase_source='inferred'):
    st = tensor_stats(t)
    return Record(point, phase, -1, None, None, tuple(t.shape), st['dtype'], st, origin=Origin('sglang-hook', rank, rank, pass_),
                  phase_source=phase_source)

def test_compare_captures():
    torch.manual_seed(0)
    t = torch.randn(4, 8)
    a = [rec(p, ph, t, phase_source='engine') for p, ph in (('target.resid[2]', 'extend'), ('target.resid[3]', 'verify'), ('draft.fc.in', 'draft_extend'))]
    b = [rec('target.resid[2]', 'prefill', t), rec('target.resid[3]', 'verify', t * 1.001), rec('target.resid[9]', 'verify', t)]
    c = compare_captures(a, b)
    v = {(r['point'], r['phase']): r['verdict'] for r in c.rows}
    assert v == {('target.resid[2]', 'prefill'): 'identical', ('target.resid[3]', 'verify'): 'close',
                 ('draft.fc.in', 'draft_extend'): 'only in a', ('target.resid[9]', 'verify'): 'only in b'}
    assert compare_captures(a[1:2], [rec('target.resid[3]', 'verify', t * 1.5)]).rows[0]['verdict'] == 'differs'
    assert [r['point'] for r in c.differing()] == ['draft.fc.in', 'target.resid[9]']
    assert 'rel diff' in str(c)

def test_presence_by_phase():
    t = torch.randn(2, 8)
    recs = ([rec(f'target.resid[{k}]', 'prefill', t) for k in (2, 30, 58)]
            + [rec(f'target.resid[{k}]', 'verify', t) for k in (2, 16, 29)]
            + [rec('draft.fc.in', 'draft_extend', t), rec('draft.hidden', 'draft', t),
               rec('draft.hidden', 'draft_extend', t), rec('target.resid[2]', 'unknown', t)]
            + [rec('target.resid[2]', 'prefill', t, rank=2)])
    p = presence_by_phase(recs, ranks=[0, 1, 2])
    assert ('target.resid[30]', ['prefill'], ['verify']) in p.missing and ('draft.fc.in', ['draft_extend'], ['draft']) in p.missing
    assert ('target', 'prefill', 'verify', ['target.resid[30]', 'target.resid[58]'], ['target.resid[16]', 'target.resid[29]']) in p.phase_differences
    assert p.silent_ranks == [1] and p.rank_gaps[0][0] == 2 and p.unknown == 1 and not p.ok
    assert 'never in verify' in str(p) and 'CUDA-graph' in str(p)

# ---------------------------------------------------------------------------------------------------------------------
# Launch flags, config edit, live runner
# ---------------------------------------------------------------------------------------------------------------------

def test_launch_command():
    js = forward_hooks_json((2, 30, 58), 61, '/tmp/p')
    cmd = launch_command('/m/target', '/m/draft', forward_hooks=js)
    flat = ' '.join(cmd.replace('\\\n', ' ').split())
    assert flat.startswith('python -m sglang.launch_server --model-path /m/target --speculative-algorithm EAGLE3 '
                           '--speculative-draft-model-path /m/draft --speculative-num-steps 5 --speculative-eagle-topk 1 '
                           '--speculative-num-draft-tokens 6 --tp 8 --forward-hooks ')
    assert flat.endswith('--disable-cuda-graph')
    import shlex
    parts = shlex.split(cmd.replace('\\\n', ' '))
    assert json.loads(parts[parts.index('--forward-hooks') + 1]) == json.loads(js)
    plain = launch_command('t', 'd', steps=3, topk=4, num_draft_tokens=8, tp=2, probing=False, port=30000, enable_metrics=True)
    assert '--disable-cuda-graph' not in plain and '--port 30000' in plain and '--enable-metrics' in plain and '--tp 2' in plain
    with pytest.raises(ValueError, match='steps \\+ 1'): launch_command('t', 'd', steps=5, num_draft_tokens=8)

def test_draft_config_edit():
    cfg = {'architectures': ['LlamaForCausalLMEagle3'], 'hidden_size': 7168}
    new, diff = draft_config_edit(cfg, (2, 30, 58), 61, 'deepseek_v3')
    assert new['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [1, 29, 57]
    assert new['eagle_aux_hidden_state_layer_ids'] == [2, 30, 58]
    assert 'eagle_config' not in cfg and new['hidden_size'] == 7168
    assert '+ eagle_config.eagle_aux_hidden_state_layer_ids: [1, 29, 57]' in diff and 'resid[2, 30, 58]' in diff
    same, diff2 = draft_config_edit(new, (2, 30, 58), 61, 'deepseek_v3')
    assert same == new and diff2.count('unchanged') == 2
    emb, d3 = draft_config_edit({}, (0, 16, 29), 32, 'llama')
    assert emb['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [-1, 15, 28] and 'embedding' in d3
    with pytest.raises(ValueError, match='never captured'): draft_config_edit({}, (2, 16, 32), 32)

def test_live_runner_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(sg_launch, 'find_spec', lambda name: None)
    with pytest.raises(RuntimeError, match='sglang is not installed') as e: live_runner('zoo:tiny-dsv3', tmp_path)
    assert 'forward_hooks_json' in str(e.value) and 'pip install -e .[sglang]' in str(e.value)
    assert not any(tmp_path.iterdir())

# ---------------------------------------------------------------------------------------------------------------------
# live_runner's synthetic request across the signatures bench_one_batch has had
# ---------------------------------------------------------------------------------------------------------------------

class _Req:
    def __init__(self, ids): self.origin_input_ids = list(ids); self.fill_ids = list(ids)

def _helper_custom(batch_size, input_len, custom_inputs=None):      # current SGLang: ids may be passed in
    ids = custom_inputs or [[9999] * input_len for _ in range(batch_size)]
    return [_Req(r) for r in ids]

def _helper_output_len(batch_size, input_len, output_len):          # an older one: random ids up to 10000
    _helper_output_len.output_len = output_len
    return [_Req([9000 + i for i in range(input_len)]) for _ in range(batch_size)]

def _helper_plain(batch_size, input_len):                           # the oldest: ones
    return [_Req([1] * input_len) for _ in range(batch_size)]

@pytest.mark.parametrize('helper', [_helper_custom, _helper_output_len, _helper_plain])
def test_synthetic_request_ids_stay_inside_a_small_vocabulary(helper):
    vocab = 100
    reqs = sg_launch._synthetic_reqs(SimpleNamespace(prepare_synthetic_inputs_for_latency_test=helper), 16, vocab, decode_steps=2)
    assert len(reqs) == 1
    for ids in (reqs[0].origin_input_ids, reqs[0].fill_ids):
        assert len(ids) == 16 and all(0 <= int(t) < vocab for t in ids), ids
    assert len(set(reqs[0].origin_input_ids)) > 1          # not a constant prompt
    if helper is _helper_output_len: assert helper.output_len == 3

def test_sample_rate_records_whole_passes_chosen_by_pass_number(tmp_path, monkeypatch):
    "sample_rate: whole passes, chosen by pass number (golden-ratio sequence), real pass numbers, nothing done for the rest."
    torch.manual_seed(0)
    target, draft = SglTarget(), LlamaForCausalLMEagle3(spelling='0.5.23')
    calls = []
    monkeypatch.setattr(sg_hook, 'tensor_stats', lambda t, **k: calls.append(1) or tensor_stats(t, **k))
    js = forward_hooks_json([0, 2, 3], 3, tmp_path, sample_rate=0.3)
    assert json.loads(js)[0]['config']['sample_rate'] == 0.3
    handles = list(sglang_register(target, js)) + list(sglang_register(draft, js))
    ids = torch.tensor([3, 5, 7, 9])
    try:
        with torch.no_grad():
            for cycle in range(15):   # a verify pass of the target, then a draft_extend of the draft: 30 passes
                target(ids, torch.arange(4), fb('TARGET_VERIFY', torch.arange(4), ids))
                draft(ids, torch.arange(4), fb('DRAFT_EXTEND', torch.arange(4), ids, torch.randn(4, 24)))
    finally:
        for h in handles: h.remove()
    golden = (5 ** 0.5 - 1) / 2
    want = [n for n in range(30) if (n * golden) % 1 < 0.3]
    recs = read_hook_folder(tmp_path).records
    assert sorted({r.origin.pass_id for r in recs}) == want
    per_pass = {n: sorted(r.point for r in recs if r.origin.pass_id == n) for n in want}
    for n, points in per_pass.items():   # whole passes: even numbers are the target's, odd the draft's
        assert points == (['target.norm', 'target.resid[0]', 'target.resid[2]', 'target.resid[3]'] if n % 2 == 0
                          else ['draft.fc.in', 'draft.fc.out', 'draft.hidden']), n
    assert {n % 2 for n in want} == {0, 1}   # both roles sampled although they alternate
    assert len(calls) == len(recs)   # skipped passes computed no statistics
