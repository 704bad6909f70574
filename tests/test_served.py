"""served_config / served_draft: for each variant key an engine release ignores or misreads, a planted draft whose
served logits equal a formula written out here of what that release computes (from its source, as cited in the
variants chapter's VARIANT_SUPPORT rows), and releases that honour every key serve the trained draft bitwise."""
import pytest, torch
import torch.nn.functional as F
from eagle3_workbench.testing import modelopt_eagle_config, speculators_example_config, tiny_draft_config
from eagle3_workbench.draft import Eagle3Draft
from eagle3_workbench.variants import as_draft_config, served_config, served_draft, variant_problems

V, H = 96, 32
AUX, IDS, POS = torch.randn(1, 6, 3 * H, generator=torch.Generator().manual_seed(1)), torch.randint(0, V, (1, 6)), torch.arange(6)[None]


def planted(cfg, trainer, seed=0):
    "A draft of `cfg` as `trainer` reads it, every weight random (norm scales and biases too), with its own embedding."
    torch.manual_seed(seed)
    d = Eagle3Draft(as_draft_config(cfg, trainer))
    d.embed_tokens = torch.nn.Embedding(V, H)
    for p in [*d.parameters(), d.embed_tokens.weight]: torch.nn.init.normal_(p, std=0.3)
    return d.eval()


def rms(x, w, eps=1e-6): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def first_layer(d, hidden, residual_normed):
    "The first decoder layer written out: attention over [norm(embedding), hidden_norm(hidden)], the residual where the engine keeps it."
    m = d.midlayer
    cos, sin = d.rope(POS, hidden.dtype)
    h = rms(hidden, m.hidden_norm.weight)
    e = rms(d.embed_tokens(IDS), m.input_layernorm.weight)
    x = (h if residual_normed else hidden) + m.self_attn(torch.cat([e, h], -1), cos, sin)
    return x + m.mlp(rms(x, m.post_attention_layernorm.weight))


def served_logits(d, engine):
    s, changes = served_draft(d, engine)
    with torch.no_grad(): h, logits = s(AUX, IDS, POS)
    return s, changes, h, logits


def close(a, b): return torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_fc_norm_ignored():
    d = planted(tiny_draft_config(fc_norm=True), 'specforge')   # SGLang 0.5.6: no fc_norm module, fc_norm.* skipped
    s, ch, h, logits = served_logits(d, 'sglang==0.5.6')
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, False)
    assert close(h, x) and close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T)
    assert not hasattr(s, 'fc_norm') and [c.split(':')[0] for c in ch] == ['fc_norm']


def test_specforge_norm_output_read_as_eagle31():
    d = planted(tiny_draft_config(norm_output=True), 'specforge')   # SGLang 0.5.23 feeds norm(h) on
    s, ch, h, logits = served_logits(d, 'sglang')
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, False)
    assert close(h, rms(x, d.norm.weight)) and close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T)
    assert (s.config.trainer, s.config.norm_output_meaning) == ('specforge', '3.1')
    with torch.no_grad(): assert not close(d(AUX, IDS, POS)[0], h)   # the trained draft feeds the pre-norm state


def test_specforge_raw_logits_normed_by_engine():
    d = planted(tiny_draft_config(norm_output=False), 'specforge')   # trained: lm_head(h); vLLM 0.32: logits from norm(h) always
    _, ch, h, logits = served_logits(d, 'vllm')
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, False)
    assert close(h, x) and close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T) and [c.split(':')[0] for c in ch] == ['norm_output']


def test_norm_before_fc_ignored():
    cfg = {**speculators_example_config(), 'norm_before_fc': True}   # TensorRT-LLM reads eagle_config.norm_before_fc only
    d = planted(cfg, 'speculators')
    s, ch, h, logits = served_logits(d, 'trtllm')
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, False)
    assert close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T) and not hasattr(s, 'input_norm')


@pytest.mark.parametrize('written, engine, normed', [
    (True, 'trtllm', False),    # modeling_speculative.py does not read norm_before_residual
    (None, 'vllm', True),       # vLLM's adapter: absent -> true; speculators trained with its default false
])
def test_norm_before_residual(written, engine, normed):
    cfg = speculators_example_config()
    if written is None: del cfg['norm_before_residual']
    else: cfg['norm_before_residual'] = written
    d = planted(cfg, 'speculators')
    assert d.config.norm_before_residual == bool(written)
    _, ch, h, logits = served_logits(d, engine)
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, normed)
    assert close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T) and [c.split(':')[0] for c in ch] == ['norm_before_residual']


def test_fc_bias_ignored():
    d = planted(tiny_draft_config(bias=True), 'specforge')   # vLLM builds fc with bias=False
    s, ch, h, logits = served_logits(d, 'vllm')
    with torch.no_grad(): x = first_layer(d, F.linear(AUX, d.fc.weight), False)
    assert close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T) and s.fc.bias is None


def test_only_the_first_layer():
    cfg = speculators_example_config()
    cfg['transformer_layer_config']['num_hidden_layers'] = 2   # vLLM 0.10.1 builds a single LlamaDecoderLayer
    d = planted(cfg, 'speculators')
    s, ch, h, logits = served_logits(d, 'vllm==0.10.1')
    with torch.no_grad(): x = first_layer(d, AUX @ d.fc.weight.T, False)
    assert close(logits, rms(x, d.norm.weight) @ d.lm_head.weight.T) and not hasattr(s, 'layers') and s.config.num_hidden_layers == 1
    with torch.no_grad(): assert not close(d(AUX, IDS, POS)[1], logits)


def test_tie_ignored():
    d = planted(tiny_draft_config(tie_word_embeddings=True, draft_vocab_size=V), 'specforge')   # vLLM: its own ParallelLMHead
    s, ch, h, logits = served_logits(d, 'vllm')
    assert s.lm_head.weight is not d.embed_tokens.weight and 'lm_head.weight' in ch[-1]
    with torch.no_grad(): assert close(logits, rms(first_layer(d, AUX @ d.fc.weight.T, False), d.norm.weight) @ s.lm_head.weight.T)


def test_modelopt_last_layernorm():
    ec = {**modelopt_eagle_config(), 'use_last_layernorm': False}   # SGLang's draft always has a final norm: no trained scale -> ones
    d = planted(tiny_draft_config(eagle_config=ec), 'modelopt')
    assert not hasattr(d, 'norm')
    s, ch, h, logits = served_logits(d, 'sglang')
    m = d.midlayer
    with torch.no_grad():   # ModelOpt's first layer norms the hidden twice; that part is the trained math, kept
        cos, sin = d.rope(POS, AUX.dtype)
        hid = AUX @ d.fc.weight.T
        hh = rms(rms(hid, m.input_layernorm.weight), m.hidden_norm.weight)
        x = hid + m.self_attn(torch.cat([rms(d.embed_tokens(IDS), m.input_layernorm.weight), hh], -1), cos, sin)
        x = x + m.mlp(rms(x, m.post_attention_layernorm.weight))
    assert close(logits, rms(x, 1.0) @ d.lm_head.weight.T) and 'norm.weight' in ch[-1]


def test_refused_and_unloadable():
    c = as_draft_config(tiny_draft_config(num_hidden_layers=2), 'vllm')
    with pytest.raises(ValueError, match='a refusal to load.*only supports 1 layer'): served_config(c, 'sglang==0.5.6')
    with pytest.raises(ValueError, match='cannot load a speculators-format draft'):
        served_config(as_draft_config(speculators_example_config(), 'speculators'), 'sglang')


@pytest.mark.parametrize('cfg, trainer, engine', [
    ({**speculators_example_config(), 'fc_norm': True, 'norm_output': True, 'norm_before_residual': True}, 'speculators', 'vllm'),
    (tiny_draft_config(fc_norm=True), 'specforge', 'sglang'),                     # SpecForge's default norm_output is the plain math
    (tiny_draft_config(norm_output=True, fc_norm=True), 'speculators', 'trtllm'),
    (tiny_draft_config(norm_before_fc=True, norm_before_residual=True, num_hidden_layers=2), 'vllm', 'vllm'),
])
def test_honoured_release_serves_the_trained_draft(cfg, trainer, engine):
    if trainer == 'speculators' and 'transformer_layer_config' in cfg: cfg['transformer_layer_config']['num_hidden_layers'] = 2
    d = planted(cfg, trainer)
    assert variant_problems(d.config, engine=engine) == []
    s, ch = served_draft(d, engine)
    assert ch == [] and s is not d and s.config == d.config
    with torch.no_grad(): assert all(torch.equal(a, b) for a, b in zip(s(AUX, IDS, POS), d(AUX, IDS, POS)))
    sd = dict(s.named_parameters())
    assert all(sd[k] is p for k, p in d.named_parameters())   # the same tensors, not copies
