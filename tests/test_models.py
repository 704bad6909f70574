"Loading targets and drafts: every architecture, every checkpoint format, every bad input."
import json, math, pickle, shutil, struct, warnings
from pathlib import Path
import pytest, torch
from conftest import save_tiny_target, tiny_draft_config, random_draft, FIXTURES
from eagle3_workbench.models import (load_target, load_draft, save_draft, load_pair, target_parts, DraftConfig,
                                     Eagle3Draft, ModelLoadError, DraftCache)

ARCHS = ['llama', 'qwen2', 'qwen3', 'deepseek_v3']

@pytest.mark.parametrize('arch', ARCHS)
def test_target_loads_on_real_module_tree(tmp_path, arch):
    from transformers import AutoModelForCausalLM
    p = save_tiny_target(tmp_path/arch, arch)
    model, tok = load_target(p)
    assert type(model).__module__.startswith('transformers.models.')  # transformers' own class, not ours
    parts = target_parts(model)
    assert len(parts['layers']) == 6 and parts['embed'].weight.shape == (96, 32)
    ids = torch.randint(0, 96, (1, 9))
    ref = AutoModelForCausalLM.from_pretrained(p, attn_implementation='eager').eval()
    with torch.no_grad(): torch.testing.assert_close(model(input_ids=ids).logits, ref(input_ids=ids).logits)
    assert tok is None  # no tokenizer files were written

def test_target_sharded_and_dtype(tmp_path):
    from transformers import AutoModelForCausalLM
    p = save_tiny_target(tmp_path/'t', 'llama')
    m = AutoModelForCausalLM.from_pretrained(p)
    m.save_pretrained(tmp_path/'sharded', max_shard_size='20KB')
    assert (tmp_path/'sharded'/'model.safetensors.index.json').exists()
    model, _ = load_target(tmp_path/'sharded', dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    torch.testing.assert_close(target_parts(model)['embed'].weight.float(), m.model.embed_tokens.weight.bfloat16().float())

def _draft_dir(tmp_path, cfg, fmt='sglang', seed=0, name='draft'):
    d = random_draft(cfg, seed)
    save_draft(d, tmp_path/name, cfg, format=fmt)
    return d, tmp_path/name

def _draft_inputs(cfg, T=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    n_aux = 3
    th = cfg.get('target_hidden_size', cfg['hidden_size'])
    return torch.randn(1, T, n_aux*th, generator=g), torch.randint(0, cfg['vocab_size'], (1, T), generator=g), torch.arange(T)[None]

def test_draft_forward_identical_in_every_format(tmp_path, llama_dir):
    target, _ = load_target(llama_dir)
    cfg = tiny_draft_config()
    outs = {}
    for fmt in ('sglang', 'eagle', 'vllm'):
        _, p = _draft_dir(tmp_path, cfg, fmt, name=fmt)
        d, rep = load_draft(p, target=target)
        assert rep.format == fmt and rep.embedding == 'target' and rep.unknown_keys == []
        feats, ids, pos = _draft_inputs(cfg)
        with torch.no_grad(): outs[fmt] = d(feats, ids, pos)[1]
    assert (tmp_path/'eagle'/'pytorch_model.bin').exists()
    keys = set(__import__('safetensors.torch', fromlist=['load_file']).load_file(tmp_path/'vllm'/'model.safetensors'))
    assert 'model.layers.0.self_attn.qkv_proj.weight' in keys and 'draft_id_to_target_id' in keys
    assert torch.equal(outs['sglang'], outs['eagle']) and torch.equal(outs['sglang'], outs['vllm'])

def _rms(x, w, eps=1e-6): return x / torch.sqrt((x*x).mean(-1, keepdim=True) + eps) * w

def _reference_draft(sd, emb, cfg, feats, ids):
    "Reference §3 written out plainly from the weights: fc, midlayer, norm, lm_head (no module code reused)."
    H, nh, nkv, hd = cfg['hidden_size'], cfg['num_attention_heads'], cfg['num_key_value_heads'], cfg['head_dim']
    T = ids.shape[1]
    x = feats[0] @ sd['fc.weight'].T                          # [T, H]
    e = emb[ids[0]]                                           # target embedding of the next tokens
    h = _rms(x, sd['midlayer.hidden_norm.weight'])
    en = _rms(e, sd['midlayer.input_layernorm.weight'])
    inp = torch.cat([en, h], -1)                              # embedding first
    q = (inp @ sd['midlayer.self_attn.q_proj.weight'].T).view(T, nh, hd)
    k = (inp @ sd['midlayer.self_attn.k_proj.weight'].T).view(T, nkv, hd)
    v = (inp @ sd['midlayer.self_attn.v_proj.weight'].T).view(T, nkv, hd)
    def rope(t):  # rotate pairs (i, i + hd/2) by angle pos * theta^(-2i/hd)
        out = t.clone()
        for pos in range(T):
            for i in range(hd // 2):
                a = pos * cfg['rope_theta'] ** (-2 * i / hd)
                x1, x2 = t[pos, :, i], t[pos, :, i + hd//2]
                out[pos, :, i], out[pos, :, i + hd//2] = x1*math.cos(a) - x2*math.sin(a), x2*math.cos(a) + x1*math.sin(a)
        return out
    q, k = rope(q), rope(k)
    att = torch.zeros(T, nh, hd)
    for head in range(nh):
        kvh = head // (nh // nkv)
        s = q[:, head] @ k[:, kvh].T / math.sqrt(hd)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float('-inf'))
        att[:, head] = s.softmax(-1) @ v[:, kvh]
    x = x + att.reshape(T, nh*hd) @ sd['midlayer.self_attn.o_proj.weight'].T
    m = _rms(x, sd['midlayer.post_attention_layernorm.weight'])
    g, u = m @ sd['midlayer.mlp.gate_proj.weight'].T, m @ sd['midlayer.mlp.up_proj.weight'].T
    x = x + (g * torch.sigmoid(g) * u) @ sd['midlayer.mlp.down_proj.weight'].T
    return x, _rms(x, sd['norm.weight']) @ sd['lm_head.weight'].T

def test_draft_matches_plain_reference_math(tmp_path, llama_dir):
    target, _ = load_target(llama_dir)
    cfg = tiny_draft_config()
    _, p = _draft_dir(tmp_path, cfg)
    d, _ = load_draft(p, target=target)
    feats, ids, pos = _draft_inputs(cfg)
    with torch.no_grad():
        h, logits = d(feats, ids, pos)
        from safetensors.torch import load_file
        rh, rl = _reference_draft(load_file(p/'model.safetensors'), target_parts(target)['embed'].weight, cfg, feats, ids)
    torch.testing.assert_close(h[0], rh, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[0], rl, atol=1e-4, rtol=1e-4)

def test_cache_steps_equal_full_pass(tmp_path, llama_dir):
    "Feeding positions one at a time through the KV cache gives the same outputs as one causal pass."
    target, _ = load_target(llama_dir)
    _, p = _draft_dir(tmp_path, tiny_draft_config())
    d, _ = load_draft(p, target=target)
    feats, ids, pos = _draft_inputs(tiny_draft_config())
    with torch.no_grad():
        full = d(feats, ids, pos)[1]
        cache = DraftCache()
        steps = [d(feats[:, t:t+1], ids[:, t:t+1], pos[:, t:t+1], cache)[1] for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    cache.crop(3); assert len(cache) == 3

def test_draft_variants_load(tmp_path, llama_dir):
    target, _ = load_target(llama_dir)
    for name, cfg in {'fc_norm': tiny_draft_config(fc_norm=True, norm_output=True),
                      'wide_target': tiny_draft_config(hidden=16, target_hidden=32, head_dim=4),
                      'norm_before_residual': tiny_draft_config(norm_before_residual=True)}.items():
        d0, p = _draft_dir(tmp_path, cfg, name=name)
        if name == 'wide_target':  # a draft narrower than the target brings its own embedding
            save_draft(d0, p, cfg)
            from safetensors.torch import load_file, save_file
            sd = load_file(p/'model.safetensors'); sd['embed_tokens.weight'] = torch.randn(96, 16); save_file(sd, p/'model.safetensors')
        d, rep = load_draft(p, target=target)
        assert d.fc.in_features == 3 * 32
        assert (name == 'fc_norm') == hasattr(d, 'fc_norm')
        feats, ids, pos = _draft_inputs(cfg)
        with torch.no_grad(): h, logits = d(feats, ids, pos)
        assert logits.shape == (1, 7, 48) and torch.isfinite(logits).all()

def test_real_configs_parse_and_build_scaled_down():
    "Every public config parses; scaled down, each builds a draft whose fc takes 3 x target hidden."
    for f in sorted((FIXTURES/'draft-configs').glob('*.json')):
        raw = json.loads(f.read_text())
        c = DraftConfig.from_dict(raw, source=f.name)
        assert c.fc_in_features == 3 * c.target_hidden_size and c.head_dim > 0
        small = {**raw, 'hidden_size': 64, 'intermediate_size': 96, 'vocab_size': 512, 'draft_vocab_size': 128,
                 'num_attention_heads': 4, 'num_key_value_heads': min(4, raw.get('num_key_value_heads', 4)), 'head_dim': 16}
        d = Eagle3Draft(DraftConfig.from_dict(small))
        assert d.fc.weight.shape == (64, 192) and d.lm_head.weight.shape == (128, 64)
    q = DraftConfig.from_dict(json.loads((FIXTURES/'draft-configs'/'specforge-qwen3-30B-A3B-eagle3.1.json').read_text()))
    assert q.fc_norm and q.norm_output and q.head_dim == 128
    l = DraftConfig.from_dict(json.loads((FIXTURES/'draft-configs'/'specforge-llama3-8B-eagle3.json').read_text()))
    assert l.rope_theta == 10000.0 and not l.rope_theta_given

# ---- bad input: a clear error naming the file or key, nothing half-loaded ----

def test_missing_and_malformed_config(tmp_path):
    (tmp_path/'empty').mkdir()
    with pytest.raises(ModelLoadError, match='no config.json'): load_target(tmp_path/'empty')
    (tmp_path/'bad').mkdir(); (tmp_path/'bad'/'config.json').write_text('{"model_type": "llama",')
    with pytest.raises(ModelLoadError, match=r'bad/config.json: not valid JSON'): load_target(tmp_path/'bad')
    (tmp_path/'nokey').mkdir(); (tmp_path/'nokey'/'config.json').write_text('{"hidden_size": 4}')
    with pytest.raises(ModelLoadError, match="'model_type' missing"): load_target(tmp_path/'nokey')
    with pytest.raises(ModelLoadError, match='no such model directory'): load_target(tmp_path/'nowhere')

def test_missing_truncated_mismatched_safetensors(tmp_path, llama_dir):
    shutil.copytree(llama_dir, tmp_path/'nowt'); (tmp_path/'nowt'/'model.safetensors').unlink()
    with pytest.raises(ModelLoadError, match='no weights found'): load_target(tmp_path/'nowt')
    shutil.copytree(llama_dir, tmp_path/'trunc')
    f = tmp_path/'trunc'/'model.safetensors'; f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match='model.safetensors: truncated'): load_target(tmp_path/'trunc')
    shutil.copytree(llama_dir, tmp_path/'mism')
    cfg = json.loads((tmp_path/'mism'/'config.json').read_text()); cfg['intermediate_size'] = 80
    (tmp_path/'mism'/'config.json').write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match='do not match config.json'): load_target(tmp_path/'mism')

def test_bad_drafts(tmp_path, llama_dir):
    target, _ = load_target(llama_dir)
    cfg = tiny_draft_config()
    # fc width that is not 3 x target hidden
    d, p = _draft_dir(tmp_path, cfg, name='fcw')
    bad = {**cfg, 'target_hidden_size': 48}; (p/'config.json').write_text(json.dumps(bad))
    with pytest.raises(ModelLoadError, match=r'fc.weight takes 96 inputs, expected 3 aux layers x target hidden size 48 = 144'): load_draft(p, target)
    # d2t / t2d lengths that disagree with the vocab sizes
    from safetensors.torch import load_file, save_file
    d, p = _draft_dir(tmp_path, cfg, name='d2tlen')
    sd = load_file(p/'model.safetensors'); sd['d2t'] = sd['d2t'][:40]; save_file(sd, p/'model.safetensors')
    with pytest.raises(ModelLoadError, match=r'd2t has shape \(40,\), expected \(48,\)'): load_draft(p, target)
    d, p = _draft_dir(tmp_path, cfg, name='t2dlen')
    sd = load_file(p/'model.safetensors'); sd['t2d'] = sd['t2d'][:50]; save_file(sd, p/'model.safetensors')
    with pytest.raises(ModelLoadError, match=r't2d has shape \(50,\), expected \(96,\)'): load_draft(p, target)
    # d2t mapping outside the target vocabulary
    d, p = _draft_dir(tmp_path, cfg, name='d2trange')
    sd = load_file(p/'model.safetensors'); sd['d2t'][-1] = 500; save_file(sd, p/'model.safetensors')
    with pytest.raises(ModelLoadError, match=r'd2t maps draft id 47 to target id 547, outside the target vocabulary \[0, 96\)'): load_draft(p, target)
    # a config key of the wrong type
    d, p = _draft_dir(tmp_path, cfg, name='key')
    (p/'config.json').write_text(json.dumps({**cfg, 'hidden_size': 'big'}))
    with pytest.raises(ModelLoadError, match="key 'hidden_size' must be a positive integer"): load_draft(p, target)

class Evil:
    def __reduce__(self): return (print, ('pwned',))

def test_pickled_code_is_refused(tmp_path, llama_dir, capsys):
    target, _ = load_target(llama_dir)
    d, p = _draft_dir(tmp_path, tiny_draft_config(), fmt='eagle', name='evil')
    sd = torch.load(p/'pytorch_model.bin', weights_only=True); sd['payload'] = Evil()
    torch.save(sd, p/'pytorch_model.bin')
    with pytest.raises(ModelLoadError, match=r'pytorch_model.bin: refused to load.*weights_only=True'): load_draft(p, target)
    assert 'pwned' not in capsys.readouterr().out

def test_unknown_keys_reported_and_missing_vocab_map(tmp_path, llama_dir):
    target, _ = load_target(llama_dir)
    d, p = _draft_dir(tmp_path, tiny_draft_config(), name='extra')
    from safetensors.torch import load_file, save_file
    sd = load_file(p/'model.safetensors'); sd['midlayer.extra_proj.weight'] = torch.zeros(2, 2)
    del sd['d2t'], sd['t2d']; save_file(sd, p/'model.safetensors')
    with pytest.warns(UserWarning, match='not used by the draft'): d, rep = load_draft(p, target)
    assert rep.unknown_keys == ['midlayer.extra_proj.weight'] and rep.vocab_map == 'missing'
    assert int(d.d2t.abs().sum()) == 0   # left all-zero, as the engines would; the doctor reports it
