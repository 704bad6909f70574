"""Drafts of other families than EAGLE-3 (DFlash, DSpark, P-EAGLE, MTP): `wiring` reads each engine release as its
own code does, no such config is ever answered with EAGLE-3 defaults, and every other door refuses it by name."""
import copy, json, numbers, struct, sys, types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple
import pytest
sys.path.insert(0, str(Path(__file__).parent))
from wheel_source import wheel, source, compiled   # noqa: E402
from eagle3_workbench.conventions import (DraftFamilyError, EAGLE3, FAMILY_ROWS, draft_family, read_aux_ids,  # noqa: E402
                                          default_resid_layers)
from eagle3_workbench.family_wiring import BLOCK_ROWS, block_reading, block_readings, family_table   # noqa: E402

FIXTURES = Path(__file__).parent/'fixtures'/'draft-configs'
BLOCK = {'specforge-qwen3-8b-dflash.json': ('DFlash', 36), 'specforge-qwen3-8b-dspark.json': ('DSpark', 36),
         'specforge-kimi-k3-dspark.json': ('DSpark', 93)}
def load(name): return json.loads((FIXTURES/name).read_text())

# planted configs of the families `wiring` refuses: their marks as the engines' code spells them
REFUSED = {'P-EAGLE': {'speculators_model_type': 'peagle', 'architectures': ['Eagle3Speculator'], 'mask_token_id': 5,
                       'transformer_layer_config': {'model_type': 'llama', 'hidden_size': 64}},
           'MTP': {'architectures': ['DeepseekV3ForCausalLMNextN'], 'num_nextn_predict_layers': 1, 'hidden_size': 64}}


# ---- which family ------------------------------------------------------------------------------------------------

def test_every_eagle3_fixture_and_zoo_draft_is_eagle3():
    "No false alarm: the EAGLE-3 configs the suite holds (fixtures, zoo drafts) are EAGLE-3 drafts."
    from eagle3_workbench.target import zoo_root
    names = [p for p in FIXTURES.glob('*.json') if p.name not in BLOCK] + sorted(zoo_root().glob('*-eagle3*/config.json'))
    assert len(names) >= 8
    for p in names: assert draft_family(json.loads(p.read_text())).family is EAGLE3, p.name

@pytest.mark.parametrize('name', sorted(BLOCK))
def test_block_fixtures_are_their_family(name):
    assert draft_family(load(name)).family.name == BLOCK[name][0]


# ---- wiring: each release side by side ---------------------------------------------------------------------------

@pytest.mark.parametrize('name', sorted(BLOCK))
def test_wiring_json_reads_every_release(forked_cli, tmp_path, name):
    "`wiring --json`: the family named, every release read for it, each feeding the config's ids + 1 (output of layer k = resid[k+1])."
    family, n = BLOCK[name]
    p = forked_cli.run(['wiring', str(FIXTURES/name), '--n-layers', str(n), '--json'], tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    want = tuple(k + 1 for k in load(name)['dflash_config']['target_layer_ids'])
    labels = ['SGLang 0.5.23', 'vLLM 0.34', 'vLLM 0.32'] + (['vLLM 0.32 V1 runner'] if family == 'DFlash' else [])
    assert (out['family'], out['covered'], [r['engine'] for r in out['readings']]) == (family, 'wiring', labels)
    for r in out['readings']:
        assert (tuple(r['fed']), r['source'], r['refused'], r['problems']) == (want, 'config', None, []), r
        assert r['field'].startswith('dflash_config.target_layer_ids')
    assert want != default_resid_layers(n)
    assert f"has no {family} draft math" in out['not_supported']

def test_wiring_text_names_the_family_and_what_is_missing(forked_cli, tmp_path):
    p = forked_cli.run(['wiring', str(FIXTURES/'specforge-qwen3-8b-dflash.json'), '--n-layers', '36', '--model-type', 'qwen3'], tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith('draft family: DFlash (architectures DFlashDraftModel')
    assert [ln.split(' | ')[3].strip() for ln in lines[2:6]] == ['[2, 10, 18, 26, 34]'] * 4
    assert lines[-1].startswith('NOT SUPPORTED: the workbench has no DFlash draft math')
    p = forked_cli.run(['wiring', str(FIXTURES/'specforge-qwen3-8b-dflash.json'), '--n-layers', '36', '--engine', 'vllm==0.34.0', '--json'], tmp_path)
    assert [r['engine'] for r in json.loads(p.stdout)['readings']] == ['vLLM 0.34']

def test_wiring_imports_no_torch(tmp_path):
    "Config only: `wiring` on a block draft in a fresh interpreter never imports torch."
    import subprocess
    code = ("import sys; from eagle3_workbench.cli import main; rc = main(['wiring', %r, '--n-layers', '36']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO TORCH', rc)" % str(FIXTURES/'specforge-qwen3-8b-dflash.json'))
    p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert p.stdout.splitlines()[-1] == 'NO TORCH 0', p.stdout[-500:] + p.stderr[-500:]


# ---- never EAGLE-3 defaults --------------------------------------------------------------------------------------

@pytest.mark.parametrize('family', sorted(REFUSED))
def test_refused_families_wiring_exits_2_naming_family_and_file(forked_cli, tmp_path, family):
    f = tmp_path/'config.json'; f.write_text(json.dumps(REFUSED[family]))
    p = forked_cli.run(['wiring', str(f), '--n-layers', '36', '--json'], tmp_path)
    assert (p.returncode, p.stdout) == (2, ''), p.stdout
    assert len(p.stderr.splitlines()) == 1 and f"{f}: a{'n' if family == 'MTP' else ''} {family} draft (" in p.stderr, p.stderr

@pytest.mark.parametrize('name', [*sorted(BLOCK), *sorted(REFUSED)])
def test_python_api_never_reads_a_family_config_as_eagle3(name):
    "Every EAGLE-3 entry of the Python API refuses the config by name; the block readings read it right or refuse it by name too."
    from eagle3_workbench.wiring import engine_readings, resolve_wiring, wiring_table
    from eagle3_workbench.draft_config import DraftConfig
    cfg, fam = (load(name), BLOCK[name][0]) if name in BLOCK else (REFUSED[name], name)
    for call in (lambda: read_aux_ids(cfg), lambda: engine_readings(cfg, 36), lambda: resolve_wiring(cfg, 36, 'vllm'),
                 lambda: wiring_table(cfg, 36), lambda: DraftConfig.from_dict(cfg, 'x/config.json')):
        with pytest.raises(DraftFamilyError, match=f" {fam} draft "): call()
    if name in BLOCK:
        assert all(r.source == 'config' and r.fed == tuple(k + 1 for k in cfg['dflash_config']['target_layer_ids']) for r in block_readings(cfg, BLOCK[name][1]))
    else:
        with pytest.raises(DraftFamilyError, match=f" {fam} draft "): block_readings(cfg, 36)


# ---- the doors that refuse ---------------------------------------------------------------------------------------

@pytest.fixture
def dflash_dir(tmp_path):
    "A DFlash checkpoint folder: SpecForge's public config and a whole (tiny) safetensors file."
    d = tmp_path/'qwen3-8b-dflash'; d.mkdir()
    (d/'config.json').write_text((FIXTURES/'specforge-qwen3-8b-dflash.json').read_text())
    header = json.dumps({'fc.weight': {'dtype': 'F32', 'shape': [1, 1], 'data_offsets': [0, 4]}}).encode()
    (d/'model.safetensors').write_bytes(struct.pack('<Q', len(header)) + header + b'\0' * 4)
    return d

DOORS = {'run': ['run', '--target', 'zoo:tiny-llama', '--n-prompts', '1', '--max-new-tokens', '2'],
         'diagnose': ['diagnose', '--target', 'zoo:tiny-llama', '--n-prompts', '1', '--no-accept'],
         'compare': ['compare', '--observed', 'OBSERVED', '--target', 'zoo:tiny-llama'],
         'report': ['report', '--target', 'zoo:tiny-llama', '--out', 'r.html'],
         'record': ['record', '--target', 'zoo:tiny-llama', '--out', 'rec', '--logits', 'vocab', '--n-prompts', '1']}

@pytest.mark.parametrize('door', sorted(DOORS))
def test_door_refuses_by_name(forked_cli, tmp_path, dflash_dir, door):
    "Exit 2, one line naming the family and the config file; nothing of the EAGLE-3 math runs."
    observed = Path(__file__).parent/'fixtures'/'observed'/'sglang_server_info.json'
    args = [a.replace('OBSERVED', str(observed)) for a in DOORS[door]] + ['--draft', str(dflash_dir)]
    p = forked_cli.run(args, tmp_path)
    assert p.returncode == 2, (p.returncode, p.stdout[-300:], p.stderr[-500:])
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and not (door == 'record' and ln.startswith('Loading weights'))]   # record loads the target before --draft: its progress bar
    assert len(err) == 1 and f"{dflash_dir/'config.json'}: a DFlash draft (architectures DFlashDraftModel" in err[0], p.stderr
    assert not (tmp_path/'r.html').exists() and not (tmp_path/'rec').exists()

def test_load_pair_refuses_by_name(dflash_dir):
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.formats import read_draft
    with pytest.raises(DraftFamilyError, match=r"config.json: a DFlash draft \(architectures DFlashDraftModel"): load_pair('zoo:tiny-llama', dflash_dir)
    with pytest.raises(DraftFamilyError, match='refused by name'): read_draft(dflash_dir)


# ---- the rows against the engines' own code ------------------------------------------------------------------------

def _wheel(package, version):
    whl, why = wheel(package, version)
    if whl is None: pytest.skip(why)
    return whl

class _Struct:   # msgspec.Struct as the DSpark config class uses it: keyword construction
    def __init_subclass__(cls, **kw): pass
    def __init__(self, **kw): self.__dict__.update(kw)

def _planted(cfg:dict)->list:
    "The config and edits of it that take each branch of the readings: ids elsewhere, none, empty, null, verbatim."
    ids, out = cfg['dflash_config'].get('target_layer_ids'), [cfg]
    def edit(**kw):
        c = copy.deepcopy(cfg)
        for k, v in kw.items():
            if k.startswith('dc_'): c['dflash_config'][k[3:]] = v
            elif v is None: c.pop(k, None)
            else: c[k] = v
        out.append(c)
    edit(dc_target_layer_ids=None)                                           # nested key null
    c = copy.deepcopy(cfg); c['dflash_config'].pop('target_layer_ids'); out.append(c)   # no ids at all
    c = copy.deepcopy(c); c['target_layer_ids'] = [i + 2 for i in ids]; out.append(c)  # top level only
    edit(dspark_target_layer_ids=[i + 1 for i in ids])                        # DSpark's own key
    edit(dspark_target_layer_ids=[i + 1 for i in ids], model_type='deepseek_v41')
    edit(eagle_aux_hidden_state_layer_ids=[3, 5, 7])                          # vLLM's top-level EAGLE-3 key first
    edit(dc_layer_ids=[4, 6], dc_target_layer_ids=[])                         # empty: vLLM falls through
    edit(eagle_config={'eagle_aux_hidden_state_layer_ids': [6, 8]})           # vLLM 0.32 V1: eagle_config overrides
    edit(eagle_config={})
    return out

@pytest.mark.parametrize('rel, start', [('0.34.0', 'v1/worker/gpu/spec_decode/eagle/eagle3_utils.py'), ('0.32.0', 'v1/worker/gpu/spec_decode/eagle/eagle3_utils.py'),
                                        ('0.32.0 V1', 'v1/worker/gpu_model_runner.py')])
def test_vllm_rows_are_vllms_own_function(rel, start):
    "vLLM's get_eagle3_aux_layers_from_config (V1: GPUModelRunner._get_eagle3_aux_layers_from_config) and the target's default, from the wheel, on every planted config."
    version, v1 = rel.split()[0], rel.endswith('V1')
    whl = _wheel('vllm', version)
    text = source(whl, 'vllm/' + start)
    ns = compiled(text, ('_get_eagle3_aux_layers_from_config',) if v1 else ('get_eagle3_aux_layers_from_config',),
                  {'SpeculativeConfig': object, 'Any': Any}, within='GPUModelRunner' if v1 else None)
    ns = compiled(source(whl, 'vllm/model_executor/models/interfaces.py'), ('get_eagle3_default_aux_hidden_state_layers',), ns, within='SupportsEagle3')
    row = next(r for r in BLOCK_ROWS if r.label == 'vLLM ' + version.rsplit('.', 1)[0] + (' V1 runner' if v1 else '') and r.family == 'dflash')
    n = 36
    target = SimpleNamespace(model=SimpleNamespace(layers=[None] * n))
    for cfg in _planted(load('specforge-qwen3-8b-dflash.json')) + _planted(load('specforge-qwen3-8b-dspark.json')):
        spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=SimpleNamespace(**copy.deepcopy(cfg))))
        got = ns['_get_eagle3_aux_layers_from_config'](SimpleNamespace(speculative_config=spec)) if v1 else ns['get_eagle3_aux_layers_from_config'](spec)
        got = got or ns['get_eagle3_default_aux_hidden_state_layers'](target)   # set_eagle3_aux_hidden_state_layers: no ids, the model's
        mine = block_reading(cfg, n, row)
        assert mine.layer_ids == tuple(got), (cfg, mine.field, got)
        assert mine.resid == tuple(got)   # vLLM's layer id L is resid[L]

def _sglang_resolver(whl):
    "SGLang 0.5.23's _resolve_dflash_aux_hidden_state, its parsers and qwen3's set_dflash_layers_to_capture, compiled from the wheel."
    t = lambda p: source(whl, 'sglang/srt/' + p)
    base = {'Any': Any, 'List': List, 'Optional': Optional, 'Tuple': Tuple, 'Dict': Dict}
    from dataclasses import dataclass
    du = compiled(t('speculative/dflash_utils.py'), ('DEFAULT_DFLASH_MASK_TOKEN', 'build_target_layer_ids', '_cfg_get', '_get_text_config', '_get_dflash_config', '_parse_optional_int',
                                                    'DFlashDraftConfig', 'parse_dflash_draft_config'), {**base, 'dataclass': dataclass, 'Integral': numbers.Integral})
    ds = compiled(t('speculative/dspark_components/dspark_config.py'), ('SUPPORTED_DSPARK_MARKOV_HEAD_TYPES', '_get_nested_config', '_get_dspark_config',
                  'DSparkDraftConfig', 'parse_dspark_draft_config'), {**base, 'msgspec': SimpleNamespace(Struct=_Struct), '_cfg_get': du['_cfg_get'],
                  '_get_text_config': du['_get_text_config'], 'parse_dflash_draft_config': du['parse_dflash_draft_config']})
    warnings = []
    rs = compiled(t('model_executor/model_runner_components/spec_aux_hidden_state.py'), ('_map_muse_target_layer_ids', '_MUSE_LAYER_OUTPUT_DRAFT_ARCHITECTURES',
                  '_resolve_dflash_aux_hidden_state'), {**base, 'logger': SimpleNamespace(warning=lambda *a: warnings.append(a)), 'is_deepseek_v4': lambda c: False,
                  'get_spec': lambda: SimpleNamespace(speculative_draft_model_path='d', speculative_draft_model_revision=None)})
    q3 = compiled(t('models/qwen3.py'), ('set_dflash_layers_to_capture',), dict(base), within='Qwen3ForCausalLM')
    mods = {'sglang.srt.speculative.dflash_utils': du, 'sglang.srt.speculative.dspark_components.dspark_config': ds}
    return rs, q3, mods

@pytest.mark.parametrize('name', sorted(BLOCK))
def test_sglang_rows_are_sglangs_own_code(name):
    "SGLang 0.5.23's resolver (fields, default, DSpark's own ids and markov check, range check) and qwen3's capture setter, on every planted config."
    whl = _wheel('sglang', '0.5.23')
    rs, q3, mods = _sglang_resolver(whl)
    family, n = BLOCK[name]
    row = next(r for r in BLOCK_ROWS if r.engine == 'sglang' and r.family == family.lower())
    saved, read, refused = {k: sys.modules.get(k) for k in mods}, 0, 0
    try:
        for k, ns in mods.items():
            m = types.ModuleType(k); m.__dict__.update(ns); sys.modules[k] = m
        for cfg in _planted(load(name)) + [{**load(name), 'dflash_config': {**load(name)['dflash_config'], 'target_layer_ids': [1, n]}},
                                           {**load(name), 'dflash_config': {**load(name)['dflash_config'], 'markov_rank': 0}}]:
            hf = SimpleNamespace(**copy.deepcopy(cfg))
            out = SimpleNamespace(dflash_target_layer_ids=None)
            algo = SimpleNamespace(is_dflash_family=lambda: True, is_dspark=lambda: family == 'DSpark')
            model_config = SimpleNamespace(hf_text_config=SimpleNamespace(num_hidden_layers=n), hf_config=SimpleNamespace(model_type='qwen3'))
            rs['ModelConfig'] = SimpleNamespace(from_server_args=lambda *a, **k: SimpleNamespace(hf_config=hf))
            mine = block_reading(cfg, n, row, 'qwen3')
            try: rs['_resolve_dflash_aux_hidden_state'](config=out, server_args=None, model_config=model_config, spec_algorithm=algo, is_draft_worker=False)
            except ValueError as e:
                assert mine.refused, (cfg, str(e)); refused += 1; continue
            target = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True), model=SimpleNamespace())
            q3['set_dflash_layers_to_capture'](target, out.dflash_target_layer_ids)
            assert mine.refused is None and mine.layer_ids == tuple(out.dflash_target_layer_ids), (cfg, mine, out)
            assert mine.resid == tuple(target.model.layers_to_capture)   # captured before layer k + 1: resid[k + 1]
            read += 1
        assert read >= 8 and refused >= 1, (read, refused)   # both roads taken
    finally:
        for k, v in saved.items():
            if v is None: sys.modules.pop(k, None)
            else: sys.modules[k] = v

def test_sglang_default_is_build_target_layer_ids():
    "family_wiring.spread_layer_ids against SGLang's build_target_layer_ids, for targets and draft depths around the public ones."
    from eagle3_workbench.family_wiring import spread_layer_ids
    ns = compiled(source(_wheel('sglang', '0.5.23'), 'sglang/srt/speculative/dflash_utils.py'), ('build_target_layer_ids',), {'List': List})
    for n in (4, 5, 12, 36, 61, 93):
        for d in (1, 2, 3, 5, 8):
            assert spread_layer_ids(n, d) == ns['build_target_layer_ids'](n, d), (n, d)


# ---- README ------------------------------------------------------------------------------------------------------

def test_readme_family_table_is_rendered_from_the_rows():
    readme = (Path(__file__).parent.parent/'README.md').read_text()
    assert family_table() in readme, "README's draft-family table differs from family_wiring.family_table(): paste it again"
    assert {f.name for f in FAMILY_ROWS} <= set(readme.split('## Draft families', 1)[1].split('\n## ', 1)[0].replace('|', ' ').split())
