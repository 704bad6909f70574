"""The doctor on the zoo end to end: no false alarm on the correctly wired pairs, the original case and an off-by-one
found (each finding code is planted and found in the doctor chapter)."""
import pytest
from conftest import planted, aux_ids, error_codes
from eagle3_workbench.loading import load_pair, resolve_path
from eagle3_workbench.engine import read_prompts
from eagle3_workbench.doctor import diagnose

DUMP = resolve_path('zoo:tiny-dsv3-eagle3')/'training_dump'
PROMPTS = read_prompts(n=24)   # fewer prompts keep each sweep quick

@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny-dsv3', 'tiny-llama'])
def test_zoo_pairs_are_ok(name):
    pair = load_pair(f'zoo:{name}')
    d = diagnose(pair, PROMPTS, training_dump=DUMP if name == 'tiny-dsv3' else None, accept=False)
    assert d.verdict == 'ok' and not error_codes(d), str(d)
    assert d.recommended['resid_layers'] == list(pair.wiring.resid_layers)
    assert 'LOW_ACCEPTANCE' not in d.codes

@pytest.mark.slow
def test_original_case_embedding_captured(tmp_path):
    "The case that started the project: SpecForge ids [-1, 1, 5] feed [embedding, low, mid] to slots trained on [low, mid, high]."
    pair = planted(aux_ids(-1, 1, 5), path=tmp_path, engine='sglang-legacy')   # the team ran SGLang before PR #25454 (+1 on every id)
    assert pair.wiring.resid_layers == (0, 2, 6)
    d = diagnose(pair, PROMPTS, training_dump=DUMP, accept_prompts=4, accept_tokens=16)
    assert d.verdict == 'miswired'
    assert {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= error_codes(d)
    r = d.recommended
    assert r['resid_layers'] == [2, 6, 9] and r['sglang_eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]
    assert r['vllm_eagle_aux_hidden_state_layer_ids'] == [2, 6, 9]
    assert r['accept_length_after'] > r['accept_length_before'] + 0.3

@pytest.mark.slow
def test_off_by_one_found_by_sweep_without_dump(tmp_path):
    "ids [2, 6, 9] written in SpecForge's 'output of layer' convention feed resid[3, 7, 10]: one off everywhere."
    pair = planted(aux_ids(2, 6, 9), path=tmp_path, engine='sglang-legacy')
    assert pair.wiring.resid_layers == (3, 7, 10)
    d = diagnose(pair, read_prompts(), accept=False)
    assert 'AUX_LAYERS_MISMATCH' in error_codes(d), str(d)
    assert d.recommended['resid_layers'] == [2, 6, 9]
