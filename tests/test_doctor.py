"""The doctor on the zoo end to end: every planted wiring fault named with the right code and the trained layers
recommended, with and without the training dump, on each zoo draft; correctly wired pairs never called miswired over
200 random prompt subsets; too little evidence is inconclusive. Expectations come from the planted fault only."""
import pytest, torch
from pathlib import Path
from eagle3_workbench.testing import planted, error_codes, aux_ids
from eagle3_workbench.loading import load_pair
from eagle3_workbench.formats import resolve_path
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.wiring import resolve_wiring
from eagle3_workbench.conventions import default_resid_layers
import eagle3_workbench.doctor as doc
import eagle3_workbench.checks as checks
import eagle3_workbench.search as search
import eagle3_workbench.scores as scores

def _pass(pair, prompts):
    rec, seqs = scores.target_pass(pair, prompts)
    return rec, pair.draft, seqs
from eagle3_workbench.doctor import diagnose

# name -> (target, draft or None, the layers the draft was trained on as its zoo card says, its training dump or None)
DRAFTS = {'tiny-dsv3': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', (2, 6, 9), 'zoo:tiny-dsv3-eagle3'),
          'tiny-llama': ('zoo:tiny-llama', 'zoo:tiny-llama-eagle3', (2, 5, 7), None),
          'offdefault': ('zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3-offdefault', (4, 9, 11), 'zoo:tiny-dsv3-eagle3-offdefault')}
ZOO = read_prompts()   # the zoo's 48 held-out prompts

def _available(name):
    try: resolve_path(DRAFTS[name][1]); return True
    except Exception: return False

NAMES = [pytest.param(n, marks=pytest.mark.skipif(not _available(n), reason=f"{n} not in this zoo")) for n in DRAFTS]

@pytest.fixture(scope='module')
def prompts():
    "The zoo's prompts and 48 more held-out snippets (the zoo's prompt maker, another seed): enough for one-layer faults (see the calibration)."
    from eagle3_workbench.zoo import corpus_files, heldout_prompts
    return ZOO + heldout_prompts(corpus_files()[1], n=48, seed=11)

_PAIRS = {}
def pair_of(name):
    if name not in _PAIRS:
        t, d, _, _ = DRAFTS[name]
        _PAIRS.clear(); _PAIRS[name] = load_pair(t, d)   # one pair at a time: its kept target pass is reused
    return _PAIRS[name]

def dump_of(name): return resolve_path(DRAFTS[name][3])/'training_dump' if DRAFTS[name][3] else None

def planted_faults(trained, n):
    "Each chunk +-1, all +-1, the embedding in each slot, the order reversed: fault label -> (wiring fed, codes that must be named)."
    t, out = list(trained), {}
    for c in range(len(t)):
        for d in (1, -1): out[f"chunk {c} {d:+d}"] = tuple(x + d if j == c else x for j, x in enumerate(t)), {'AUX_LAYERS_MISMATCH'}
    out['all +1'], out['all -1'] = (tuple(x + 1 for x in t), {'AUX_LAYERS_MISMATCH'}), (tuple(x - 1 for x in t), {'AUX_LAYERS_MISMATCH'})
    for c in range(len(t)): out[f"embedding in chunk {c}"] = tuple(0 if j == c else x for j, x in enumerate(t)), {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'}
    out['order reversed'] = tuple(reversed(t)), {'AUX_ORDER'}
    return {k: v for k, v in out.items() if all(0 <= x < n for x in v[0]) and len(set(v[0])) == len(v[0])}

@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_planted_faults_named_with_and_without_dump(name, prompts):
    pair, trained = pair_of(name), DRAFTS[name][2]
    for dump in [None] + ([dump_of(name)] if dump_of(name) else []):
        for label, (fed, want) in planted_faults(trained, pair.n_layers).items():
            d = diagnose(pair, prompts if dump is None else ZOO[:8], training_dump=dump, wiring=fed, accept=False)
            assert d.verdict == 'miswired' and want <= error_codes(d), f"{name} {label} dump={bool(dump)}: {d}"
            assert d.recommended['resid_layers'] == list(trained), f"{name} {label} dump={bool(dump)}: {d}"

@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_each_engine_reading_of_the_config(name, prompts):
    "Each engine's reading of the shipped config, fed as the deployment would: named when it is not the trained wiring."
    pair, trained = pair_of(name), DRAFTS[name][2]
    for engine in ('sglang-legacy', 'sglang-pr25454', 'vllm', 'vllm-legacy', 'specforge', 'eagle'):
        fed = resolve_wiring(pair.draft.config.raw, pair.n_layers, engine, pair.model_type).resid_layers
        if len(fed) < 3: continue   # an engine that would feed fewer states: AUX_UNREACHABLE, covered in the chapter
        d = diagnose(pair, prompts, engine=engine, wiring=fed, accept=False)
        assert d.recommended['resid_layers'] == list(trained), f"{name} {engine} fed {fed}: {d}"
        if tuple(fed) == trained: assert d.verdict == 'ok' and not error_codes(d), f"{name} {engine}: {d}"
        else: assert d.verdict == 'miswired' and error_codes(d) & {'AUX_LAYERS_MISMATCH', 'AUX_ORDER', 'AUX_EMBEDDING_CAPTURED'}, f"{name} {engine} fed {fed}: {d}"
        e = d.recommended['for_engine']
        assert e['engine'] in (engine, 'sglang-legacy') and (e['ids'] is not None or 'CONVENTION_CANNOT_EXPRESS' in d.codes)

@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_missing_config(name):
    "No ids in the config: every engine feeds its default; a fault exactly when the draft was trained elsewhere."
    t, dr, trained, _ = DRAFTS[name]
    p = planted(lambda c: (c.get('eagle_config', {}).pop('eagle_aux_hidden_state_layer_ids', None), c.pop('eagle_aux_hidden_state_layer_ids', None)),
                draft=dr, target=t, engine='sglang')
    d = diagnose(p, ZOO, accept=False)
    assert 'AUX_CONFIG_MISSING' in d.codes and d.recommended['resid_layers'] == list(trained), str(d)
    if default_resid_layers(p.n_layers) == trained: assert d.verdict == 'ok', str(d)
    else: assert d.verdict == 'miswired' and 'AUX_LAYERS_MISMATCH' in error_codes(d), str(d)

@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_correct_pairs_never_miswired_over_200_subsets(name, prompts):
    "The calibration's check, on this test's prompts: 200 random subsets of 8..48 prompts, the doctor's own search and decision."
    from eagle3_workbench.wiring import engine_readings
    pair, trained = pair_of(name), DRAFTS[name][2]
    n, table = pair.n_layers, search.AgreementTable(*_pass(pair, prompts))
    readings = engine_readings(pair.draft.config.raw, n, pair.model_type)
    zeros = table.score((None,) * pair.draft.config.num_aux)   # the draft fed zeros: the decision's FEATURES_UNUSED evidence
    g, verdicts = torch.Generator().manual_seed(1), []
    for i in range(200):
        idx = torch.randperm(len(prompts), generator=g)[:(8, 16, 32, 48)[i % 4]]
        sw = search.wiring_sweep(table, n, doc._seeds(trained, n, readings, None), prompts=idx)
        verdicts.append(doc.decide(doc.Evidence(n, [], trained, sweep=sw, null=tuple(x[idx] for x in zeros)))[0])
    assert not {'miswired', 'unusable'} & set(verdicts) and verdicts.count('ok') > 150, {v: verdicts.count(v) for v in set(verdicts)}

@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny-dsv3', 'tiny-llama'])
def test_two_prompts_are_inconclusive_never_miswired(name):
    "The case from the issue: two prompts gave 'MISWIRED' from a one-window bootstrap."
    d = diagnose(pair_of(name), ZOO[:2], accept=False)
    assert d.verdict == 'inconclusive' and 'NOT_ENOUGH_EVIDENCE' in d.codes and not error_codes(d), str(d)
    assert d.to_json()['search']['enough'] is False

@pytest.mark.slow
def test_original_case_embedding_captured(tmp_path):
    "The case that started the project: SpecForge ids [-1, 1, 5] feed [embedding, low, mid] to slots trained on [low, mid, high]."
    # read as SpecForge's capture reads them (+1, resid[0] captured): no SGLang release does both on a DeepSeek target
    pair = planted(lambda c: c['eagle_config'].update(eagle_aux_hidden_state_layer_ids=[-1, 1, 5]), path=tmp_path, engine='specforge')
    assert pair.wiring.resid_layers == (0, 2, 6)
    d = diagnose(pair, ZOO[:24], training_dump=dump_of('tiny-dsv3'), accept_prompts=4, accept_tokens=16)
    assert d.verdict == 'miswired' and {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= error_codes(d)
    r = d.recommended
    assert r['resid_layers'] == [2, 6, 9] and r['sglang_eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]
    assert r['for_engine'] == dict(engine='specforge', name='SpecForge', field='eagle_config.eagle_aux_hidden_state_layer_ids', ids=[1, 5, 8])
    assert r['accept_length_after'] > r['accept_length_before'] + 0.3
    assert r['accept_length_change']['label'] == 'better' and r['accept_length_change']['ci'][0] > 0

# ---- the deep search (issue 18: N = 61 within 60 s) ---------------------------------------------------------------
def _counted(f):
    "A fit function over a made-up score table, and the set of wirings it was asked about."
    seen = set()
    def fit(w): seen.add(tuple(w)); return torch.tensor([float(f(w))])
    return fit, seen

@pytest.mark.parametrize('optimum, seeds', [((7, 40, 50), {'configured': (1, 29, 57), 'engines default': (2, 30, 58)}),
                                            ((44, 21, 3), {'configured': (2, 30, 58)}),            # chunk 0 must cross chunk 1
                                            ((59, 60, 0), {'configured': (2, 30, 58), 'vLLM reading': (1, 29, 57)}),
                                            ((13, 22, 47), {'configured': (5, 6, 7), 'trained (dump)': (20, 30, 40)})])
def test_coordinate_search_finds_an_optimum_away_from_the_seeds(optimum, seeds):
    "A score table with its optimum away from every seed (chunks interacting a little): found with a few hundred wirings scored, not 35,990."
    rng = torch.Generator().manual_seed(sum(optimum))
    noise = torch.rand(61, 61, generator=rng) * 0.3   # a pairwise interaction between chunks 0 and 1, smaller than one layer's step
    f = lambda w: -sum(abs(a - b) for a, b in zip(w, optimum)) + float(noise[w[0], w[1]])
    fit, seen = _counted(f)
    tried, how, _ = search.search_wirings(fit, 61, 3, seeds)
    assert max(tried, key=f) == optimum and optimum in seen, (max(tried, key=f), how)
    assert 'coordinate search' in how and len(tried) <= 250 and seen <= set(tried), (len(tried), how)
    starts = {w for k, w in seeds.items() if k in search.STARTS} or set(seeds.values())
    assert f"from {len(starts)} start(s)" in how    # only the configured, dump-identified and default wirings start a pass

def test_search_space_reaches_resid_N_only_where_the_engine_captures_it():
    fake = lambda w: torch.tensor([-float(sum(abs(a - b) for a, b in zip(w, (2, 6, 12))))])
    tried, how, _ = search.search_wirings(fake, 12, 3, {'configured': (2, 6, 9)}, top=12)
    assert max(tried, key=lambda w: float(fake(w))) == (2, 6, 12) and 'resid[0..12]' in how
    tried, how, _ = search.search_wirings(fake, 12, 3, {'configured': (2, 6, 9)})
    assert all(12 not in w for w in tried) and 'resid[0..11]' in how

PLACES = (0, 10, 12, 20, 24, 34, 36, 44, 49, 51, 56, 60)   # where each of the zoo target's 12 layers sits in a 61-layer target

def deep_planted(folder, places=PLACES, n=61, ids=(1, 29, 57)):
    """A 61-layer target that computes exactly what the zoo's tiny-dsv3 computes: its 12 layers at `places`, every other layer
    an exact identity (attention and MLP output projections zero). Its resid[k] is the zoo target's resid[#{places < k}], so the
    zoo draft (trained on resid[2, 6, 9]) was in effect trained on the deep layers holding those: planted, known exactly."""
    import json, shutil
    from transformers import AutoConfig, AutoModelForCausalLM
    folder, src = Path(folder), resolve_path('zoo:tiny-dsv3')
    zoo = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, experts_implementation='eager')
    cfg = AutoConfig.from_pretrained(src); cfg.num_hidden_layers = n
    deep = AutoModelForCausalLM.from_config(cfg, experts_implementation='eager')
    zs, sd, where = zoo.state_dict(), deep.state_dict(), {p: i for i, p in enumerate(places)}
    for k in sd:
        if not k.startswith('model.layers.'): sd[k] = zs[k].clone(); continue
        j, rest = int(k.split('.')[2]), k.split('.', 3)[3]
        if j in where: sd[k] = zs[f'model.layers.{where[j]}.{rest}'].clone()
        elif 'o_proj' in rest or 'down_proj' in rest: sd[k] = torch.zeros_like(sd[k])
    deep.load_state_dict(sd); deep.save_pretrained(folder/'target')
    for f in ('tokenizer.json', 'tokenizer_config.json'): shutil.copy(src/f, folder/'target'/f)
    shutil.copytree(resolve_path('zoo:tiny-dsv3-eagle3'), folder/'draft', ignore=shutil.ignore_patterns('training_dump'))
    c = json.loads((folder/'draft'/'config.json').read_text()); c['eagle_config']['eagle_aux_hidden_state_layer_ids'] = list(ids)
    (folder/'draft'/'config.json').write_text(json.dumps(c))
    return load_pair(str(folder/'target'), str(folder/'draft'))

@pytest.mark.slow
def test_deep_target_planted_wiring_found_within_60_s(tmp_path):
    "N = 61: the coordinate search finds the planted trained layers (far from the configured default) and the verdict comes within 60 s."
    pair = deep_planted(tmp_path)
    ids = torch.tensor([[5, 17, 300, 41, 9, 77, 12]])
    with torch.no_grad(): assert torch.equal(pair.target(input_ids=ids).logits, load_pair('zoo:tiny-dsv3').target(input_ids=ids).logits)
    zoo_layer = lambda k: sum(p < k for p in PLACES)   # deep resid[k] = zoo resid[zoo_layer(k)]
    d = diagnose(pair, ZOO, accept=False)
    rec = d.recommended['resid_layers']
    assert [zoo_layer(k) for k in rec] == [2, 6, 9], (rec, str(d))
    assert d.verdict == 'miswired' and 'AUX_LAYERS_MISMATCH' in error_codes(d) and d.configured == [2, 30, 58], str(d)
    assert 'coordinate search' in d.search['how'] and d.search['candidates'] < 300, d.search
    assert d.seconds < 60, d.seconds

# ---- engine-release-aware static findings (issue 17 part 4) -----------------------------------------------------------
def _fc_norm_weights(sd):
    for i in range(3): sd[f'fc_norm.{i}.weight'] = torch.ones(sd['fc.weight'].shape[1] // 3)

@pytest.mark.parametrize('engine, ignored', [('sglang==0.5.6', True), ('sglang==0.5.11', True), ('sglang==0.5.12', False),
                                             ('vllm==0.21.0', True), ('vllm==0.22.0', False), ('trtllm', False), ('specforge', False)])
def test_variant_ignored_per_release(engine, ignored):
    "A SpecForge fc_norm draft: SGLang reads fc_norm from 0.5.12, vLLM from 0.22.0 (engine_rows.VARIANT_SUPPORT); SpecForge is no serving engine."
    from eagle3_workbench.engines import Engine
    p = planted(lambda c: c.update(fc_norm=True), _fc_norm_weights)
    fs = [f for f in checks.static_findings(p, engine)[0] if f.code == 'VARIANT_IGNORED']
    if engine != 'specforge': assert (Engine.parse(engine).variant_support()['fc_norm'].reading == 'ignored') == ignored   # the rule the expectation comes from
    assert bool(fs) == ignored, [f.message for f in fs]
    if ignored:
        (f,) = fs
        assert f.severity == 'error' and f.evidence['key'] == 'fc_norm' and f.evidence['trainer'] == 'specforge' and 'fc_norm' in f.message
        assert f.evidence['trained'] == 'per_chunk' and f.evidence['served'] == 'no_fc_norm'
    assert not [f for f in checks.static_findings(pair_of('tiny-dsv3'), engine)[0] if f.code == 'VARIANT_IGNORED']   # no variant: nothing to ignore

def test_draft_positions_short():
    fs = [f for f in checks.static_findings(planted(lambda c: c.update(max_position_embeddings=512)))[0] if f.code == 'DRAFT_POSITIONS_SHORT']
    assert len(fs) == 1 and fs[0].severity == 'warning' and fs[0].evidence == dict(draft=512, draft_given=True, target=1024)
    assert '512' in fs[0].message and '1024' in fs[0].message
    for edit in (lambda c: c.update(max_position_embeddings=1024), lambda c: c.update(max_position_embeddings=4096), lambda c: c.pop('max_position_embeddings')):
        assert 'DRAFT_POSITIONS_SHORT' not in {f.code for f in checks.static_findings(planted(edit))[0]}   # absent: config classes' 2048 >= 1024

def test_rope_scaling_mismatch(tmp_path):
    import json, shutil
    scaled = lambda c: c.update(rope_scaling={'rope_type': 'linear', 'factor': 2.0})
    fs = [f for f in checks.static_findings(planted(scaled))[0] if f.code == 'ROPE_SCALING_MISMATCH']   # the zoo target: plain rope
    assert len(fs) == 1 and fs[0].evidence['differs'] == ['rope_type'] and fs[0].evidence['target'] is None
    t = tmp_path/'target'; shutil.copytree(resolve_path('zoo:tiny-dsv3'), t)   # a target with linear scaling, factor 4
    c = json.loads((t/'config.json').read_text()); c['rope_parameters'] = {'rope_theta': 10000.0, 'rope_type': 'linear', 'factor': 4.0}
    (t/'config.json').write_text(json.dumps(c))
    fs = [f for f in checks.static_findings(planted(scaled, target=str(t)))[0] if f.code == 'ROPE_SCALING_MISMATCH']
    assert len(fs) == 1 and fs[0].evidence['differs'] == ['factor'], [f.evidence for f in fs]
    same = lambda c: c.update(rope_scaling={'type': 'linear', 'factor': 4.0})   # the older spelling, same scaling
    codes = {f.code for f in checks.static_findings(planted(same, target=str(t)))[0]}
    assert 'ROPE_SCALING_MISMATCH' not in codes and 'ROPE_MISMATCH' not in codes
    assert 'ROPE_SCALING_MISMATCH' in {f.code for f in checks.static_findings(planted(target=str(t)))[0]}   # the draft unscaled

def test_rope_measured_trained_with_the_targets():
    "The zoo draft trained with its target's rope (theta 10,000), configured with theta 500,000: measured, the target's rope fits it "
    "surely better, so the finding is an error and the verdict miswired; the unplanted draft has no rope finding at all."
    d = diagnose(planted(lambda c: c.update(rope_theta=500000.0)), ZOO[:16], accept=False)
    f = next(f for f in d.findings if f.code == 'ROPE_MISMATCH')
    m = f.evidence['measured']
    assert f.severity == 'error' and d.verdict == 'miswired' and m['trained_with'] == 'the target rope' and m['ci'][0] > 0, f
    assert m['agreement_target_rope'] > m['agreement'], m
    assert m['target'] == dict(rope_theta=10000.0, rope_scaling=None) and "write the target's rope" in f.message
    assert not {"ROPE_MISMATCH", "ROPE_SCALING_MISMATCH"} & set(diagnose(pair_of("tiny-dsv3"), ZOO[:16], accept=False).codes)

@pytest.mark.parametrize('engine, reachable', [('vllm==0.33.0', True), ('vllm==0.18.0', False), ('sglang==0.5.20', False)])
def test_aux_unreachable_only_where_the_release_cannot_capture(engine, reachable):
    "Top-level ids [2, 6, 12] (resid[N] for vLLM's verbatim reading): vLLM captures resid[N] since PR #36063; older vLLM and SGLang do not."
    from eagle3_workbench.engines import Engine
    p = planted(lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 6, 12]))
    assert Engine.parse(engine).reach(12, 12, 'deepseek_v3').captured == reachable   # the rule the expectation comes from
    fs, conf = checks.static_findings(p, engine)
    assert ('AUX_UNREACHABLE' in {f.code for f in fs}) == (not reachable and engine.startswith('vllm')), [f.message for f in fs]
    if reachable: assert conf == (2, 6, 12)
    fs, conf, _ = doc.fed_wiring(p, [], None, wiring=(2, 6, 12), engine=Engine.parse(engine))   # the deployment feeds resid[N]
    assert (conf == (2, 6, 12)) == reachable and ('AUX_UNREACHABLE' in {f.code for f in fs}) == (not reachable)

@pytest.mark.slow
def test_resid_N_wiring_evaluated_where_vllm_captures_it():
    "vLLM 0.33 fed resid[2, 6, 12]: the search runs over resid[0..12] (the target pass holds resid[N]) and names the fault."
    d = diagnose(pair_of('tiny-dsv3'), ZOO, engine='vllm==0.33.0', wiring=(2, 6, 12), accept=False)
    assert d.search['how'].startswith('every ascending choice of 3 of resid[0..12]') and d.configured == [2, 6, 12]
    assert d.verdict == 'miswired' and d.recommended['resid_layers'] == [2, 6, 9], str(d)
    assert d.recommended['for_engine'] == dict(engine='vllm==0.33.0', name='vLLM 0.33.0', field='eagle_aux_hidden_state_layer_ids (top level)', ids=[2, 6, 9])
    d = diagnose(pair_of('tiny-dsv3'), ZOO, engine='sglang==0.5.20', accept=False)
    assert d.search['how'].startswith('every ascending choice of 3 of resid[0..11]') and d.verdict == 'ok', str(d)

# ---- training dumps in either trainer's format ------------------------------------------------------------------
@pytest.mark.slow
def test_speculators_dump_identifies_the_trained_layers(tmp_path):
    "A speculators dump (hs_{i}.safetensors: token_ids, hidden_states [T, aux layers + last, H]) of the zoo target's resid[2, 6, 9]."
    from safetensors.torch import save_file
    from eagle3_workbench.teacher import resid_forward
    pair = pair_of('tiny-dsv3')
    (tmp_path/'hidden_states').mkdir()
    for i, text in enumerate(ZOO[:6]):
        ids = torch.tensor([pair.tokenizer(text, add_special_tokens=False)['input_ids']])
        with torch.no_grad(): _, hs = resid_forward(pair.target, input_ids=ids)
        stack = torch.stack([hs[k][0] for k in (2, 6, 9, pair.n_layers)], 1)   # [T, 4, H]: the aux layers, then the last layer
        save_file({'token_ids': ids[0], 'hidden_states': stack.contiguous()}, tmp_path/'hidden_states'/f'hs_{i}.safetensors')
    wrong = planted(aux_ids(2, 6, 9), engine='sglang-legacy')   # SGLang before PR #25454 feeds resid[3, 7, 10]
    d = diagnose(wrong, ZOO[:8], training_dump=tmp_path, accept=False)
    assert d.training_match['trained'] == [2, 6, 9] and all(d.training_match['identified']), d.training_match
    assert d.verdict == 'miswired' and 'AUX_LAYERS_MISMATCH' in error_codes(d) and d.recommended['resid_layers'] == [2, 6, 9], str(d)
    assert any('identified from the training dump' in f.message for f in d.findings)
    samples, fs = doc.read_training_dump(tmp_path)   # the old reader's interface: samples and DUMP_INVALID findings
    assert len(samples) == 6 and fs == []
    (tmp_path/'hidden_states'/'hs_9.safetensors').write_bytes(b'not safetensors')
    samples, fs = doc.read_training_dump(tmp_path)
    assert len(samples) == 6 and [f.code for f in fs] == ['DUMP_INVALID'] and 'hs_9.safetensors' in fs[0].message
