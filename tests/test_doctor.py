"The doctor on the zoo: every finding code planted and found, and no false alarm on the correctly wired pairs."
import json, shutil
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file, save_file
from eagle3_workbench.models import load_pair, resolve_path
from eagle3_workbench.engine import zoo_prompts
from eagle3_workbench.doctor import diagnose, static_findings, read_training_dump, match_training_features

DUMP = resolve_path('zoo:tiny-dsv3-eagle3')/'training_dump'
PROMPTS = zoo_prompts(24)   # fewer prompts keep each sweep quick

def planted(tmp_path, edit_config=None, edit_weights=None, draft='zoo:tiny-dsv3-eagle3', target='zoo:tiny-dsv3', engine='sglang'):
    "A copy of a zoo draft with its config or weights changed, loaded as a pair."
    d = tmp_path/'draft'
    shutil.copytree(resolve_path(draft), d, ignore=shutil.ignore_patterns('training_dump'))
    if edit_config:
        cfg = json.loads((d/'config.json').read_text()); edit_config(cfg); (d/'config.json').write_text(json.dumps(cfg))
    if edit_weights:
        sd = load_file(d/'model.safetensors'); edit_weights(sd); save_file(sd, d/'model.safetensors')
    return load_pair(target, str(d), engine=engine)

def ids(*x):
    def f(cfg): cfg['eagle_config']['eagle_aux_hidden_state_layer_ids'] = list(x)
    return f

def errors(d): return {f.code for f in d.findings if f.severity == 'error'}

@pytest.fixture(scope='module')
def dsv3(): return load_pair('zoo:tiny-dsv3')

@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny-dsv3', 'tiny-llama'])
def test_zoo_pairs_are_ok(name):
    pair = load_pair(f'zoo:{name}')
    d = diagnose(pair, PROMPTS, training_dump=DUMP if name == 'tiny-dsv3' else None, accept=False)
    assert d.verdict == 'ok' and not errors(d), str(d)
    assert d.recommended['resid_layers'] == list(pair.wiring.resid_layers)
    assert 'LOW_ACCEPTANCE' not in d.codes

def test_dump_identifies_trained_layers(dsv3):
    samples, fs = read_training_dump(DUMP)
    assert samples and not fs
    sim, fs = match_training_features(dsv3, samples)
    assert sim['trained'] == [2, 6, 9] and all(sim['identified'])
    # the dump's features are the target's own resid[k], so the matched cosine is ~1 and every other layer is lower
    for c, k in enumerate(sim['trained']):
        assert sim['cosine'][c][k] > 0.999 and max(v for j, v in enumerate(sim['cosine'][c]) if j != k) < sim['cosine'][c][k]

@pytest.mark.slow
def test_original_case_embedding_captured(tmp_path):
    "The case that started the project: SpecForge ids [-1, 1, 5] feed [embedding, low, mid] to slots trained on [low, mid, high]."
    pair = planted(tmp_path, ids(-1, 1, 5), engine='sglang-legacy')   # the team ran SGLang before PR #25454 (+1 on every id)
    assert pair.wiring.resid_layers == (0, 2, 6)
    d = diagnose(pair, PROMPTS, training_dump=DUMP, accept_prompts=4, accept_tokens=16)
    assert d.verdict == 'miswired'
    assert {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= errors(d)
    r = d.recommended
    assert r['resid_layers'] == [2, 6, 9] and r['sglang_eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]
    assert r['vllm_eagle_aux_hidden_state_layer_ids'] == [2, 6, 9]
    assert r['accept_length_after'] > r['accept_length_before'] + 0.3

@pytest.mark.slow
def test_off_by_one_found_by_sweep_without_dump(tmp_path):
    "ids [2, 6, 9] written in SpecForge's 'output of layer' convention feed resid[3, 7, 10]: one off everywhere."
    pair = planted(tmp_path, ids(2, 6, 9), engine='sglang-legacy')
    assert pair.wiring.resid_layers == (3, 7, 10)
    d = diagnose(pair, zoo_prompts(), accept=False)
    assert 'AUX_LAYERS_MISMATCH' in errors(d), str(d)
    assert d.recommended['resid_layers'] == [2, 6, 9]

def test_chunk_order(dsv3):
    "Engines capture in layer order whatever the config order, so a chunk-order fault is what a deployment feeds (e.g. a custom capture)."
    d = diagnose(dsv3, PROMPTS, training_dump=DUMP, wiring=(9, 6, 2), accept=False)
    assert 'AUX_ORDER' in errors(d) and d.recommended['resid_layers'] == [2, 6, 9]

def test_unreachable(tmp_path):
    d = diagnose(planted(tmp_path, ids(1, 5, 11)), PROMPTS, training_dump=DUMP, accept=False)
    assert 'AUX_UNREACHABLE' in errors(d) and d.recommended['resid_layers'] == [2, 6, 9]

def test_config_missing_and_convention_ambiguous(tmp_path):
    pair = planted(tmp_path/'a', lambda c: c.pop('eagle_config'))
    fs, _ = static_findings(pair)
    assert 'AUX_CONFIG_MISSING' in {f.code for f in fs}
    pair = planted(tmp_path/'b', ids(2, 6, 9))   # SGLang: resid[3, 7, 10]; vLLM ignores the nested field: resid[2, 6, 9]
    fs, _ = static_findings(pair)
    assert 'CONVENTION_AMBIGUOUS' in {f.code for f in fs}

def test_fc_skipped(tmp_path):
    pair = planted(tmp_path, lambda c: c.update(architectures=['LlamaForCausalLMEagle']))
    assert 'FC_SKIPPED' in {f.code for f in static_findings(pair)[0]}
    assert 'FC_SKIPPED' in {f.code for f in static_findings(load_pair('zoo:tiny-dsv3'), algorithm='EAGLE')[0]}

def test_vocab_map_missing_and_invalid(tmp_path):
    def strip(sd): del sd['d2t'], sd['t2d']
    pair = planted(tmp_path/'a', edit_weights=strip)
    fs = {f.code for f in static_findings(pair)[0]}
    assert 'VOCAB_MAP_MISSING' in fs
    def flip(sd): i = int(sd['t2d'].nonzero()[0]); sd['t2d'][i] = False
    pair = planted(tmp_path/'b', edit_weights=flip)
    assert 'VOCAB_MAP_INVALID' in {f.code for f in static_findings(pair)[0]}

def test_rope_mismatch(tmp_path):
    pair = planted(tmp_path/'a', lambda c: c.update(rope_theta=1e6))
    assert 'ROPE_MISMATCH' in {f.code for f in static_findings(pair)[0]}
    pair = planted(tmp_path/'b', lambda c: c.pop('rope_theta'))
    assert 'ROPE_MISMATCH' in {f.code for f in static_findings(pair)[0]}

def test_hidden_size_mismatch(tmp_path):
    def narrow(sd): sd['fc.weight'] = sd['fc.weight'][:, :288].contiguous()
    pair = planted(tmp_path, lambda c: c.update(target_hidden_size=96), narrow)
    d = diagnose(pair, PROMPTS, accept=False)
    assert d.verdict == 'error' and 'HIDDEN_SIZE_MISMATCH' in errors(d)

def test_nonfinite(tmp_path):
    def poison(sd): sd['midlayer.mlp.down_proj.weight'][0, 0] = float('nan')
    d = diagnose(planted(tmp_path, edit_weights=poison), PROMPTS[:8], accept=False)
    f = next(f for f in d.findings if f.code == 'NONFINITE')
    assert 'draft.mlp' in f.evidence and 'target.resid[2]' not in f.evidence

def test_low_acceptance_random_draft(tmp_path):
    def scramble(sd):
        g = torch.Generator().manual_seed(0)
        for k in sd:
            if sd[k].is_floating_point() and sd[k].dim() == 2: sd[k] = torch.randn(sd[k].shape, generator=g).to(sd[k].dtype) * 0.05
    d = diagnose(planted(tmp_path, edit_weights=scramble), PROMPTS[:8], accept=False)
    assert 'LOW_ACCEPTANCE' in d.codes and d.verdict == 'ok'

def test_bad_dumps(tmp_path, dsv3):
    (tmp_path/'empty').mkdir()
    d = diagnose(dsv3, PROMPTS[:8], training_dump=tmp_path/'empty', accept=False)
    assert any(f.code == 'DUMP_INVALID' and 'no rows_' in f.message for f in d.findings)
    rows = tmp_path/'bad'/'rows_0-2000'; rows.mkdir(parents=True)
    (rows/'data_0.ckpt').write_bytes(b'not a checkpoint')
    torch.save(dict(input_ids=torch.tensor([1, 2, 3]), aux_hidden_state=torch.zeros(1, 3, 3 * 64)), rows/'data_1.ckpt')
    torch.save(dict(input_ids=torch.tensor([1, 99999, 3]), aux_hidden_state=torch.zeros(1, 3, 3 * 128)), rows/'data_2.ckpt')
    d = diagnose(dsv3, PROMPTS[:8], training_dump=tmp_path/'bad', accept=False)
    msgs = ' | '.join(f.message for f in d.findings if f.code == 'DUMP_INVALID')
    assert 'data_0.ckpt' in msgs and 'width 192' in msgs and 'another tokenizer' in msgs
