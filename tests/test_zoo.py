"The shipped zoo loads through the public loaders, its training dump agrees with the draft, and the builder still runs."
import json, math
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file
from eagle3_workbench.loading import load_target, load_draft, load_pair
from eagle3_workbench.formats import resolve_path
from eagle3_workbench.target import zoo_root
from eagle3_workbench.draft_config import ModelLoadError
from eagle3_workbench.wiring import engine_readings
from eagle3_workbench.zoo import (build_offdefault_draft, build_deep_pair, build_gptoss_pair, ZooRecipe, PAIRS, OFFDEFAULT, corpus_files, encode_files,
                                  heldout_windows, teacher_forced_agreement)
from eagle3_workbench.card import build_zoo, zoo_listing
from eagle3_workbench.doctor import read_training_dump

@pytest.mark.parametrize('target', list(PAIRS))
def test_every_zoo_model_loads(target):
    dname = PAIRS[target][0]
    model, tok = load_target(f'zoo:{target}')
    draft, rep = load_draft(f'zoo:{dname}', target=model)
    assert tok is not None and tok.decode(tok('def f(x):\n    return x')['input_ids']) == 'def f(x):\n    return x'
    # the Llama draft is narrower than its target (128 vs 160), so it ships its own embedding
    assert rep.embedding == ('checkpoint' if target == 'tiny-llama' else 'target')
    assert rep.vocab_map == 'checkpoint' and rep.unknown_keys == []
    assert next(model.parameters()).dtype == torch.float32        # bf16 storage, upcast on load
    pair = load_pair(f'zoo:{target}')
    assert pair.draft is not None and pair.wiring.resid_layers == (2, pair.n_layers // 2, pair.n_layers - 3)

def test_zoo_conventions_as_documented():
    dsv3 = json.loads((zoo_root()/'tiny-dsv3-eagle3'/'config.json').read_text())
    assert dsv3['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]          # SpecForge "output of layer"
    llama = json.loads((zoo_root()/'tiny-llama-eagle3'/'config.json').read_text())
    assert llama['eagle_aux_hidden_state_layer_ids'] == [2, 5, 7] and 'eagle_config' not in llama   # vLLM top level
    assert llama['target_hidden_size'] == 160 and llama['hidden_size'] == 128
    fed = {r.engine: r.fed for r in engine_readings(dsv3, 12, 'deepseek_v3')}
    assert {f for e, f in fed.items() if e != 'vLLM 0.32'} == {(2, 6, 9)}
    assert fed['vLLM 0.32'] == (1, 5, 8)   # vLLM 0.32 reads SpecForge's nested ids verbatim: one layer early

def test_training_dump_shapes_and_vocab_mapping():
    root = zoo_root()/'tiny-dsv3-eagle3'/'training_dump'
    files = sorted(root.glob('rows_0-2000/data_*.ckpt'))
    assert len(files) == 8
    for f in files:
        d = torch.load(f, weights_only=True)
        T = d['input_ids'].shape[0]
        assert d['input_ids'].dtype == torch.long and d['loss_mask'].shape == (T,)
        assert d['aux_hidden_state'].shape == (1, T, 3 * 128) and d['hidden_state'].shape == (1, T, 128)
    vm = torch.load(root/'vocab_mapping'/'vocab_mapping.pt', weights_only=True)
    model, _ = load_target('zoo:tiny-dsv3')
    draft, _ = load_draft('zoo:tiny-dsv3-eagle3', target=model)
    assert torch.equal(vm['d2t'], draft.d2t) and torch.equal(vm['t2d'], draft.t2d)
    tgt = torch.arange(len(vm['d2t'])) + vm['d2t']
    assert torch.equal(vm['t2d'].nonzero().flatten(), tgt)        # the same sorted set, as reference §4 requires
    samples, findings = read_training_dump(root)
    assert len(samples) == 8 and findings == []

def test_shipped_size_and_held_out_prompts():
    total = sum(p.stat().st_size for p in zoo_root().rglob('*') if p.is_file())
    assert total <= 30 * 2**20, f"zoo is {total / 2**20:.1f} MB"   # five targets, six drafts: about 28 MB in bf16
    prompts = [json.loads(l)['prompt'] for l in (zoo_root()/'prompts.jsonl').read_text().splitlines()]
    assert len(prompts) >= 24 and all(len(p) > 40 for p in prompts)

def test_zoo_name_errors():
    with pytest.raises(ModelLoadError, match=r'zoo:nope: no such model directory \(zoo has:'): resolve_path('zoo:nope')

@pytest.mark.slow
def test_miniature_build_runs_same_code_path(tmp_path):
    log = build_zoo(tmp_path, ZooRecipe.miniature())
    assert (tmp_path/'ZOO.md').exists() and set(log['models']) == {'tiny-dsv3', 'tiny-dsv3-eagle3', 'tiny-llama', 'tiny-llama-eagle3',
                                                                  'tiny-dsv3-eagle3-offdefault', 'deep-dsv3', 'deep-dsv3-eagle3',
                                                                  'tiny-gptoss', 'tiny-gptoss-eagle3'}
    pair = load_pair(str(tmp_path/'tiny-dsv3'), str(tmp_path/'tiny-dsv3-eagle3'))
    assert pair.n_layers == 8 and pair.draft.config.draft_vocab_size == 128
    assert len(list((tmp_path/'tiny-dsv3-eagle3'/'training_dump'/'rows_0-2000').glob('*.ckpt'))) == 8
    # the off-default draft of the 8-layer miniature: resid[3, 6, 7] against the default resid[2, 4, 5]
    off = load_pair(str(tmp_path/'tiny-dsv3'), str(tmp_path/'tiny-dsv3-eagle3-offdefault'), engine='specforge')
    assert off.wiring.resid_layers == (3, 6, 7) and log['models']['tiny-dsv3-eagle3-offdefault']['train']['in_whole_build']
    assert len(list((tmp_path/'tiny-dsv3-eagle3-offdefault'/'training_dump'/'rows_0-2000').glob('*.ckpt'))) == 8
    # rebuilding just that draft against the saved target gives the same weights: the zoo build is reproducible
    before = load_file(tmp_path/'tiny-dsv3-eagle3-offdefault'/'model.safetensors')
    build_offdefault_draft(tmp_path, ZooRecipe.miniature())
    after = load_file(tmp_path/'tiny-dsv3-eagle3-offdefault'/'model.safetensors')
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    # the deep pair of the miniature: 13 layers (61 in the full recipe), its draft on resid[3, 7, 11] read by SGLang 0.5.6 from ids [2, 6, 10]
    deep = load_pair(str(tmp_path/'deep-dsv3'), str(tmp_path/'deep-dsv3-eagle3'), engine='sglang==0.5.6')
    assert deep.n_layers == 13 and deep.wiring.resid_layers == (3, 7, 11) and deep.report.embedding == 'target'
    assert deep.target.config.rope_parameters['rope_type'] == 'yarn' and log['models']['deep-dsv3-eagle3']['train']['in_whole_build']
    # built alone against the built zoo (its tokenizer, as `build-deep` does), the pair is the same: the build is reproducible
    before = {d: load_file(tmp_path/d/'model.safetensors') for d in ('deep-dsv3', 'deep-dsv3-eagle3')}
    build_deep_pair(tmp_path, ZooRecipe.miniature())
    for d, b in before.items():
        a = load_file(tmp_path/d/'model.safetensors')
        assert b.keys() == a.keys() and all(torch.equal(b[k], a[k]) for k in b), d
    # the GPT-OSS-shaped pair of the miniature: alternating windows, its draft on the default resid[2, 4, 5]; rebuilt alone, the same
    gpt = load_pair(str(tmp_path/'tiny-gptoss'), str(tmp_path/'tiny-gptoss-eagle3'))
    assert gpt.target.config.layer_types[:2] == ['sliding_attention', 'full_attention'] and gpt.wiring.resid_layers == (2, 4, 5)
    assert log['models']['tiny-gptoss-eagle3']['train']['in_whole_build'] and gpt.report.embedding == 'target'
    before = {d: load_file(tmp_path/d/'model.safetensors') for d in ('tiny-gptoss', 'tiny-gptoss-eagle3')}
    build_gptoss_pair(tmp_path, ZooRecipe.miniature())
    for d, b in before.items():
        a = load_file(tmp_path/d/'model.safetensors')
        assert b.keys() == a.keys() and all(torch.equal(b[k], a[k]) for k in b), d

OFF = 'tiny-dsv3-eagle3-offdefault'

@pytest.fixture(scope='module')
def off_pair():
    "The off-default draft as SpecForge (its trainer) reads it: on the layers it was trained on."
    return load_pair('zoo:tiny-dsv3', f'zoo:{OFF}', engine='specforge')

def test_offdefault_config_and_wiring(off_pair):
    cfg = json.loads((zoo_root()/OFF/'config.json').read_text())
    assert cfg['architectures'] == ['LlamaForCausalLMEagle3'] and 'eagle_aux_hidden_state_layer_ids' not in cfg
    assert cfg['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [3, 8, 10]        # SpecForge "output of layer k" = resid[k+1]
    assert off_pair.wiring.resid_layers == (4, 9, 11) and off_pair.n_layers == 12
    # what load_pair resolves for each engine: the doctor's cases. SGLang's current DeepSeek rule adds 1 only when the
    # first id is 1, so it reads [3, 8, 10] verbatim, one layer early; so does vLLM 0.32
    by_engine = {e: load_pair('zoo:tiny-dsv3', f'zoo:{OFF}', engine=e).wiring.resid_layers for e in ('sglang', 'sglang-legacy', 'vllm', 'eagle')}
    assert by_engine == {'sglang': (3, 8, 10), 'sglang-legacy': (4, 9, 11), 'vllm': (3, 8, 10), 'eagle': (2, 6, 9)}
    fed = {r.engine: r.fed for r in engine_readings(cfg, 12, 'deepseek_v3')}
    assert fed['vLLM 0.21'] == fed['EAGLE authors'] == (2, 6, 9)                 # the default: wrong in every chunk
    assert fed['SpecForge (HF capture)'] == fed['SGLang 0.5.12'] == (4, 9, 11)

def test_offdefault_shares_the_sibling_vocabulary(off_pair):
    sib, _ = load_draft('zoo:tiny-dsv3-eagle3', target=off_pair.target)
    assert torch.equal(off_pair.draft.d2t, sib.d2t) and torch.equal(off_pair.draft.t2d, sib.t2d)
    assert off_pair.report.embedding == 'target' and off_pair.report.vocab_map == 'checkpoint' and off_pair.report.unknown_keys == []

def test_offdefault_trained_wiring_beats_the_default(off_pair):
    "Measured live on held-out windows (not read from train_log.json)."
    held = encode_files(off_pair.tokenizer, corpus_files()[1])
    acc = teacher_forced_agreement(off_pair.target, off_pair.draft, heldout_windows(held, 16, 128),
                                   {'trained': (4, 9, 11), 'default': (2, 6, 9), 'one early': (3, 8, 10)})
    assert acc['trained'][0] > acc['default'][0] + 0.05, acc      # measured 0.712 against 0.621 at step 0
    assert all(t > d and t > e for t, d, e in zip(acc['trained'], acc['default'], acc['one early'])), acc

def test_offdefault_dump_is_resid_4_9_11(off_pair):
    root = zoo_root()/OFF/'training_dump'
    samples, findings = read_training_dump(root)
    assert len(samples) == 8 and findings == []
    for f in sorted(root.glob('rows_0-2000/data_*.ckpt')):
        d = torch.load(f, weights_only=True)
        with torch.no_grad(): out = off_pair.target(input_ids=d['input_ids'][None], output_hidden_states=True)
        hs, aux = out.hidden_states, d['aux_hidden_state'].float()
        err = {w: (aux - torch.cat([hs[k] for k in w], -1)).abs().max().item() for w in [(4, 9, 11), (2, 6, 9), (3, 8, 10)]}
        scale = aux.abs().max().item()
        assert err[(4, 9, 11)] < 0.01 * scale < err[(2, 6, 9)] and err[(4, 9, 11)] < err[(3, 8, 10)], (f.name, err, scale)
        assert torch.allclose(d['hidden_state'].float(), hs[-1], rtol=1e-2, atol=1e-2)   # after the final norm, as SpecForge stores
    vm = torch.load(root/'vocab_mapping'/'vocab_mapping.pt', weights_only=True)
    assert torch.equal(vm['d2t'], off_pair.draft.d2t) and torch.equal(vm['t2d'], off_pair.draft.t2d)

def test_zoo_list_says_offdefault():
    line = next(l for l in zoo_listing() if l.startswith(f'zoo:{OFF} '))
    assert "EAGLE-3 draft of zoo:tiny-dsv3" in line and "trained on resid[4, 9, 11], not the engines' default resid[2, 6, 9]" in line
    assert "config ids [3, 8, 10], specforge convention" in line
    assert not any("not the engines' default" in l for l in zoo_listing() if not l.startswith((f'zoo:{OFF} ', 'zoo:deep-dsv3-eagle3 ')))
    assert f"## {OFF}" in (zoo_root()/'ZOO.md').read_text() and OFF in json.loads((zoo_root()/'build_log.json').read_text())['models']
