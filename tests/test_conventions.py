"""Pins the layer-id conventions of reference §2 with literal expectations, and the engine readings of real draft configs."""
import json
from pathlib import Path

import pytest

from eagle3_workbench.conventions import default_resid_layers, read_aux_ids
from eagle3_workbench.engine_rows import CONVENTIONS
from eagle3_workbench.engines import from_resid, to_resid
from eagle3_workbench.wiring import EngineReading, Wiring, disagreements, engine_readings, resolve_wiring, wiring_table

FIXTURES = Path(__file__).parent / 'fixtures' / 'draft-configs'
KEY = 'eagle_aux_hidden_state_layer_ids'
ENGINES = ['SGLang 0.5.12', 'SGLang 0.5.23', 'vLLM 0.32', 'vLLM 0.21', 'SpecForge (HF capture)', 'EAGLE authors']   # rows by release, for a known target
UNKNOWN = ['SGLang 0.5.12', 'SGLang 0.5.23 (DeepSeek/Kimi files)'] + ENGINES[2:]   # no model type: the row says which files' rule it assumes
OLD_VLLM, VLLM = 'vLLM 0.21', 'vLLM 0.32'   # before and since the nested fallback (vLLM 0.32.0, checked on a real engine)


def load(name): return json.loads((FIXTURES / name).read_text())
def nested(ids): return {'eagle_config': {KEY: ids}}
def by_engine(cfg, n, mt=None):   # keyed by release: the unknown target's row under its release too
    return {r.engine.removesuffix(' (DeepSeek/Kimi files)'): r for r in engine_readings(cfg, n, mt)}


# ---- defaults -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('n, expected', [(4, (2, 2, 1)), (8, (2, 4, 5)), (32, (2, 16, 29)), (36, (2, 18, 33)),
                                         (48, (2, 24, 45)), (61, (2, 30, 58)), (80, (2, 40, 77))])
def test_default_resid_layers(n, expected):
    assert default_resid_layers(n) == expected


@pytest.mark.parametrize('n', [0, 1, 2, 3, -5])
def test_default_resid_layers_too_small(n):
    with pytest.raises(ValueError):
        default_resid_layers(n)


def test_conventions_tuple():
    assert CONVENTIONS == ('resid', 'hf', 'eagle', 'sglang-internal', 'sglang', 'sglang-pr25454', 'sglang-boundary', 'vllm', 'specforge', 'trtllm')


# ---- §2 table: ids as written -> resid ------------------------------------------------------------------------

TO_RESID = [
    # EAGLE authors, SGLang internal layers_to_capture, the resid convention: id k = resid[k]
    ('eagle', [2, 16, 29], 32, (2, 16, 29)),
    ('eagle', [2, 30, 58], 61, (2, 30, 58)),
    ('sglang-internal', [2, 16, 29], 32, (2, 16, 29)),
    ('sglang-internal', [0, 5, 31], 32, (0, 5, 31)),
    ('resid', [2, 18, 33], 36, (2, 18, 33)),
    ('resid', [0, 1, 32], 32, (0, 1, 32)),
    # HF hidden_states[k] = resid[k] for k < N
    ('hf', [0, 2, 31], 32, (0, 2, 31)),
    ('hf', [2, 30, 58], 61, (2, 30, 58)),
    # SGLang config ids (pre PR#25454, non-DeepSeek model files): output of layer k = resid[k+1]
    ('sglang', [1, 15, 28], 32, (2, 16, 29)),
    ('sglang', [1, 29, 57], 61, (2, 30, 58)),
    ('sglang', [2, 30, 58], 61, (3, 31, 59)),
    ('sglang', [1, 17, 33], 36, (2, 18, 34)),
    ('sglang', [-1, 15, 28], 32, (0, 16, 29)),
    # SpecForge HF capture: hook on layers[k] output = resid[k+1]
    ('specforge', [1, 15, 28], 32, (2, 16, 29)),
    ('specforge', [1, 29, 57], 61, (2, 30, 58)),
    ('specforge', [-1, 3, 5], 8, (0, 4, 6)),
    # SGLang after PR#25454: +1 only when the FIRST id is 1
    ('sglang-pr25454', [1, 29, 57], 61, (2, 30, 58)),
    ('sglang-pr25454', [2, 30, 58], 61, (2, 30, 58)),
    ('sglang-pr25454', [1, 17, 33], 36, (2, 18, 34)),
    ('sglang-pr25454', [0, 30, 58], 61, (0, 30, 58)),
    ('sglang-pr25454', [3, 1, 5], 8, (3, 1, 5)),
    ('sglang-pr25454', [-1, 15, 28], 32, (-1, 15, 28)),
    # TensorRT-LLM eagle3_layers_to_capture: output of layer k = resid[k+1] (captured after decoder layer k)
    ('trtllm', [1, 15, 28], 32, (2, 16, 29)),
    ('trtllm', [1, 17, 32], 36, (2, 18, 33)),
    ('trtllm', [1, 15, 31], 32, (2, 16, 32)),
    # vLLM: top-level ids verbatim
    ('vllm', [1, 17, 33], 36, (1, 17, 33)),
    ('vllm', [2, 30, 58], 61, (2, 30, 58)),
    ('vllm', [1, 29, 57], 61, (1, 29, 57)),
    # empty lists translate to nothing
    ('sglang', [], 32, ()),
    ('sglang-pr25454', [], 32, ()),
]


@pytest.mark.parametrize('convention, ids, n, expected', TO_RESID)
def test_to_resid(convention, ids, n, expected):
    assert to_resid(ids, convention, n) == expected
    assert to_resid(tuple(ids), convention, n) == expected


# ---- §2 table: resid -> ids to write --------------------------------------------------------------------------

FROM_RESID = [
    ('resid', (2, 16, 29), 32, (2, 16, 29)),
    ('eagle', (2, 30, 58), 61, (2, 30, 58)),
    ('sglang-internal', (0, 16, 32), 32, (0, 16, 32)),
    ('hf', (0, 2, 31), 32, (0, 2, 31)),
    ('sglang', (2, 30, 58), 61, (1, 29, 57)),
    ('sglang', (0, 16, 29), 32, (-1, 15, 28)),
    ('sglang', (2, 18, 34), 36, (1, 17, 33)),
    ('specforge', (2, 16, 29), 32, (1, 15, 28)),
    ('specforge', (2, 24, 45), 48, (1, 23, 44)),
    ('sglang-pr25454', (2, 30, 58), 61, (1, 29, 57)),
    ('sglang-pr25454', (3, 31, 59), 61, (3, 31, 59)),
    ('sglang-pr25454', (0, 16, 29), 32, (0, 16, 29)),
    ('vllm', (2, 18, 33), 36, (2, 18, 33)),
    ('vllm', (2, 18, 34), 36, (2, 18, 34)),
    ('trtllm', (2, 30, 58), 61, (1, 29, 57)),
]


@pytest.mark.parametrize('convention, resid, n, expected', FROM_RESID)
def test_from_resid(convention, resid, n, expected):
    assert from_resid(resid, convention, n) == expected


# SpecForge's written default is [1, N//2-1, N-4]
@pytest.mark.parametrize('n, written', [(32, (1, 15, 28)), (36, (1, 17, 32)), (61, (1, 29, 57))])
def test_specforge_default_written_form(n, written):
    assert from_resid(default_resid_layers(n), 'specforge', n) == written
    assert to_resid(list(written), 'specforge', n) == default_resid_layers(n)


# ---- hf index N and other refusals ----------------------------------------------------------------------------

@pytest.mark.parametrize('n', [4, 32, 61])
def test_hf_index_n_rejected(n):
    with pytest.raises(ValueError, match='final norm'):
        to_resid([2, n], 'hf', n)
    with pytest.raises(ValueError, match=rf'not resid\[{n}\]'):
        from_resid((2, n), 'hf', n)


def test_hf_out_of_range_rejected():
    with pytest.raises(ValueError):
        to_resid([-1, 2], 'hf', 32)
    with pytest.raises(ValueError):
        to_resid([33], 'hf', 32)


@pytest.mark.parametrize('convention', CONVENTIONS)
def test_from_resid_rejects_nonexistent(convention):
    with pytest.raises(ValueError, match='does not exist'):
        from_resid((-1, 16, 29), convention, 32)
    with pytest.raises(ValueError, match='does not exist'):
        from_resid((2, 16, 33), convention, 32)


def test_pr25454_cannot_write_resid1_first():
    # verbatim [1, ..] gets +1, shifted [0, ..] does not: resid[1, ...] is not expressible
    with pytest.raises(ValueError, match='cannot be written'):
        from_resid((1, 16, 29), 'sglang-pr25454', 32)


@pytest.mark.parametrize('bad', ['1,2,3', [1, '2', 3], [1.0, 2, 3], [True, 2, 3], None])
def test_to_resid_rejects_non_ints(bad):
    with pytest.raises(ValueError):
        to_resid(bad, 'sglang', 32)


def test_trtllm_minus_one_is_not_the_embedding():
    # TensorRT-LLM's -1 is the final post-norm state (save-hidden-states mode): refused as a layer id
    with pytest.raises(ValueError, match='post-norm'):
        to_resid([-1, 15, 28], 'trtllm', 32)
    with pytest.raises(ValueError, match='post-norm'):
        from_resid((0, 16, 29), 'trtllm', 32)


def test_unknown_convention():
    with pytest.raises(ValueError, match='unknown convention'):
        to_resid([1, 2, 3], 'tensorrt', 32)
    with pytest.raises(ValueError, match='unknown convention'):
        from_resid((1, 2, 3), 'tensorrt', 32)


# ---- round trips ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('n', [4, 8, 12, 32, 36, 48, 61, 80])
@pytest.mark.parametrize('convention', CONVENTIONS)
def test_round_trip_default(convention, n):
    d = default_resid_layers(n)
    assert to_resid(from_resid(d, convention, n), convention, n) == d


@pytest.mark.parametrize('n', [8, 32, 61])
@pytest.mark.parametrize('convention', CONVENTIONS)
def test_round_trip_other_triples(convention, n):
    for resid in [(0, n // 2, n - 1), (3, n // 2 + 1, n - 2), (2, 3, 4), (n - 1, 2, 5)]:
        if convention == 'hf' and n in resid: continue
        if convention == 'trtllm' and 0 in resid: continue   # resid[0] has no TensorRT-LLM id (tested above)
        assert to_resid(from_resid(resid, convention, n), convention, n) == resid


@pytest.mark.parametrize('n', [8, 32, 61])
@pytest.mark.parametrize('convention', [c for c in CONVENTIONS if c != 'hf'])
def test_round_trip_resid_n(convention, n):
    # resid[N] can be written (it is a real tensor) even though no capture loop reaches it
    resid = (2, n // 2, n)
    assert to_resid(from_resid(resid, convention, n), convention, n) == resid


# ---- read_aux_ids ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name, expected', [
    ('specforge-deepseek-v3-671b-eagle3.json', {'nested': [1, 29, 57], 'top_level': None}),
    ('kimi-k2.5-eagle3-reconstructed.json', {'nested': [2, 30, 58], 'top_level': None}),
    ('specforge-gpt-oss-120B-eagle3.json', {'nested': [1, 17, 33], 'top_level': None}),
    ('specforge-llama3-8B-eagle3.json', {'nested': None, 'top_level': None}),
    ('specforge-qwen3-30B-A3B-eagle3.1.json', {'nested': None, 'top_level': None}),
    ('specforge-qwen3-8b-eagle3.json', {'nested': None, 'top_level': None}),
])
def test_read_aux_ids_fixtures(name, expected):
    assert read_aux_ids(load(name)) == expected


def test_read_aux_ids_top_level_and_both():
    assert read_aux_ids({KEY: [2, 18, 33]}) == {'nested': None, 'top_level': [2, 18, 33]}
    both = {KEY: [2, 18, 33], 'eagle_config': {KEY: [1, 17, 33]}}
    assert read_aux_ids(both) == {'nested': [1, 17, 33], 'top_level': [2, 18, 33]}


@pytest.mark.parametrize('cfg, key', [
    ({'eagle_config': {KEY: '1,29,57'}}, 'eagle_config.eagle_aux_hidden_state_layer_ids'),
    ({'eagle_config': {KEY: [1, '29', 57]}}, 'eagle_config.eagle_aux_hidden_state_layer_ids'),
    ({'eagle_config': {KEY: 29}}, 'eagle_config.eagle_aux_hidden_state_layer_ids'),
    ({KEY: '1,17,33'}, 'eagle_aux_hidden_state_layer_ids (top level)'),
    ({KEY: [1.5, 17, 33]}, 'eagle_aux_hidden_state_layer_ids (top level)'),
    ({'eagle_config': 'oops'}, 'eagle_config'),
])
def test_read_aux_ids_malformed(cfg, key):
    with pytest.raises(ValueError) as e:
        read_aux_ids(cfg)
    assert key in str(e.value)


# ---- engine readings of real configs --------------------------------------------------------------------------

def test_readings_are_engine_readings():
    rs = engine_readings(load('specforge-deepseek-v3-671b-eagle3.json'), 61)
    assert [r.engine for r in rs] == UNKNOWN
    assert [r.engine for r in engine_readings(load('specforge-deepseek-v3-671b-eagle3.json'), 61, 'deepseek_v3')] == ENGINES
    assert not any('PR' in e for e in UNKNOWN + ENGINES)   # releases, as users deploy them
    assert all(isinstance(r, EngineReading) for r in rs)
    assert [r.convention for r in rs] == ['sglang', 'sglang-pr25454', 'vllm', 'vllm', 'specforge', 'eagle']


@pytest.mark.parametrize('mt', [None, 'deepseek_v3', 'kimi_k2'])
def test_deepseek_v3_specforge_config(mt):
    rs = by_engine(load('specforge-deepseek-v3-671b-eagle3.json'), 61, mt)
    for e in ['SGLang 0.5.12', 'SGLang 0.5.23', 'SpecForge (HF capture)']:
        r = rs[e]
        assert (r.ids, r.source, r.resid, r.fed, r.problems) == ((1, 29, 57), 'config', (2, 30, 58), (2, 30, 58), [])
        assert r.field == 'eagle_config.eagle_aux_hidden_state_layer_ids'
    v = rs[OLD_VLLM]
    assert (v.ids, v.source, v.field, v.resid, v.fed) == (None, 'default', 'hard-coded default', (2, 30, 58), (2, 30, 58))
    assert len(v.problems) == 1 and 'is not read' in v.problems[0] and 'eagle_config' in v.problems[0]
    v = rs[VLLM]   # vLLM 0.32 reads the nested ids verbatim: one layer early in every chunk
    assert (v.ids, v.source, v.field, v.fed, v.problems) == ((1, 29, 57), 'config', 'eagle_config.eagle_aux_hidden_state_layer_ids', (1, 29, 57), [])
    ea = rs['EAGLE authors']
    assert (ea.source, ea.fed) == ('default', (2, 30, 58)) and 'reads no config field' in ea.problems[0]
    d = disagreements(list(rs.values()))
    assert len(d) == 1 and d[0].startswith('vLLM 0.32 feeds resid[1, 29, 57]')


@pytest.mark.parametrize('mt', [None, 'kimi_k25', 'kimi_k2', 'deepseek_v3', 'deepseek_v2'])
def test_kimi_draft_capture_before(mt):
    rs = by_engine(load('kimi-k2.5-eagle3-reconstructed.json'), 61, mt)
    assert rs['SGLang 0.5.12'].fed == (3, 31, 59)
    assert rs['SGLang 0.5.23'].fed == (2, 30, 58)
    assert rs['SGLang 0.5.23'].convention == 'sglang-pr25454'
    assert rs['SpecForge (HF capture)'].fed == (3, 31, 59)
    assert rs[OLD_VLLM].fed == (2, 30, 58) and rs[OLD_VLLM].source == 'default'
    assert rs[VLLM].fed == (2, 30, 58) and rs[VLLM].source == 'config'   # written "capture before": vLLM 0.32 reads it as meant
    assert disagreements(list(rs.values()))


@pytest.mark.parametrize('mt, convention', [('llama', 'sglang'), ('qwen3', 'sglang'), ('gpt_oss', 'sglang-boundary')])
def test_pr25454_only_for_deepseek_kimi_model_files(mt, convention):
    rs = by_engine(load('kimi-k2.5-eagle3-reconstructed.json'), 61, mt)
    assert rs['SGLang 0.5.23'].convention == convention   # gpt_oss.py has a rule of its own (largest id N: verbatim)
    assert rs['SGLang 0.5.23'].fed == (3, 31, 59)         # ... which adds 1 here: the largest id, 58, is not N = 61


def test_gpt_oss():
    cfg = load('specforge-gpt-oss-120B-eagle3.json')
    rs = by_engine(cfg, 36, 'gpt_oss')
    assert rs['SGLang 0.5.12'].fed == (2, 18, 34)
    assert rs['SGLang 0.5.23'].fed == (2, 18, 34)
    assert rs['SpecForge (HF capture)'].fed == (2, 18, 34)
    assert rs[OLD_VLLM].fed == (2, 18, 33) and rs[OLD_VLLM].source == 'default'
    assert rs[VLLM].fed == (1, 17, 33) and rs[VLLM].source == 'config'
    d = disagreements(list(rs.values()))
    assert len(d) == 2 and all('SGLang 0.5.12' in x for x in d) and any(x.startswith(VLLM) for x in d)
    # the same list written at the top level: vLLM reads it verbatim
    top = by_engine({KEY: [1, 17, 33]}, 36, 'gpt_oss')
    for e in (VLLM, OLD_VLLM):
        assert (top[e].source, top[e].field, top[e].fed) == ('config', 'eagle_aux_hidden_state_layer_ids (top level)', (1, 17, 33))
        assert top[e].problems == []
    # and SGLang, which reads only the nested field, now falls back to its default
    assert top['SGLang 0.5.12'].fed == (2, 18, 33) and top['SGLang 0.5.12'].source == 'default'
    assert 'is not read: it feeds its default' in top['SGLang 0.5.12'].problems[0]


@pytest.mark.parametrize('name, n, default', [
    ('specforge-llama3-8B-eagle3.json', 32, (2, 16, 29)),
    ('specforge-qwen3-8b-eagle3.json', 36, (2, 18, 33)),
    ('specforge-qwen3-30B-A3B-eagle3.1.json', 48, (2, 24, 45)),
])
def test_no_ids_means_default_everywhere(name, n, default):
    rs = engine_readings(load(name), n)
    for r in rs:
        assert (r.ids, r.source, r.field, r.resid, r.fed, r.problems) == (
            None, 'default', 'hard-coded default', default, default, [])
    assert disagreements(rs) == []


def test_unreachable_resid_n():
    rs = by_engine(nested([1, 15, 31]), 32)
    r = rs['SGLang 0.5.12']
    assert r.resid == (2, 16, 32)
    assert r.fed == (2, 16) and len(r.fed) == 2
    assert any('resid[32]' in p and 'never captured' in p for p in r.problems)
    assert any('2 states' in p for p in r.problems)
    # an older vLLM ignores the nested field: the default, all reachable; vLLM 0.32 reads it verbatim, also reachable
    assert rs[OLD_VLLM].fed == (2, 16, 29) and rs[VLLM].fed == (1, 15, 31)


def test_resid_n_reached_by_vllm_top_level():
    # vLLM captures after the last layer since 0.18.0 (EagleModelMixin._maybe_add_hidden_state(..., idx + 1, ...), PR #36063,
    # read in the 0.18.0 wheel): both vLLM rows (0.32.0 and 0.21.0) feed resid[32]; SGLang drops it
    rs = by_engine({KEY: [2, 16, 32]}, 32)
    for e in (VLLM, OLD_VLLM): assert (rs[e].resid, rs[e].fed, rs[e].problems) == ((2, 16, 32), (2, 16, 32), [])
    r = by_engine(nested([1, 15, 31]), 32)['SGLang 0.5.23']
    assert (r.resid, r.fed) == ((2, 16, 32), (2, 16)) and any('2 states' in p for p in r.problems)


def test_minus_one_is_embedding_under_sglang():
    rs = by_engine(nested([-1, 15, 28]), 32, 'llama')
    r = rs['SGLang 0.5.12']
    # SGLang 0.5.12 (the row's release) crashes on resid[0]: models/llama.py appends hidden_states + residual before
    # layer i with residual still None before layer 0 (0.5.12 wheel); llama.py captures it only from 0.5.22
    assert (r.resid, r.fed) == ((0, 16, 29), (16, 29))
    assert any('resid[0] crashes the engine' in p for p in r.problems)
    r = rs['SGLang 0.5.23']   # SGLang 0.5.23 captures it, and says it is the embedding
    assert (r.resid, r.fed) == ((0, 16, 29), (0, 16, 29)) and any('embedding' in p for p in r.problems)
    assert any('embedding' in p for p in rs['SpecForge (HF capture)'].problems)


def test_negative_id_never_captured_by_vllm():
    r = by_engine({KEY: [-1, 16, 29]}, 32)[VLLM]
    assert (r.resid, r.fed) == ((-1, 16, 29), (16, 29))
    assert any('resid[-1]' in p for p in r.problems)


def test_unsorted_and_repeated_ids_arrive_in_layer_order():
    r = by_engine(nested([28, 1, 15]), 32)['SGLang 0.5.12']
    assert (r.resid, r.fed) == ((29, 2, 16), (2, 16, 29))
    assert any('layer order' in p for p in r.problems)
    r = by_engine(nested([1, 1, 28]), 32)['SGLang 0.5.12']
    assert r.fed == (2, 29)


def test_empty_lists():
    rs = by_engine({KEY: [], 'eagle_config': {KEY: []}}, 32)
    for e in (VLLM, OLD_VLLM): assert rs[e].fed == (2, 16, 29) and rs[e].source == 'default'  # vLLM: empty list = absent
    assert rs['SGLang 0.5.12'].fed == () and any('empty' in p for p in rs['SGLang 0.5.12'].problems)


def test_disagreements_format():
    rs = engine_readings(nested([2, 30, 58]), 61, 'kimi_k25')
    d = disagreements(rs)
    assert len(d) == 1
    assert 'SGLang 0.5.12' in d[0] and 'resid[3, 31, 59]' in d[0] and 'resid[2, 30, 58]' in d[0]
    assert disagreements([]) == []


# ---- resolve_wiring -------------------------------------------------------------------------------------------

RESOLVE = [
    ('specforge-deepseek-v3-671b-eagle3.json', 61, 'sglang', 'deepseek_v3', (2, 30, 58), 'sglang-pr25454'),
    ('specforge-deepseek-v3-671b-eagle3.json', 61, 'sglang', None, (2, 30, 58), 'sglang'),
    ('specforge-deepseek-v3-671b-eagle3.json', 61, 'vllm', 'deepseek_v3', (1, 29, 57), 'vllm'),
    ('specforge-deepseek-v3-671b-eagle3.json', 61, 'vllm-legacy', 'deepseek_v3', (2, 30, 58), 'vllm-legacy'),
    ('specforge-deepseek-v3-671b-eagle3.json', 61, 'specforge', None, (2, 30, 58), 'specforge'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'sglang', 'kimi_k25', (2, 30, 58), 'sglang-pr25454'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'sglang', 'kimi_k2', (2, 30, 58), 'sglang-pr25454'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'sglang', None, (3, 31, 59), 'sglang'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'sglang', 'llama', (3, 31, 59), 'sglang'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'sglang-pr25454', None, (2, 30, 58), 'sglang-pr25454'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'resid', None, (2, 30, 58), 'resid'),
    ('kimi-k2.5-eagle3-reconstructed.json', 61, 'eagle', None, (2, 30, 58), 'eagle'),
    ('specforge-gpt-oss-120B-eagle3.json', 36, 'sglang', 'gpt_oss', (2, 18, 34), 'sglang'),
    ('specforge-gpt-oss-120B-eagle3.json', 36, 'vllm', 'gpt_oss', (1, 17, 33), 'vllm'),
    ('specforge-gpt-oss-120B-eagle3.json', 36, 'vllm-legacy', 'gpt_oss', (2, 18, 33), 'vllm-legacy'),
    ('specforge-gpt-oss-120B-eagle3.json', 36, 'resid', None, (1, 17, 33), 'resid'),
    ('specforge-llama3-8B-eagle3.json', 32, 'sglang', 'llama', (2, 16, 29), 'sglang'),
    ('specforge-llama3-8B-eagle3.json', 32, 'vllm', 'llama', (2, 16, 29), 'vllm'),
    ('specforge-llama3-8B-eagle3.json', 32, 'specforge', 'llama', (2, 16, 29), 'specforge'),
    ('specforge-qwen3-30B-A3B-eagle3.1.json', 48, 'sglang', 'qwen3_moe', (2, 24, 45), 'sglang'),
]


@pytest.mark.parametrize('name, n, engine, mt, resid, used', RESOLVE)
def test_resolve_wiring(name, n, engine, mt, resid, used):
    w = resolve_wiring(load(name), n, engine, mt)
    assert isinstance(w, Wiring)
    assert (w.resid_layers, w.engine.key) == (resid, used)
    assert w.reason.endswith('.') and 'resid[' in w.reason


def test_resolve_wiring_reason_and_defaults():
    w = resolve_wiring(load('specforge-llama3-8B-eagle3.json'), 32)
    assert 'default' in w.reason
    w = resolve_wiring(nested([1, 15, 31]), 32)
    assert w.resid_layers == (2, 16) and 'resid[2, 16, 32]' in w.reason
    w = resolve_wiring({KEY: [2, 16, 29]}, 32, 'resid')
    assert w.resid_layers == (2, 16, 29)


def test_resolve_wiring_unknown_engine():
    with pytest.raises(ValueError, match='unknown engine'):
        resolve_wiring({}, 32, 'tensorrt')
    with pytest.raises(ValueError, match="engine 'sglang==0.4.0'"):
        resolve_wiring({}, 32, 'sglang==0.4.0')


def test_resolve_wiring_pr25454_covers_glm4_moe_lite():
    # PR #25454 changed glm4_moe_lite.py as well as deepseek_v2.py (0.5.13 wheel): 'capture before' ids read as written
    assert resolve_wiring(nested([2, 24, 44]), 47, 'sglang', 'glm4_moe_lite').resid_layers == (2, 24, 44)
    assert resolve_wiring(nested([2, 24, 44]), 47, 'sglang', 'qwen3_moe').resid_layers == (3, 25, 45)


# ---- wiring_table ---------------------------------------------------------------------------------------------

def test_wiring_table():
    t = wiring_table(load('specforge-gpt-oss-120B-eagle3.json'), 36, 'gpt_oss')
    lines = t.splitlines()
    assert [c.strip() for c in lines[0].split(' | ')] == ['engine', 'field', 'ids', 'resid fed', 'problems']
    for col in ['engine', 'field', 'ids', 'resid fed', 'problems']: assert col in lines[0]
    rows = {e: next(l for l in lines if l.startswith(e)) for e in ENGINES}
    assert '[2, 18, 34]' in rows['SGLang 0.5.12'] and '[1, 17, 33]' in rows['SGLang 0.5.12']
    assert '[2, 18, 33]' in rows[OLD_VLLM] and 'hard-coded default' in rows[OLD_VLLM] and 'not read' in rows[OLD_VLLM]
    assert '[1, 17, 33]' in rows[VLLM] and 'eagle_config' in rows[VLLM]


def test_wiring_table_one_line_per_engine_when_clean():
    t = wiring_table(load('specforge-llama3-8B-eagle3.json'), 32)
    assert len(t.splitlines()) == 1 + len(ENGINES)
