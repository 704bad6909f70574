"""The failure classes users report, each planted in a copy of a zoo draft and named by the doctor from the evidence that
shows it, each with a clean counterpart that stays clean. (Classes with tests elsewhere: tests/test_doctor.py for
engine readings, missing ids, unreachable ids, ignored variants, rope, positions; tests/test_recording.py for a
planted config fault read from a recording; docs/reference.md §7 lists them all.)"""
import contextlib, io, json
from dataclasses import replace
import pytest, torch
from eagle3_workbench.testing import planted, error_codes
from eagle3_workbench.loading import load_pair
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.draft_config import ModelLoadError
from eagle3_workbench.doctor import diagnose
from eagle3_workbench.diagnosis import unusable_diagnosis
from eagle3_workbench.variants import computing
from eagle3_workbench.cli import main, EXIT_CHECK_FAILED

PROMPTS = read_prompts(n=12)   # 12 held-out prompts, about 800 scored tokens: enough evidence for a verdict

@pytest.fixture(scope='module')
def zoo():
    return load_pair('zoo:tiny-dsv3')

def _noise(keys, scale_like=True, seed=0):
    "A weight edit: the named 2-D tensors (all when `keys` is None) replaced by Gaussian noise, of the trained scale or 0.05."
    def edit(sd):
        g = torch.Generator().manual_seed(seed)
        for k in (keys or [k for k in sd if sd[k].is_floating_point() and sd[k].dim() == 2]):
            sd[k] = torch.randn(sd[k].shape, generator=g) * (sd[k].std() if scale_like else 0.05)
    return edit

def test_clean_pair_is_ok(zoo):
    d = diagnose(zoo, PROMPTS, accept=False)
    assert d.verdict == 'ok' and not error_codes(d), str(d)
    assert not {'FEATURES_UNUSED', 'LOW_ACCEPTANCE', 'DRAFT_EMBED_DIVERGES', 'NORM_OUTPUT_MISMATCH'} & set(d.codes)

@pytest.mark.slow
@pytest.mark.parametrize('fault,code', [('every weight noise', 'FEATURES_UNUSED'), ('fc noise at its trained scale', 'LOW_ACCEPTANCE')])
def test_noise_draft_is_unusable_never_ok(fault, code):
    "A draft that reads nothing of its features, or little: unusable, its fc named, no wiring fault claimed."
    p = planted(edit_weights=_noise(None, scale_like=False) if fault.startswith('every') else _noise(['fc.weight']))
    d = diagnose(p, PROMPTS, accept=False)
    assert d.verdict == 'unusable' and code in error_codes(d), str(d)
    assert not {'AUX_LAYERS_MISMATCH', 'AUX_ORDER'} & error_codes(d)
    assert str(d).startswith("verdict: UNUSABLE: the draft's fc")

@pytest.mark.slow
def test_shipped_random_embedding_depends_on_the_engine(zoo):
    "An exporter's random embed_tokens: unusable where the engine keeps it (vLLM >= 0.13.0), a warning where it is replaced (SGLang)."
    emb = zoo.target.get_input_embeddings().weight.detach()
    rand = torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)) * emb.std()
    def ship(t):
        def edit(sd): sd['embed_tokens.weight'] = t
        return edit
    d = diagnose(planted(edit_weights=ship(rand), engine='vllm'), PROMPTS, accept=False)
    assert d.verdict == 'unusable' and 'DRAFT_EMBED_DIVERGES' in error_codes(d), str(d)
    d = diagnose(planted(edit_weights=ship(rand), engine='sglang'), PROMPTS, accept=False)
    f, = [f for f in d.findings if f.code == 'DRAFT_EMBED_DIVERGES']
    assert d.verdict == 'ok' and f.severity == 'warning' and f.evidence['engine_uses'] == 'target', str(d)
    d = diagnose(planted(edit_weights=ship(emb.clone()), engine='vllm'), PROMPTS, accept=False)   # a copy of the target's: nothing to say
    assert 'DRAFT_EMBED_DIVERGES' not in d.codes and d.verdict == 'miswired'   # (vLLM reads the ids [1, 5, 8] verbatim: a wiring fault)

@pytest.mark.slow
def test_moved_norm_is_named_from_the_later_steps(zoo):
    "The config says EAGLE 3.1's feedback (norm_output true, speculators' meaning) for weights trained without it."
    moved, _ = computing(zoo.draft, replace(zoo.draft.config, norm_output=True, norm_output_meaning='3.1'))
    d = diagnose(replace(zoo, draft=moved), PROMPTS, accept=False)
    f, = [f for f in d.findings if f.code == 'NORM_OUTPUT_MISMATCH']
    assert f.severity == 'error' and d.verdict == 'miswired' and 'set norm_output: false' in f.message
    assert f.evidence['steps_configured'][0] == f.evidence['steps_other'][0] > f.evidence['steps_configured'][1]

def test_eagle_flag_skips_fc(zoo):
    "Served with --speculative-algorithm EAGLE: the fc is skipped (sgl-project/sglang#21272)."
    from eagle3_workbench.checks import static_findings
    fs, _ = static_findings(zoo, algorithm='EAGLE')
    assert 'FC_SKIPPED' in {f.code for f in fs if f.severity == 'error'}
    assert 'FC_SKIPPED' not in {f.code for f in static_findings(zoo)[0]}

def test_ids_nested_where_the_release_reads_the_top_level():
    "vLLM 0.21 reads only the top-level ids: nested ones are not read and its default is fed; written at the top level, they are."
    p = planted(draft='zoo:tiny-dsv3-eagle3-offdefault', engine='vllm==0.21.0')   # trained on resid[4, 9, 11], ids nested only
    assert p.wiring.resid_layers == (2, 6, 9) and 'default' in p.wiring.reason
    fixed = planted(lambda c: c.update(eagle_aux_hidden_state_layer_ids=[4, 9, 11]), draft='zoo:tiny-dsv3-eagle3-offdefault', engine='vllm==0.21.0')
    assert fixed.wiring.resid_layers == (4, 9, 11)

@pytest.mark.slow
def test_ids_not_read_named_by_the_doctor():
    p = planted(draft='zoo:tiny-dsv3-eagle3-offdefault', engine='vllm==0.21.0')
    d = diagnose(p, PROMPTS, accept=False)
    assert d.verdict == 'miswired' and 'AUX_LAYERS_MISMATCH' in error_codes(d) and d.recommended['resid_layers'] == [4, 9, 11], str(d)
    assert d.recommended['for_engine']['ids'] == [4, 9, 11]   # vLLM's convention: the resid indices as written, top level

def _vocab_map_broken(sd):
    t2d = sd['t2d'].clone(); t2d[int(t2d.nonzero()[0])] = False; sd['t2d'] = t2d   # one draft token missing from t2d

@pytest.mark.parametrize('label,edit,code', [
    ('d2t missing', lambda sd: (sd.pop('d2t'), sd.pop('t2d')), 'VOCAB_MAP_MISSING'),
    ('d2t and t2d disagree', _vocab_map_broken, 'VOCAB_MAP_INVALID')])
def test_vocabulary_map_faults_are_unusable(label, edit, code, zoo):
    from eagle3_workbench.checks import static_findings
    from eagle3_workbench.doctor import _verdict
    fs, _ = static_findings(planted(edit_weights=edit))
    assert code in {f.code for f in fs if f.severity == 'error'} and _verdict(fs) == 'unusable', (label, fs)
    assert _verdict(static_findings(zoo)[0]) == 'ok'   # the shipped map: clean

def _cli_json(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()): rc = main([*map(str, argv), '--json'])
    return rc, json.loads(out.getvalue())

@pytest.mark.parametrize('label,config,weights,code,part', [
    ('head missing', None, lambda sd: sd.pop('lm_head.weight'), 'LM_HEAD_MISSING', 'head'),
    ('fc_norm on, its weights missing', lambda c: c.update(fc_norm=True), None, 'VARIANT_WEIGHTS_MISSING', 'fc'),
    ('draft_vocab_size disagrees', lambda c: c.update(draft_vocab_size=1000), None, 'VOCAB_SIZE_MISMATCH', 'vocabulary map'),
    ('absolute ids in d2t', None, lambda sd: sd.__setitem__('d2t', sd['d2t'] + torch.arange(len(sd['d2t']))), 'VOCAB_MAP_ABSOLUTE', 'vocabulary map')])
def test_checkpoint_faults_the_loader_refuses_are_unusable(label, config, weights, code, part, tmp_path):
    "The loader refuses with the doctor's code; `diagnose` answers unusable (exit 1), the part named, never a bare error."
    with pytest.raises(ModelLoadError) as e: planted(config, weights, path=tmp_path)
    assert e.value.code == code
    rc, d = _cli_json('diagnose', '--draft', tmp_path/'draft')
    assert rc == EXIT_CHECK_FAILED and d['verdict'] == 'unusable' and [f['code'] for f in d['findings']] == [code], (label, d)
    assert d['findings'][0]['evidence']['part'] == part
    assert unusable_diagnosis(e.value).verdict == 'unusable'
