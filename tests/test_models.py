"""Loading targets and drafts across every architecture, draft variant and public config (the tables); the draft's math, each
checkpoint format and each bad input are tested in the `draft` and `loading` chapters."""
import json
import pytest, torch
from conftest import save_tiny_target, tiny_draft_config, random_draft, FIXTURES
from eagle3_workbench.draft import DraftConfig, Eagle3Draft
from eagle3_workbench.loading import load_target, load_draft, save_draft, target_parts, detect_provenance, flatten_config

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

def _draft_dir(tmp_path, cfg, fmt='sglang', seed=0, name='draft'):
    d = random_draft(cfg, seed)
    save_draft(d, tmp_path/name, cfg, format=fmt)
    return d, tmp_path/name

def _draft_inputs(cfg, T=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    n_aux = 3
    th = cfg.get('target_hidden_size', cfg['hidden_size'])
    return torch.randn(1, T, n_aux*th, generator=g), torch.randint(0, cfg['vocab_size'], (1, T), generator=g), torch.arange(T)[None]

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
    "Every public config parses, in its trainer's layout; scaled down, each builds a draft whose fc takes 3 x target hidden."
    for f in sorted((FIXTURES/'draft-configs').glob('*.json')):
        raw = json.loads(f.read_text())
        p = detect_provenance(raw, [])
        assert p.trainer == ('speculators' if f.name.startswith('speculators') else 'specforge'), (f.name, p)
        flat = flatten_config(raw, p, f.name)
        c = DraftConfig.from_dict(flat, source=f.name, trainer=p.trainer)
        assert c.fc_in_features == 3 * c.target_hidden_size and c.head_dim > 0
        small = {**flat, 'hidden_size': 64, 'intermediate_size': 96, 'vocab_size': 512, 'draft_vocab_size': 128,
                 'num_attention_heads': 4, 'num_key_value_heads': min(4, raw.get('num_key_value_heads', 4)), 'head_dim': 16}
        d = Eagle3Draft(DraftConfig.from_dict(small, trainer=p.trainer))
        assert d.fc.weight.shape == (64, 192) and d.lm_head.weight.shape == (128, 64)

def test_old_addresses_still_work():
    "Code written before the split keeps working: `models` re-exports `draft` and `loading`; `sglang` re-exports `draft_config_edit`."
    from eagle3_workbench import models, draft, loading, conventions, sglang
    from eagle3_workbench.models import load_pair, Eagle3Draft, _unloadable
    assert load_pair is loading.load_pair and Eagle3Draft is draft.Eagle3Draft and _unloadable is loading._unloadable
    assert all(getattr(models, n) in (getattr(draft, n, None), getattr(loading, n, None)) for n in models.__all__)
    from eagle3_workbench.sglang import draft_config_edit, ConfigEdit
    assert draft_config_edit is conventions.draft_config_edit and ConfigEdit is conventions.ConfigEdit
    assert sglang.launch.draft_config_edit is conventions.draft_config_edit
