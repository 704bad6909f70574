"The shipped zoo loads through the public loaders, its training dump agrees with the draft, and the builder still runs."
import json, math
from pathlib import Path
import pytest, torch
from eagle3_workbench.loading import load_target, load_draft, load_pair, resolve_path, zoo_root
from eagle3_workbench.draft import ModelLoadError
from eagle3_workbench.conventions import engine_readings
from eagle3_workbench.zoo import build_zoo, ZooRecipe, PAIRS
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
    assert total <= 25 * 2**20, f"zoo is {total / 2**20:.1f} MB"
    prompts = [json.loads(l)['prompt'] for l in (zoo_root()/'prompts.jsonl').read_text().splitlines()]
    assert len(prompts) >= 24 and all(len(p) > 40 for p in prompts)

def test_zoo_name_errors():
    with pytest.raises(ModelLoadError, match=r'zoo:nope: no such model directory \(zoo has:'): resolve_path('zoo:nope')

@pytest.mark.slow
def test_miniature_build_runs_same_code_path(tmp_path):
    log = build_zoo(tmp_path, ZooRecipe.miniature())
    assert (tmp_path/'ZOO.md').exists() and set(log['models']) == {'tiny-dsv3', 'tiny-dsv3-eagle3', 'tiny-llama', 'tiny-llama-eagle3'}
    pair = load_pair(str(tmp_path/'tiny-dsv3'), str(tmp_path/'tiny-dsv3-eagle3'))
    assert pair.n_layers == 8 and pair.draft.config.draft_vocab_size == 128
    assert len(list((tmp_path/'tiny-dsv3-eagle3'/'training_dump'/'rows_0-2000').glob('*.ckpt'))) == 8
