"Capture: named hook points read the real modules' tensors, stats are right, hooks never leak."
import json, math
import pytest, torch
from torch import nn
from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.loading import load_target, load_draft, save_draft
from eagle3_workbench.target import target_parts
from eagle3_workbench.points import POINTS
from eagle3_workbench.records import Record, tensor_stats, fingerprint, load_tensor, load_records
from eagle3_workbench.capture import Capture, live_hooks, expand_points

N = 6  # layers of the conftest targets

@pytest.fixture(scope='module')
def llama(tmp_path_factory):
    return load_target(save_tiny_target(tmp_path_factory.mktemp('t')/'llama', 'llama'))[0]

@pytest.fixture(scope='module')
def dsv3(tmp_path_factory):
    return load_target(save_tiny_target(tmp_path_factory.mktemp('t')/'dsv3', 'deepseek_v3'))[0]

@pytest.fixture(scope='module')
def draft(tmp_path_factory, llama):
    cfg = tiny_draft_config()
    p = tmp_path_factory.mktemp('d')/'draft'
    save_draft(random_draft(cfg), p, cfg)
    return load_draft(p, target=llama)[0]

def _ids(T=9, seed=0): return torch.randint(0, 96, (1, T), generator=torch.Generator().manual_seed(seed))

# --- target points -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('arch', ['llama', 'dsv3'])
def test_resid_equals_hf_hidden_states(arch, request):
    model = request.getfixturevalue(arch)
    ids = _ids()
    with torch.no_grad(): hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert len(hs) == N + 1
    before_all = live_hooks(model, mine_only=False)
    with Capture(model, points=('target.resid[*]', 'target.norm', 'target.embed'), mode='full') as cap:
        with torch.no_grad(): model(input_ids=ids)
    got = {r.point: r.tensor for r in cap}
    for k in range(N): assert torch.equal(got[f'target.resid[{k}]'], hs[k]), k
    # HF's last entry is after the final norm; resid[N] is its input
    assert not torch.equal(got[f'target.resid[{N}]'], hs[N])
    with torch.no_grad(): assert torch.equal(target_parts(model)['norm'](got[f'target.resid[{N}]']), hs[N])
    assert torch.equal(got['target.norm'], hs[N]) and torch.equal(got['target.embed'], hs[0])
    assert live_hooks(model) == 0 and live_hooks(model, mine_only=False) == before_all

def test_logits_and_stats_mode_norms(llama):
    ids = _ids(seed=1)
    with torch.no_grad(): out = llama(input_ids=ids, output_hidden_states=True)
    with Capture(llama, points=('target.logits', 'target.resid[2,-1]')) as cap:
        with torch.no_grad(): llama(input_ids=ids)
    assert [r.point for r in cap] == ['target.resid[2]', f'target.resid[{N}]', 'target.logits']
    assert all(r.tensor is None and r.location is None for r in cap)   # stats mode keeps no tensor
    r2 = cap.select('target.resid[2]')[0]
    torch.testing.assert_close(torch.tensor(r2.norms()), torch.linalg.norm(out.hidden_states[2], dim=-1).flatten())
    lg = cap.select('target.logits')[0]
    assert lg.shape == tuple(out.logits.shape) and lg.stats['fingerprint'] == fingerprint(out.logits)

def test_resid_kwarg_hidden_states():
    "A layer called with hidden_states= as keyword is read like a positional call."
    class Layer(nn.Module):
        def __init__(self): super().__init__(); self.lin = nn.Linear(4, 4)
        def forward(self, hidden_states, scale=1.0): return self.lin(hidden_states) * scale
    class Inner(nn.Module):
        def __init__(self):
            super().__init__(); self.embed_tokens = nn.Embedding(10, 4); self.layers = nn.ModuleList([Layer(), Layer()]); self.norm = nn.LayerNorm(4)
        def forward(self, ids):
            h = self.embed_tokens(ids)
            h = self.layers[0](h)                        # positional
            h = self.layers[1](scale=2.0, hidden_states=h)  # keyword
            return self.norm(h)
    class LM(nn.Module):
        def __init__(self): super().__init__(); self.model = Inner(); self.lm_head = nn.Linear(4, 10)
        def get_output_embeddings(self): return self.lm_head
        def forward(self, ids): return self.lm_head(self.model(ids))
    m = LM(); ids = torch.tensor([[1, 2, 3]])
    with Capture(m, points='target.resid[*]', mode='full') as cap: m(ids)
    inner = m.model
    e = inner.embed_tokens(ids); h1 = inner.layers[0](e); h2 = inner.layers[1](h1, scale=2.0)
    for k, want in enumerate((e, h1, h2)): assert torch.equal(cap.select(f'target.resid[{k}]')[0].tensor, want)

# --- draft points ------------------------------------------------------------------------------------------------

def test_draft_fc_in_is_the_concatenation(llama, draft):
    ids = _ids(T=7, seed=2)
    with torch.no_grad(): hs = llama(input_ids=ids, output_hidden_states=True).hidden_states
    feats = torch.cat([hs[2], hs[3], hs[5]], -1)
    pos = torch.arange(7)[None]
    with Capture(llama, draft, points='draft.*', mode='full') as cap:
        with torch.no_grad():
            h, logits = draft(feats, ids, pos)
            projected = draft.project(feats)
    assert cap.points == ['draft.fc.in', 'draft.fc.out', 'draft.embed', 'draft.hidden_norm', 'draft.input_layernorm',
                          'draft.attn', 'draft.mlp', 'draft.hidden', 'draft.norm', 'draft.logits']
    fc_in = cap.select('draft.fc.in')
    assert len(fc_in) == 2 and all(torch.equal(r.tensor, feats) for r in fc_in)  # forward, then project
    assert torch.equal(cap.select('draft.fc.out')[1].tensor, projected)
    assert torch.equal(cap.select('draft.embed')[0].tensor, target_parts(llama)['embed'](ids))
    assert torch.equal(cap.select('draft.hidden')[0].tensor, h)          # pre-norm hidden state
    assert torch.equal(cap.select('draft.logits')[0].tensor, logits)
    with torch.no_grad(): assert torch.equal(cap.select('draft.norm')[0].tensor, draft.norm(h))
    assert live_hooks(draft) == 0 and live_hooks(llama) == 0

def test_draft_without_fc(llama, tmp_path):
    cfg = tiny_draft_config(eagle_config=dict(use_aux_hidden_state=False))
    save_draft(random_draft(cfg), tmp_path/'d', cfg)
    d = load_draft(tmp_path/'d', target=llama)[0]
    names = expand_points('draft.*', draft=d)
    assert len(names) == 8 and not any(n.startswith('draft.fc') for n in names)
    with pytest.raises(ValueError, match='no fc'): Capture(draft=d, points='draft.fc.in')

def test_shared_embedding_fires_in_draft_phase(llama, draft):
    ids = _ids(T=4, seed=3)
    with Capture(llama, draft, points='target.embed') as cap:
        with torch.no_grad(), cap.phase('draft[0]', cycle=2):
            draft(torch.randn(1, 4, 96), ids, torch.arange(4)[None])
    assert [(r.point, r.phase, r.cycle) for r in cap] == [('target.embed', 'draft[0]', 2)]

# --- module globs ------------------------------------------------------------------------------------------------

def test_module_glob(llama, draft):
    ids = _ids(seed=4)
    want = [f'module:target:model.layers.{i}.mlp' for i in range(N)]
    assert expand_points('module:target:model.layers.*.mlp', llama) == want
    with Capture(llama, draft, points=('module:target:model.layers.*.mlp', 'module:draft:midlayer.self_attn.?_proj'),
                 mode='full') as cap:
        with torch.no_grad(): llama(input_ids=ids)
    assert [r.point for r in cap] == want
    assert cap.points[-4:] == [f'module:draft:midlayer.self_attn.{c}_proj' for c in 'qkvo']
    # tuple outputs: the first tensor (attention returns (out, weights))
    with Capture(llama, points='module:target:model.layers.0.self_attn', mode='full') as cap2:
        with torch.no_grad(): llama(input_ids=ids)
    assert cap2.records[0].shape == (1, 9, 32)
    with pytest.raises(ValueError, match='matches no submodule'): Capture(llama, points='module:target:nothing.*')

# --- stats -------------------------------------------------------------------------------------------------------

def test_tensor_stats_against_torch():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(2, 6, 10, generator=g) * 3 + 1
    s = tensor_stats(t)
    assert s['shape'] == (2, 6, 10) and s['dtype'] == 'float32' and s['numel'] == 120
    assert math.isclose(s['mean'], t.mean().item(), rel_tol=1e-5)
    assert math.isclose(s['std'], t.std().item(), rel_tol=1e-5)
    assert s['min'] == t.min().item() and s['max'] == t.max().item() and s['absmax'] == t.abs().max().item()
    n = torch.linalg.norm(t, dim=-1).flatten()
    torch.testing.assert_close(torch.tensor(s['norms'], dtype=torch.float32), n)
    assert math.isclose(s['norm_mean'], n.mean().item(), rel_tol=1e-5)
    assert math.isclose(s['norm_min'], n.min().item(), rel_tol=1e-6) and math.isclose(s['norm_max'], n.max().item(), rel_tol=1e-6)
    assert s['first5'] == t[0, 0, :5].tolist() and (s['nan'], s['inf']) == (0, 0)
    assert len(tensor_stats(t, max_tokens=5)['norms']) == 5 and len(tensor_stats(t, sample=3)['first5']) == 3
    json.dumps(s)  # plain data
    b = t.bfloat16()
    sb = tensor_stats(b)
    assert sb['dtype'] == 'bfloat16'
    torch.testing.assert_close(torch.tensor(sb['norms'], dtype=torch.float32), torch.linalg.norm(b.float(), dim=-1).flatten())

def test_nan_inf_counts():
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    t[0, 1] = t[2, 3] = float('nan'); t[1, 0] = float('inf'); t[3, 5] = t[3, 4] = float('-inf')
    s = tensor_stats(t)
    assert (s['nan'], s['inf']) == (2, 3)
    fin = t[torch.isfinite(t)]
    assert math.isclose(s['mean'], fin.mean().item(), rel_tol=1e-6) and math.isclose(s['std'], fin.std().item(), rel_tol=1e-6)
    assert (s['min'], s['max']) == (fin.min().item(), fin.max().item())
    assert math.isnan(s['norms'][0]) and math.isinf(s['norms'][1])   # a row's norm shows what the row holds
    allbad = tensor_stats(torch.full((2, 3), float('nan')))
    assert allbad['nan'] == 6 and math.isnan(allbad['mean']) and math.isnan(allbad['absmax'])

def test_fingerprint_equal_and_single_change():
    g = torch.Generator().manual_seed(1)
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64):
        t = (torch.randn(3, 5, 33, generator=g) * 100).to(dt)
        fp = fingerprint(t)
        assert fingerprint(t.clone()) == fp and tensor_stats(t)['fingerprint'] == fp
        assert fingerprint(t.transpose(0, 1).contiguous().transpose(0, 1)) == fp   # layout does not matter
        for i in range(0, t.numel(), 37):
            u = t.clone().reshape(-1)
            u[i] = u[i] + 1 if not u.is_floating_point() else torch.nextafter(u[i], torch.tensor(1e30, dtype=dt))
            assert fingerprint(u.reshape(t.shape)) != fp, (dt, i)
    z = torch.zeros(7); nz = -torch.zeros(7)
    assert torch.equal(z, nz) and fingerprint(z) == fingerprint(nz)
    x = torch.randn(4, 8)
    assert fingerprint(x) != fingerprint(x.reshape(8, 4)) and fingerprint(x) != fingerprint(x.double())
    assert fingerprint(torch.empty(0)) == fingerprint(torch.empty(0))

# --- cloning -----------------------------------------------------------------------------------------------------

class _InPlace(nn.Module):
    "A parent that modifies its child's output in place after the child returns (as fused kernels do)."
    def __init__(self): super().__init__(); self.a = nn.Linear(4, 4); self.b = nn.Linear(4, 4)
    def forward(self, x):
        y = self.a(x)
        y.mul_(0).add_(7)
        return self.b(y)

@pytest.mark.parametrize('mode', ['stats', 'full', 'disk'])
def test_records_are_clones(mode, tmp_path):
    m = _InPlace(); x = torch.randn(3, 4)
    with torch.no_grad(): want = m.a(x)
    with Capture(m, points=('module:target:a', 'module:target:b'), mode=mode, folder=tmp_path) as cap:
        with torch.no_grad(): out = m(x)
    out.fill_(123.0)   # mutate the returned tensor after the forward
    ra, rb = cap.records
    assert math.isclose(ra.stats['mean'], want.mean().item(), rel_tol=1e-6) and ra.stats['fingerprint'] == fingerprint(want)
    assert rb.stats['max'] != 123.0
    if mode != 'stats':
        assert torch.equal(load_tensor(ra), want)
        assert not torch.equal(load_tensor(rb), out)

# --- phases and selection ----------------------------------------------------------------------------------------

def test_phase_metadata_and_select(llama):
    ids = _ids(T=5, seed=5)
    with Capture(llama, points='target.resid[1]') as cap:
        with torch.no_grad():
            llama(input_ids=ids)
            with cap.phase('extend', cycle=0, positions=torch.arange(5), token_ids=ids[0]):
                llama(input_ids=ids)
                with cap.phase('verify', cycle=3, positions=[5, 6], token_ids=[7, 8]):
                    llama(input_ids=ids[:, :2])
                llama(input_ids=ids)   # back in the outer phase
            for i in range(2):
                with cap.phase(f'draft[{i}]', cycle=1): llama(input_ids=ids[:, :1])
    got = [(r.phase, r.cycle, r.positions, r.token_ids) for r in cap]
    assert got == [('none', -1, None, None), ('extend', 0, [0, 1, 2, 3, 4], ids[0].tolist()), ('verify', 3, [5, 6], [7, 8]),
                   ('extend', 0, [0, 1, 2, 3, 4], ids[0].tolist()), ('draft[0]', 1, None, None), ('draft[1]', 1, None, None)]
    assert [r.phase for r in cap.select(phase='draft[*]')] == ['draft[0]', 'draft[1]']
    assert len(cap.select(phase='extend', cycle=0)) == 2 and len(cap.select(cycle=[1, 3])) == 3
    assert len(cap.select('target.resid[*]')) == 6 and len(cap.select('target.resid[1,2]')) == 6
    assert cap.select('target.resid[2]') == [] and len(cap) == 6 and list(cap) == cap.records
    assert cap.records[1].to_dict()['positions'] == [0, 1, 2, 3, 4] and 'tensor' not in cap.records[1].to_dict()

# --- hooks never leak --------------------------------------------------------------------------------------------

def test_hooks_removed_after_exception_in_forward(llama):
    user = target_parts(llama)['norm'].register_forward_hook(lambda *a: None)   # someone else's hook survives
    before = live_hooks(llama, mine_only=False)
    layer = target_parts(llama)['layers'][3]
    def boom(*a, **k): raise RuntimeError('boom')
    layer.mlp.forward = boom
    try:
        with pytest.raises(RuntimeError, match='boom'):
            with Capture(llama, points=('target.*', 'module:target:model.layers.3.mlp')) as cap:
                assert live_hooks(llama) == N + 5
                llama(input_ids=_ids())
    finally: del layer.mlp.forward
    assert live_hooks(llama) == 0 and live_hooks(llama, mine_only=False) == before
    assert [r.point for r in cap] == ['target.embed', 'target.resid[0]', 'target.resid[1]', 'target.resid[2]', 'target.resid[3]']
    user.remove()

def test_hooks_removed_after_keyboard_interrupt(llama, draft, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with Capture(llama, draft, points=('target.resid[*]', 'draft.*'), mode='disk', folder=tmp_path) as cap:
            with torch.no_grad(): llama(input_ids=_ids())
            raise KeyboardInterrupt
    assert live_hooks(llama) == 0 and live_hooks(draft) == 0
    assert len(cap) == N + 1 and torch.equal(load_tensor(cap.records[0]), target_parts(llama)['embed'](_ids()))  # flushed on exit

def test_nested_captures(llama):
    ids = _ids(seed=6)
    with Capture(llama, points='target.resid[*]') as outer:
        with Capture(llama, points=('target.logits', 'target.resid[2]'), mode='full') as inner:
            assert live_hooks(llama) == N + 3
            with torch.no_grad(): llama(input_ids=ids)
        assert live_hooks(llama) == N + 1
        with torch.no_grad(): llama(input_ids=ids)
    assert live_hooks(llama) == 0
    assert len(outer) == 2 * (N + 1) and len(inner) == 2
    assert inner.select('target.resid[2]')[0].stats == outer.select('target.resid[2]')[0].stats
    with pytest.raises(RuntimeError, match='already open'):
        with outer:
            with outer: pass
    assert live_hooks(llama) == 0

# --- disk --------------------------------------------------------------------------------------------------------

def test_disk_round_trip_and_bounded_memory(llama, tmp_path):
    runs = [_ids(seed=s) for s in range(3)]
    with torch.no_grad(): refs = [llama(input_ids=i, output_hidden_states=True).hidden_states for i in runs]
    peak = []
    with Capture(llama, points='target.resid[*]', mode='disk', folder=tmp_path/'dump', flush_records=4) as cap:
        for i in runs:
            with torch.no_grad(): llama(input_ids=i)
            peak.append(cap.pending_bytes)
    one = refs[0][0].numel() * 4
    assert max(peak) < 4 * one                           # never 4 tensors waiting
    assert all(r.tensor is None and r.location for r in cap)
    shards = sorted((tmp_path/'dump').glob('*.safetensors'))
    assert len(shards) == math.ceil(3 * (N + 1) / 4)
    for j, r in enumerate(cap):
        run, k = divmod(j, N + 1)
        if k < N: assert torch.equal(load_tensor(r), refs[run][k])
    back = load_records(tmp_path/'dump')
    assert [r.to_dict()['stats'] for r in back] == [r.to_dict()['stats'] for r in cap]
    moved = tmp_path/'moved'; (tmp_path/'dump').rename(moved)
    assert torch.equal(load_tensor(load_records(moved)[1]), refs[0][1])
    # a byte budget: flush after every tensor
    with Capture(llama, points='target.resid[0,1]', mode='disk', folder=tmp_path/'b', flush_bytes=1) as cap2:
        with torch.no_grad(): llama(input_ids=runs[0])
        assert cap2.pending_bytes == 0
    assert len(list((tmp_path/'b').glob('*.safetensors'))) == 2

def test_disk_needs_folder_and_pending_is_explained(llama, tmp_path):
    with pytest.raises(ValueError, match='folder'): Capture(llama, mode='disk')
    with pytest.raises(ValueError, match="'stats'"):
        with Capture(llama, points='target.resid[0]') as cap:
            with torch.no_grad(): llama(input_ids=_ids())
        load_tensor(cap.records[0])
    with Capture(llama, points='target.resid[0]', mode='disk', folder=tmp_path) as cap:
        with torch.no_grad(): llama(input_ids=_ids())
        with pytest.raises(FileNotFoundError, match='not written yet'): load_tensor(cap.records[0])
        cap.flush()
        assert load_tensor(cap.records[0]).shape == (1, 9, 32)

# --- names -------------------------------------------------------------------------------------------------------

def test_names_and_errors(llama, draft):
    assert all(isinstance(v, str) and v for v in POINTS.values())
    for p in ('target.embed', 'target.norm', 'target.logits', 'draft.fc.in', 'draft.hidden', 'draft.logits'): assert p in POINTS
    assert expand_points('target.resid[*]', llama) == [f'target.resid[{k}]' for k in range(N + 1)]
    assert expand_points('target.resid[2, 6,-1,-7]', llama) == ['target.resid[2]', 'target.resid[6]', 'target.resid[0]']
    assert expand_points('target.*', llama)[0] == 'target.embed' and len(expand_points('target.*', llama)) == N + 4
    with pytest.raises(ValueError, match='N=6'): expand_points('target.resid[7]', llama)
    with pytest.raises(ValueError, match='N=6'): expand_points('target.resid[-8]', llama)
    with pytest.raises(ValueError, match=r'draft\.fc\.in'): Capture(llama, points='target.bogus')
    with pytest.raises(ValueError, match='draft='): Capture(llama, points='draft.hidden')
    with pytest.raises(ValueError, match='target='): Capture(draft=draft, points='target.resid[0]')
    with pytest.raises(ValueError, match='mode'): Capture(llama, mode='everything')
    assert live_hooks(llama) == 0

