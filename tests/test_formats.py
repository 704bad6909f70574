"""Who wrote a draft checkpoint, the speculators and ModelOpt layouts, FP8 weights and speculators' training dumps.

Every expectation is read in the trainer's own code (cited per test) and written out here, so no trainer package is
needed; `test_speculators_itself_*` additionally run speculators 0.9.0 when it is importable (a throwaway venv:
`python -m venv --system-site-packages ../specvenv && ../specvenv/bin/pip install speculators==0.9.0 hs-connectors==0.9.0
--no-deps && ../specvenv/bin/pip install 'transformers==5.19.0' loguru openai 'datasets<=5.1.0'`, then
`PYTHONPATH=. ../specvenv/bin/python -m pytest tests/test_formats.py -k itself`)."""
import gzip, json, math
import pytest, torch
import torch.nn.functional as F
from safetensors.torch import save_file, load_file
from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.draft import Eagle3Draft
from eagle3_workbench.draft_config import DraftConfig, ModelLoadError
from eagle3_workbench.loading import load_target, load_draft, save_draft
from eagle3_workbench.target import target_parts
from eagle3_workbench.formats import detect_provenance, flatten_config
from eagle3_workbench.loading import dequantize
from eagle3_workbench.dumps import read_dump, read_speculators_dump, read_specforge_dump, dump_format
from eagle3_workbench.teacher import ttt_forward

H, NH, NKV, HD, V, DV = 32, 4, 2, 8, 96, 48

@pytest.fixture(scope='module')
def target_dir(tmp_path_factory): return save_tiny_target(tmp_path_factory.mktemp('t')/'target', 'llama')

@pytest.fixture(scope='module')
def target(target_dir): return load_target(target_dir)[0]

def _inputs(T=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, T, 3 * H, generator=g), torch.randint(0, V, (1, T), generator=g), torch.arange(T)[None]

def _rms(x, w, eps=1e-6): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

# ---- speculators 0.9.0 ------------------------------------------------------------------------------------------
# config: speculators/models/eagle3/config.py (Eagle3SpeculatorConfig), speculators/config.py; what save_pretrained wrote
SPEC_CFG = {'architectures': ['Eagle3DraftModel'], 'speculators_model_type': 'eagle3', 'speculators_version': '0.9.0',
            'draft_vocab_size': DV, 'eagle_aux_hidden_state_layer_ids': [2, 3, 4], 'target_hidden_size': None,
            'norm_before_residual': False, 'norm_before_fc': False, 'fc_norm': False, 'norm_output': False,
            'speculators_config': {'algorithm': 'eagle3', 'default_proposal_method': 'greedy',
                                   'proposal_methods': [{'proposal_type': 'greedy', 'speculative_tokens': 3}],
                                   'verifier': {'architectures': ['LlamaForCausalLM'], 'name_or_path': None}},
            'transformer_layer_config': {'model_type': 'llama', 'hidden_size': H, 'intermediate_size': 64, 'num_attention_heads': NH,
                                         'num_key_value_heads': NKV, 'head_dim': HD, 'num_hidden_layers': 1, 'vocab_size': V,
                                         'rms_norm_eps': 1e-6, 'rope_parameters': {'rope_theta': 10000.0, 'rope_type': 'default'}}}

def _speculators_weights(seed=0, norm_before_fc=False, fc_norm=False):
    "Weights named and shaped as speculators 0.9.0 builds them (models/eagle3/core.py, model_definitions.py, model.py)."
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    one = lambda n: 1 + r(n)
    sd = {'fc.weight': r(H, 3 * H),                                   # Linear(num_aux * hidden_size, hidden_size, bias=False)
          'layers.0.hidden_norm.weight': one(H), 'layers.0.input_layernorm.weight': one(H), 'layers.0.post_attention_layernorm.weight': one(H),
          'layers.0.self_attn.q_proj.weight': r(NH * HD, 2 * H),      # first layer: q/k/v read 2 x hidden_size
          'layers.0.self_attn.k_proj.weight': r(NKV * HD, 2 * H), 'layers.0.self_attn.v_proj.weight': r(NKV * HD, 2 * H),
          'layers.0.self_attn.o_proj.weight': r(H, NH * HD),
          'layers.0.mlp.gate_proj.weight': r(64, H), 'layers.0.mlp.up_proj.weight': r(64, H), 'layers.0.mlp.down_proj.weight': r(H, 64),
          'norm.weight': one(H), 'lm_head.weight': r(DV, H), 'embed_tokens.weight': r(V, H)}
    keep = torch.randperm(V, generator=g)[:DV].sort().values
    sd['d2t'], sd['t2d'] = keep - torch.arange(DV), torch.zeros(V, dtype=torch.bool).index_fill_(0, keep, True)
    if norm_before_fc: sd['input_norm.weight'] = one(3 * H)           # one RMSNorm over the concatenation
    if fc_norm: sd.update({f'fc_norm.{i}.weight': one(H) for i in range(3)})
    return sd

def _speculators_step(sd, flags, feats, ids):
    "One step of speculators' Eagle3DraftModel.forward, written out: (state passed on, logits)."
    x = feats[0]
    if flags.get('norm_before_fc'): x = _rms(x, sd['input_norm.weight'])
    if flags.get('fc_norm'): x = torch.cat([_rms(c, sd[f'fc_norm.{i}.weight']) for i, c in enumerate(x.chunk(3, -1))], -1)
    x = x @ sd['fc.weight'].T
    L, T = 'layers.0.', x.shape[0]                                    # Eagle3FirstLayerMixin.forward: residual is the un-normed hidden
    a = torch.cat([_rms(sd['embed_tokens.weight'][ids[0]], sd[L+'input_layernorm.weight']), _rms(x, sd[L+'hidden_norm.weight'])], -1)
    q, k, v = [(a @ sd[L+f'self_attn.{n}_proj.weight'].T).view(T, -1, HD).transpose(0, 1) for n in 'qkv']
    ang = torch.arange(T).float()[:, None] / 10000.0 ** (torch.arange(0, HD, 2).float() / HD)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = lambda t: t * cos + torch.cat([-t[..., HD // 2:], t[..., :HD // 2]], -1) * sin
    q, k = rot(q), rot(k).repeat_interleave(NH // NKV, 0)
    att = ((q @ k.transpose(-1, -2)) / math.sqrt(HD) + torch.full((T, T), float('-inf')).triu(1)).softmax(-1) @ v.repeat_interleave(NH // NKV, 0)
    y = x + att.transpose(0, 1).reshape(T, -1) @ sd[L+'self_attn.o_proj.weight'].T
    z = _rms(y, sd[L+'post_attention_layernorm.weight'])
    y = y + (F.silu(z @ sd[L+'mlp.gate_proj.weight'].T) * (z @ sd[L+'mlp.up_proj.weight'].T)) @ sd[L+'mlp.down_proj.weight'].T
    if flags.get('norm_output'): y = _rms(y, sd['norm.weight']); return y, y @ sd['lm_head.weight'].T   # EAGLE 3.1: one norm, passed on
    return y, _rms(y, sd['norm.weight']) @ sd['lm_head.weight'].T

@pytest.mark.parametrize('flags', [{}, {'norm_output': True}, {'norm_before_fc': True}, {'fc_norm': True, 'norm_output': True}])
def test_speculators_checkpoint_loads_to_its_math(tmp_path, flags):
    sd = _speculators_weights(norm_before_fc=flags.get('norm_before_fc', False), fc_norm=flags.get('fc_norm', False))
    (tmp_path/'config.json').write_text(json.dumps({**SPEC_CFG, **flags})); save_file(sd, tmp_path/'model.safetensors')
    d, rep = load_draft(tmp_path)
    assert (rep.trainer, rep.format, rep.embedding, rep.vocab_map, rep.unknown_keys) == ('speculators', 'speculators', 'checkpoint', 'checkpoint', [])
    assert 'speculators_model_type' in rep.provenance
    feats, ids, pos = _inputs()
    with torch.no_grad(): h, logits = d(feats, ids, pos)
    want_h, want_logits = _speculators_step(sd, flags, feats, ids)
    torch.testing.assert_close(h[0], want_h, rtol=1e-5, atol=1e-5); torch.testing.assert_close(logits[0], want_logits, rtol=1e-5, atol=1e-5)

def test_speculators_config_defaults_and_refusals(tmp_path):
    tl = {k: v for k, v in SPEC_CFG['transformer_layer_config'].items() if k not in ('rms_norm_eps', 'head_dim', 'rope_parameters')}
    flat = flatten_config({**SPEC_CFG, 'transformer_layer_config': tl}, detect_provenance(SPEC_CFG, []), 'c.json')
    assert (flat['rms_norm_eps'], flat['head_dim'], flat['rope_parameters']['rope_theta']) == (1e-6, H // NH, 10000.0)   # LlamaConfig's defaults
    no_vocab = {k: v for k, v in SPEC_CFG.items() if k != 'draft_vocab_size'}
    assert flatten_config(no_vocab, detect_provenance(no_vocab, []))['draft_vocab_size'] == 32000   # Eagle3SpeculatorConfig's default
    for bad, says in [({'speculators_model_type': 'mtp'}, "c.json: speculators_model_type='mtp'"),
                      ({'transformer_layer_config': 'llama'}, "c.json: key 'transformer_layer_config' must be an object")]:
        with pytest.raises(ModelLoadError, match=says.replace('(', r'\(')): flatten_config({**SPEC_CFG, **bad}, detect_provenance(SPEC_CFG, []), 'c.json')

def test_save_speculators_layout_and_round_trip(tmp_path, target, target_dir):
    cfg = tiny_draft_config()
    d0 = random_draft(cfg); d0.embed_tokens = target_parts(target)['embed']
    with pytest.raises(ValueError, match='resid_layers is needed'): save_draft(d0, tmp_path/'x', format='speculators')
    save_draft(d0, tmp_path/'s', format='speculators', verifier=target_dir, resid_layers=[2, 3, 4])
    c = json.loads((tmp_path/'s'/'config.json').read_text())
    assert (c['speculators_model_type'], c['architectures'], c['eagle_aux_hidden_state_layer_ids'], c['norm_output'], c['draft_vocab_size']) == \
           ('eagle3', ['Eagle3DraftModel'], [2, 3, 4], False, DV)   # SpecForge's default norm_output (normed logits) is speculators' plain EAGLE-3
    assert c['speculators_config']['verifier'] == {'name_or_path': str(target_dir), 'architectures': ['LlamaForCausalLM']}
    tl = c['transformer_layer_config']
    assert {k: tl[k] for k in ('model_type', 'hidden_size', 'num_attention_heads', 'num_key_value_heads', 'head_dim', 'vocab_size')} == \
           dict(model_type='llama', hidden_size=H, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, vocab_size=V)
    sd = load_file(tmp_path/'s'/'model.safetensors')
    want = {k: tuple(v.shape) for k, v in _speculators_weights().items()}   # the names and shapes speculators builds
    assert {k: tuple(v.shape) for k, v in sd.items()} == want
    d, rep = load_draft(tmp_path/'s', target=target)
    feats, ids, _ = _inputs()
    with torch.no_grad():
        for a, b in zip(ttt_forward(d, feats, ids, 3), ttt_forward(d0, feats, ids, 3)): assert torch.equal(a, b)

def test_save_speculators_refuses_what_it_cannot_express(tmp_path, target):
    for cfg, trainer, says in [(tiny_draft_config(target_hidden=64), 'specforge', 'target_hidden_size=64 != hidden_size=32'),
                               (tiny_draft_config(bias=True), 'specforge', "fc has a bias"),
                               (tiny_draft_config(norm_output=False), 'specforge', "logits come from the un-normed hidden state"),
                               (tiny_draft_config(), 'modelopt', "norms the first layer's hidden state twice")]:
        d = Eagle3Draft(DraftConfig.from_dict(cfg, trainer=trainer))
        with pytest.raises(ValueError, match=says): save_draft(d, tmp_path/'x', format='speculators', resid_layers=[2, 3, 4])
    assert not (tmp_path/'x').exists()   # refused before any file is written

def _spec_venv():
    return pytest.importorskip('speculators', reason='speculators 0.9.0 not installed (see the module docstring)')

def test_speculators_itself_loads_our_save(tmp_path, target, target_dir):
    _spec_venv()
    from speculators import SpeculatorModel
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    feats, ids, _ = _inputs(9)
    for name, cfg, trainer, resid in [('plain', tiny_draft_config(), 'specforge', [2, 3, 4]),
                                      ('eagle31', tiny_draft_config(norm_output=True, fc_norm=True), 'speculators', [2, 3, 4]),
                                      ('qwen3', tiny_draft_config(model_type='qwen3', num_hidden_layers=2, norm_before_fc=True), 'speculators', [1, 3, 5])]:
        torch.manual_seed(0)
        d = Eagle3Draft(DraftConfig.from_dict(cfg, trainer=trainer))
        for n, p in d.named_parameters(): torch.nn.init.normal_(p, 1.0 if 'norm' in n else 0.0, 0.2)
        keep = torch.randperm(V)[:DV].sort().values; d.d2t.copy_(keep - torch.arange(DV)); d.t2d[keep] = True
        d.embed_tokens = target_parts(target)['embed']
        save_draft(d, tmp_path/name, format='speculators', verifier=target_dir, resid_layers=resid)
        sc = Eagle3SpeculatorConfig.from_pretrained(tmp_path/name); sc.transformer_layer_config._attn_implementation = 'eager'
        m = SpeculatorModel.from_pretrained(str(tmp_path/name), config=sc).eval()
        got = []
        m.lm_head.register_forward_hook(lambda mod, i, o: got.append(o))
        with torch.no_grad():
            m(hidden_states=feats, input_ids=F.pad(ids[:, 1:], (0, 1)), document_ids=torch.zeros_like(ids), position_ids=torch.arange(9)[None], ttt_steps=3)
            ours = ttt_forward(d, feats, ids, 3)
        for a, b in zip(got, ours): torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

def test_speculators_itself_saves_what_we_load(tmp_path, target, target_dir):
    _spec_venv()
    from transformers import LlamaConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    feats, ids, _ = _inputs(9)
    tl = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=64, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, num_hidden_layers=1)
    sc = Eagle3SpeculatorConfig(transformer_layer_config=tl, draft_vocab_size=DV, eagle_aux_hidden_state_layer_ids=[2, 3, 4], norm_output=True,
                                speculators_config=SpeculatorsConfig(algorithm='eagle3', proposal_methods=[GreedyTokenProposalConfig()],
                                                                     default_proposal_method='greedy', verifier=VerifierConfig.from_pretrained(str(target_dir))))
    sc.transformer_layer_config._attn_implementation = 'eager'
    torch.manual_seed(0)
    m = Eagle3DraftModel(sc)
    keep = torch.randperm(V)[:DV].sort().values
    m.load_vocab_mappings(torch.zeros(V, dtype=torch.bool).index_fill_(0, keep, True), keep - torch.arange(DV))
    for n, p in m.named_parameters():
        if not n.startswith('verifier'): torch.nn.init.normal_(p, 1.0 if 'norm' in n else 0.0, 0.2)
    got = []
    m.lm_head.register_forward_hook(lambda mod, i, o: got.append(o))
    with torch.no_grad(): m.eval()(hidden_states=feats, input_ids=F.pad(ids[:, 1:], (0, 1)), document_ids=torch.zeros_like(ids), position_ids=torch.arange(9)[None], ttt_steps=3)
    m.save_pretrained(str(tmp_path/'theirs'))
    d, rep = load_draft(tmp_path/'theirs', target=target)
    assert rep.trainer == 'speculators' and rep.unknown_keys == []
    with torch.no_grad():
        for a, b in zip(got, ttt_forward(d, feats, ids, 3)): torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)

# ---- provenance -------------------------------------------------------------------------------------------------
MID, LAY = ['fc.weight', 'midlayer.hidden_norm.weight', 'd2t', 't2d'], ['fc.weight', 'layers.0.hidden_norm.weight', 'd2t']
MO_EC = dict(eagle_aux_hidden_state_layer_ids=[1, 2, 3], use_aux_hidden_state=True, use_input_layernorm_in_first_layer=True,
             use_last_layernorm=True, use_mtp_layernorm=False, next_layer_regular=True, parallel_draft_step=1, parallel_draft_heads_num_layers=1)

@pytest.mark.parametrize('config,keys,files,trainer,fmt', [
    (tiny_draft_config(), MID, (), 'specforge', 'sglang'),
    (tiny_draft_config(), LAY + ['t2d', 'layers.1.mlp.up_proj.weight'], (), 'specforge', 'sglang'),     # newer SGLang spelling
    (SPEC_CFG, LAY + ['t2d', 'input_norm.weight'], (), 'speculators', 'speculators'),
    ({'architectures': ['Eagle3Speculator'], 'speculators_model_type': 'eagle3'}, LAY, (), 'speculators', 'speculators'),
    ({**tiny_draft_config(), 'eagle_config': MO_EC}, LAY, (), 'modelopt', 'modelopt'),                   # hf_spec_configs.py template
    (tiny_draft_config(), LAY + ['parallel_draft_heads.0.medusa_layers.0.linear.weight'], (), 'modelopt', 'modelopt'),
    ({'architectures': ['Eagle3LlamaForCausalLM'], 'target_model_type': 'qwen3'}, MID, (), 'angelslim', 'sglang'),   # AngelSlim configs
    (tiny_draft_config(), ['model.layers.0.self_attn.qkv_proj.weight', 'draft_id_to_target_id'], (), 'vllm', 'vllm'),
    ({'architectures': ['LlamaForCausalLM'], 'draft_vocab_size': 32000}, MID, ['pytorch_model.bin'], 'eagle', 'eagle'),  # EAGLE traineagle3/config.json
    ({'architectures': ['LlamaForCausalLM']}, MID, (), 'eagle', 'sglang'),
    (tiny_draft_config(), MID, ['pytorch_model.bin'], 'specforge', 'eagle'),
])
def test_provenance(config, keys, files, trainer, fmt):
    p = detect_provenance(config, keys, files)
    assert (p.trainer, p.format) == (trainer, fmt), p.evidence
    assert p.evidence and '\n' not in p.evidence

# ---- ModelOpt ---------------------------------------------------------------------------------------------------
def _modelopt_dir(path, ec=MO_EC, drop=('t2d',), add=None, cfg=None):
    "A draft as ModelOpt's EagleExporter writes it (hf_spec_export.py @a2fbac7): layers.0.*, d2t and no t2d."
    cfg = cfg or tiny_draft_config()
    path.mkdir(parents=True); (path/'config.json').write_text(json.dumps({**cfg, 'eagle_config': ec}))
    sd = {('layers.0.' + k[9:] if k.startswith('midlayer.') else k): v for k, v in random_draft(cfg, 5).state_dict().items() if k not in drop}
    save_file({**sd, **(add or {})}, path/'model.safetensors')
    return path

def test_modelopt_export(tmp_path, target):
    d, rep = load_draft(_modelopt_dir(tmp_path/'mo'), target=target)
    assert (rep.trainer, rep.vocab_map) == ('modelopt', 'derived')
    assert torch.equal(d.t2d, random_draft(tiny_draft_config(), 5).t2d)   # t2d derived from d2t: the same set
    d, rep = load_draft(_modelopt_dir(tmp_path/'nonorm', {**MO_EC, 'use_last_layernorm': False}, drop=('t2d', 'norm.weight')), target=target)
    assert not d.config.has_norm and rep.unknown_keys == []
    full = tiny_draft_config(draft_vocab=V)
    d, rep = load_draft(_modelopt_dir(tmp_path/'headless', drop=('t2d', 'lm_head.weight'), cfg=full), target=target)
    assert rep.lm_head == 'target' and d.lm_head.weight is target.lm_head.weight
    for ec, add, says in [({**MO_EC, 'use_input_layernorm_in_first_layer': False}, None, 'eagle_config.use_input_layernorm_in_first_layer=false'),
                          ({**MO_EC, 'use_mtp_layernorm': True}, None, 'eagle_config.use_mtp_layernorm=true'),
                          ({**MO_EC, 'parallel_draft_step': 2}, None, 'eagle_config.parallel_draft_step=2'),
                          (MO_EC, {'parallel_draft_heads.0.medusa_layers.0.linear.weight': torch.zeros(H, H)}, r'parallel-draft heads \(parallel_draft_heads\.0')]:
        p = _modelopt_dir(tmp_path/f'bad{len(list(tmp_path.iterdir()))}', ec, add=add)
        with pytest.raises(ModelLoadError, match=says): load_draft(p, target=target)

# ---- FP8 weights ------------------------------------------------------------------------------------------------
def _blockwise(w, b0, b1):
    "DeepSeek-V3's FP8 recipe: one float32 scale per [b0, b1] block (absmax / 448), fp8 = w / scale; and the scale spread per element."
    out, inp = w.shape
    s = torch.tensor([[float(w[i:i+b0, j:j+b1].abs().max()) / 448 for j in range(0, inp, b1)] for i in range(0, out, b0)])
    full = torch.kron(s, torch.ones(b0, b1))[:out, :inp]
    return (w / full).to(torch.float8_e4m3fn), s, full

def test_fp8_block_scaled_checkpoint(tmp_path, target):
    "weight_scale_inv [ceil(out/b0), ceil(in/b1)], W = fp8 * scale per block (transformers finegrained_fp8._dequantize_fp8_weight)."
    cfg, sd, want = tiny_draft_config(), {}, {}
    for k, v in random_draft(tiny_draft_config(), 5).state_dict().items():
        if v.dim() == 2 and k.startswith(('midlayer.', 'fc.')):
            q, s, full = _blockwise(v, 16, 24)   # ragged blocks on purpose
            sd[k], sd[k + '_scale_inv'], want[k] = q, s, q.float() * full
        else: sd[k] = v
    tmp_path.joinpath('config.json').write_text(json.dumps({**cfg, 'quantization_config': {'quant_method': 'fp8', 'weight_block_size': [16, 24]}}))
    save_file(sd, tmp_path/'model.safetensors')
    d, rep = load_draft(tmp_path, target=target, dtype=torch.float64)
    assert rep.unknown_keys == [] and rep.quantization.startswith(f'dequantized {len(want)} FP8 weights')
    for k, v in want.items(): assert torch.equal(d.state_dict()[k], v.double()), k
    tmp_path.joinpath('config.json').write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match='a block grid, but config.json has no quantization_config.weight_block_size'): load_draft(tmp_path, target)

def test_fp8_per_tensor_and_per_channel():
    "ModelOpt FP8: weight / scale stored (quant_utils.to_quantized_weight); FP8_PC_PT and compressed-tensors' channel strategy: one scale per row."
    w = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))
    s, sc = torch.tensor(0.01), torch.rand(6, 1) + 0.01
    qt, qc = (w / s).to(torch.float8_e4m3fn), (w / sc).to(torch.float8_e4m3fn)
    got, note = dequantize({'a.weight': qt, 'a.weight_scale': s, 'b.weight': qc, 'b.weight_scale': sc.flatten()}, {})
    assert torch.equal(got['a.weight'], qt.float() * 0.01) and note.startswith('dequantized 2 FP8 weights')
    assert torch.equal(got['b.weight'], torch.stack([qc[i].float() * float(sc[i]) for i in range(6)]))
    with pytest.warns(UserWarning, match='activation/KV-cache scales not used'):
        got, note = dequantize({'a.weight': qt, 'a.weight_scale': s, 'a.input_scale': s, 'a.k_scale': s}, {}, 'm')
    assert set(got) == {'a.weight'} and 'a.input_scale' in note
    for bad, says in [({'a.weight': qt}, 'm: a.weight is torch.float8_e4m3fn with no weight_scale or weight_scale_inv'),
                      ({'a.weight': w, 'a.weight_scale': s}, 'm: a.weight_scale scales a.weight, which is torch.float32'),
                      ({'a.weight': qt, 'a.weight_scale': torch.ones(4)}, r'm: a.weight_scale has shape \(4,\) for a weight of shape \(6, 10\)'),
                      ({'a.weight_packed': qt, 'a.weight_scale': s}, 'm: a.weight_packed: quantization with weight_packed is not supported'),
                      ({'a.weight_scale': s}, 'm: a.weight_scale scales a.weight, which the checkpoint does not have')]:
        with pytest.raises(ModelLoadError, match=says): dequantize(bad, {}, 'm')

# ---- training dumps ---------------------------------------------------------------------------------------------
def test_speculators_dump(tmp_path):
    """hs_{i}.safetensors: token_ids [T], hidden_states [T, L, H] in ascending layer order, the last slice the verifier's last
    hidden state (speculators train/data.py: features = hidden_states[:, :-1].flatten(1)); FP8 files carry per-token scales."""
    T, L, Hd = 4, 4, 3
    hs = torch.tensor([[[64. * t + 8 * l + j for j in range(Hd)] for l in range(L)] for t in range(T)])   # integers < 256: exact in bf16
    (tmp_path/'hidden_states').mkdir()
    save_file({'token_ids': torch.tensor([9, 8, 7, 6]), 'hidden_states': hs.bfloat16()}, tmp_path/'hidden_states'/'hs_2.safetensors')
    scale = hs.abs().amax((1, 2), keepdim=True) / 448
    save_file({'token_ids': torch.arange(T), 'hidden_states': (hs / scale).to(torch.float8_e4m3fn), 'hidden_states_scales': scale},
              tmp_path/'hidden_states'/'hs_11.safetensors')
    save_file({'token_ids': torch.arange(T), 'hidden_states': hs.reshape(T, -1)}, tmp_path/'hidden_states'/'hs_30.safetensors')
    samples, problems = read_dump(tmp_path)
    assert dump_format(tmp_path) == 'speculators' and [s['file'].rsplit('/', 1)[1] for s in samples] == ['hs_2.safetensors', 'hs_11.safetensors']
    golden = torch.tensor([[0., 1, 2, 8, 9, 10, 16, 17, 18], [64, 65, 66, 72, 73, 74, 80, 81, 82],      # slices 0, 1, 2 of each token;
                           [128, 129, 130, 136, 137, 138, 144, 145, 146], [192, 193, 194, 200, 201, 202, 208, 209, 210]])   # slice 3 dropped
    assert torch.equal(samples[0]['aux'], golden) and torch.equal(samples[0]['input_ids'], torch.tensor([9, 8, 7, 6]))
    assert samples[0]['aux'].dtype == torch.float32 and samples[0]['input_ids'].dtype == torch.long and samples[0]['loss_mask'] is None
    fp8 = (hs / scale).to(torch.float8_e4m3fn).float() * scale
    assert torch.equal(samples[1]['aux'], fp8[:, :3].reshape(T, -1))
    assert problems == [f"{tmp_path/'hidden_states'/'hs_30.safetensors'}: ValueError: hidden_states has shape (4, 12), expected [T, layers, hidden]"]
    assert read_speculators_dump(tmp_path/'hidden_states', limit=1)[0][0]['file'].endswith('hs_2.safetensors')

def test_specforge_dump_and_dispatch(tmp_path):
    rows = tmp_path/'sf'/'rows_0-2000'; rows.mkdir(parents=True)
    torch.save(dict(input_ids=torch.tensor([[1, 2, 3]]), loss_mask=torch.tensor([0, 1, 1]), aux_hidden_state=torch.ones(1, 3, 6)), rows/'data_0.ckpt')
    (rows/'data_1.ckpt.gz').write_bytes(gzip.compress((rows/'data_0.ckpt').read_bytes()))
    samples, problems = read_dump(tmp_path/'sf')
    assert problems == [] and len(samples) == 2 and samples[1]['aux'].shape == (3, 6) and samples[0]['loss_mask'].tolist() == [0, 1, 1]
    assert [s['file'] for s in read_specforge_dump(tmp_path/'sf')[0]] == [s['file'] for s in samples] and dump_format(tmp_path/'sf') == 'specforge'
    assert read_dump(tmp_path/'none')[1] == [f"{tmp_path/'none'}: no such folder"]
    assert read_dump(tmp_path)[1][0].startswith(f"{tmp_path}: no training dump found")
