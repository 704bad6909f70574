"""Drafts with N aux layers and several decoder layers, as SGLang 0.5.23 and vLLM 0.32.0 serve them (`llama_eagle3.py` of
each): the fc takes len(eagle_aux_hidden_state_layer_ids) x target hidden features, in chunk order; `num_hidden_layers`
layers, the first over [normed embedding, normed hidden], each later one pre-normed on the residual stream, by
`hidden_norm` in SGLang's file (lines 103-105) and by `input_layernorm` in vLLM's (lines 136-138), the stream normed by
the final norm at the end. The expectations are those files' sums written out here with plain torch: a fused
`norm(x, residual)` is residual = x + residual, then norm(residual)."""
import pytest, torch
from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_prompts
from eagle3_workbench.draft import Eagle3Draft, rope_cos_sin
from eagle3_workbench.draft_config import DraftConfig
from eagle3_workbench.loading import save_draft, load_pair
from eagle3_workbench.engine import run_prompts
from eagle3_workbench.teacher import resid_forward

def _rms(x, w, eps=1e-6): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

def _attn(p, x, cos, sin, nh=4, nkv=2, hd=8):
    "Causal GQA attention with rope (rotate-half), as both engines' LlamaAttention compute it."
    B, T, _ = x.shape
    q, k, v = (x @ p[f'self_attn.{n}_proj.weight'].T for n in 'qkv')
    q, k, v = q.view(B, T, nh, hd).transpose(1, 2), k.view(B, T, nkv, hd).transpose(1, 2), v.view(B, T, nkv, hd).transpose(1, 2)
    rot = lambda t: torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], -1)
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin   # cos, sin: [1, 1, T, hd]
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    s = (q @ k.transpose(-1, -2)) / hd ** 0.5 + torch.full((T, T), float('-inf')).triu(1)
    return (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, nh * hd) @ p['self_attn.o_proj.weight'].T

def _mlp(p, x): return (torch.nn.functional.silu(x @ p['mlp.gate_proj.weight'].T) * (x @ p['mlp.up_proj.weight'].T)) @ p['mlp.down_proj.weight'].T

def _engine_stack(sd, features, embeds, cos, sin, L, later_norm):
    "What `LlamaModel.forward` of the engine's llama_eagle3.py returns for logits (the final norm of the stream)."
    layer = lambda i: {k[len(f'layers.{i}.'):]: v for k, v in sd.items() if k.startswith(f'layers.{i}.')}
    h = features @ sd['fc.weight'].T
    p = layer(0)
    residual, x = h, torch.cat([_rms(embeds, p['input_layernorm.weight']), _rms(h, p['hidden_norm.weight'])], -1)
    for i in range(L):
        if i:
            p = layer(i)
            residual = x + residual; x = _rms(residual, p.get(f'{later_norm}.weight', torch.ones(32)))   # absent: RMSNorm's initial ones
        residual = _attn(p, x, cos, sin) + residual; x = _mlp(p, _rms(residual, p['post_attention_layernorm.weight']))
    return _rms(x + residual, sd['norm.weight'])

@pytest.mark.parametrize('trainer,later_norm', [('specforge', 'hidden_norm'), ('vllm', 'input_layernorm')])
@pytest.mark.parametrize('layers,ids', [(1, [1, 2, 3]), (3, [1, 2, 3]), (2, [0, 1, 3, 4, 5])])
def test_stack_equals_the_engine_file(trainer, later_norm, layers, ids):
    "The draft's logits-side hidden for N aux chunks and L layers is the engine file's sum, with every weight distinct (a norm mixed up shows)."
    cfg = tiny_draft_config(num_hidden_layers=layers, eagle_config=dict(eagle_aux_hidden_state_layer_ids=ids, use_aux_hidden_state=True))
    c = DraftConfig.from_dict(cfg, trainer=trainer)
    assert (c.num_aux, c.fc_in_features, c.num_hidden_layers) == (len(ids), 32 * len(ids), layers)
    torch.manual_seed(0)
    d = Eagle3Draft(c)
    for p in d.parameters(): torch.nn.init.normal_(p, mean=1.0 if p.dim() == 1 else 0.0, std=0.3)   # norms far from 1 and from each other
    d.embed_tokens = torch.nn.Embedding(96, 32)
    sd = {('layers.0.' + k[9:] if k.startswith('midlayer.') else k): v for k, v in d.state_dict().items()}   # the engines' names
    assert all(f'layers.{i}.{later_norm}.weight' in sd for i in range(layers))
    ids_in, pos = torch.randint(0, 96, (1, 7)), torch.arange(7)[None]
    features = torch.randn(1, 7, c.fc_in_features)
    cos, sin = rope_cos_sin(pos, 8, 10000.0)
    with torch.no_grad():
        want = _engine_stack(sd, features, d.embed_tokens(ids_in), cos, sin, layers, later_norm)
        got = d.norm(d.layer(d.project(features), ids_in, pos))
        other = _engine_stack(sd, features, d.embed_tokens(ids_in), cos, sin, layers, 'hidden_norm' if later_norm == 'input_layernorm' else 'input_layernorm')
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if layers > 1: assert not torch.allclose(got, other, atol=1e-3)   # the other engine's norm (SGLang's, unloaded: ones) computes another draft

@pytest.fixture(scope='module')
def target(tmp_path_factory):
    return save_tiny_target(tmp_path_factory.mktemp('t')/'llama', 'llama')

@pytest.mark.parametrize('ids', [[0, 1, 3, 4], [0, 1, 2, 3, 4]])
def test_n_aux_draft_is_fed_n_states_and_runs_lossless(target, tmp_path, ids):
    "A draft with 4 or 5 aux ids: SGLang's reading (+1) wires that many resid[k], fc reads their concatenation in order, the run is lossless."
    from eagle3_workbench.testing import random_draft
    cfg = tiny_draft_config(draft_vocab=96, eagle_config=dict(eagle_aux_hidden_state_layer_ids=ids, use_aux_hidden_state=True))
    save_draft(random_draft(cfg), tmp_path/'d', cfg)
    pair = load_pair(str(target), str(tmp_path/'d'))
    assert pair.wiring.resid_layers == tuple(k + 1 for k in ids) and pair.draft.fc.in_features == 32 * len(ids)
    x = torch.tensor([random_prompts(1, 96, 9, seed=2)[0]])
    with torch.no_grad():
        _, states = resid_forward(pair.target, input_ids=x)
        want = torch.cat([states[k + 1] for k in ids], -1) @ pair.draft.fc.weight.T
        from eagle3_workbench.teacher import aux_features
        got = pair.draft.project(aux_features(states, pair.wiring.resid_layers))
    torch.testing.assert_close(got, want)
    rep = run_prompts(pair, random_prompts(2, 96, 10), 12, progress=False)
    assert rep.lossless and rep.summary['cycles'] > 0

def test_sglang_layout_stack_loads_and_a_missing_layer_is_named(target, tmp_path):
    "SGLang's layout with num_hidden_layers 2: `layers.1.*` (hidden_norm included) loads with no unknown key; without layer 1 the config key is named, without its hidden_norm the weight."
    from eagle3_workbench.testing import random_draft
    from eagle3_workbench.draft_config import ModelLoadError
    cfg = tiny_draft_config(num_hidden_layers=2)
    d = random_draft(cfg)
    save_draft(d, tmp_path/'two', cfg)
    pair = load_pair(str(target), str(tmp_path/'two'))
    assert pair.report.trainer == 'specforge' and pair.report.unknown_keys == [] and pair.draft.config.num_hidden_layers == 2
    assert torch.equal(pair.draft.layers['1'].hidden_norm.weight, d.layers['1'].hidden_norm.weight)
    one = tiny_draft_config()
    save_draft(random_draft(one), tmp_path/'one', one)
    (tmp_path/'one'/'config.json').write_text((tmp_path/'two'/'config.json').read_text())   # a config that claims two layers
    with pytest.raises(ModelLoadError, match=r"one/config.json: num_hidden_layers=2 but the checkpoint holds no weights for layers \[1\]"):
        load_pair(str(target), str(tmp_path/'one'))
    two_vllm = tiny_draft_config(num_hidden_layers=2)   # vLLM's stack (no hidden_norm in layer 1) written in SGLang's layout: the one norm SGLang needs is named
    dv = Eagle3Draft(DraftConfig.from_dict(two_vllm, trainer='vllm')); dv.d2t.zero_()
    save_draft(dv, tmp_path/'mixed', two_vllm)
    with pytest.raises(ModelLoadError, match=r"checkpoint lacks \['layers\.1\.hidden_norm\.weight'\]"): load_pair(str(target), str(tmp_path/'mixed'))
