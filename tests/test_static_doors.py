"""The doctor's static and runtime findings from the command a user runs: `diagnose --draft DIR --json` on a copy of the zoo
draft with one fault planted in its files (issue 49: every code of the README's failure-class table from a command),
each beside the clean draft, which gives none of them."""
import json, shutil
from pathlib import Path
import pytest
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
DRAFT = ROOT/'eagle3_workbench'/'zoo_data'/'tiny-dsv3-eagle3'
CODES = ('AUX_CONFIG_MISSING', 'ROPE_MISMATCH', 'VARIANT_IGNORED', 'NONFINITE')

def edited(tmp:Path, config=None, weights=None)->Path:
    "A copy of the zoo draft with its config.json and weights edited in place (each edit a function of the dict)."
    d = tmp/'draft'; shutil.copytree(DRAFT, d, ignore=shutil.ignore_patterns('training_dump'))
    c = json.loads((d/'config.json').read_text())
    if config: config(c)
    (d/'config.json').write_text(json.dumps(c))
    if weights:
        sd = load_file(str(d/'model.safetensors')); weights(sd); save_file(sd, str(d/'model.safetensors'))
    return d

def diagnose_codes(forked_cli, tmp_path, draft, *args)->list:
    p = forked_cli.run(['diagnose', '--target', 'zoo:tiny-dsv3', '--draft', str(draft), '--n-prompts', '8', '--no-accept', '--json', *args], tmp_path, 900)
    assert p.returncode in (0, 1, 3), p.stderr[-2000:]
    return [f['code'] for f in json.loads(p.stdout)['findings']]

def _no_ids(c): c['eagle_config'].pop('eagle_aux_hidden_state_layer_ids')
def _fc_norm(c): c['fc_norm'] = True
def _fc_norm_weights(sd):
    for i in range(3): sd[f'fc_norm.{i}.weight'] = torch.ones(sd['fc.weight'].shape[1] // 3, dtype=sd['fc.weight'].dtype)
def _nan_fc(sd): sd['fc.weight'][0, 0] = float('nan')

PLANTED = {   # code: (config edit, weights edit, extra flags)
    'AUX_CONFIG_MISSING': (_no_ids, None, ()),
    'ROPE_MISMATCH': (lambda c: c.update(rope_theta=500000.0), None, ()),
    'VARIANT_IGNORED': (_fc_norm, _fc_norm_weights, ('--engine', 'sglang==0.5.6')),   # SGLang reads fc_norm from 0.5.12 (engine_rows.VARIANT_SUPPORT)
    'NONFINITE': (None, _nan_fc, ()),
}

@pytest.mark.slow
@pytest.mark.parametrize('code', CODES)
def test_each_code_from_diagnose_on_the_draft_folder(forked_cli, tmp_path, code):
    config, weights, flags = PLANTED[code]
    assert code in diagnose_codes(forked_cli, tmp_path, edited(tmp_path, config, weights), *flags)

@pytest.mark.slow
def test_the_clean_draft_gives_none_of_them(forked_cli, tmp_path):
    got = set(diagnose_codes(forked_cli, tmp_path, edited(tmp_path), '--engine', 'sglang==0.5.6'))
    assert not got & set(CODES), got
