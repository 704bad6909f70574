"The command line as a user runs it: subprocesses, exit codes, and the JSON they print."
import json, subprocess, sys
from pathlib import Path
import pytest

FIX = Path(__file__).parent/'fixtures'/'draft-configs'

def cli(*args, timeout=600):
    return subprocess.run(['eagle3-workbench', *map(str, args)], capture_output=True, text=True, timeout=timeout)

def test_wiring_json_for_a_public_config():
    r = cli('wiring', FIX/'specforge-gpt-oss-120B-eagle3.json', '--n-layers', 36, '--model-type', 'gpt_oss', '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    fed = {x['engine']: x['fed'] for x in out['readings']}
    assert fed['SGLang <PR#25454'] == [2, 18, 34] and fed['vLLM top-level only'] == [2, 18, 33]   # older vLLM: ignores the nested ids
    assert fed['vLLM 0.32'] == [1, 17, 33]   # vLLM 0.32 reads the nested ids, verbatim
    assert out['n_layers'] == 36 and out['disagreements']

def test_bad_input_exit_code_and_one_line_error(tmp_path):
    r = cli('wiring', tmp_path/'missing.json', '--n-layers', 12)
    assert r.returncode == 2 and r.stderr.strip().count('\n') == 0 and 'no config.json' in r.stderr
    r = cli('run', '--target', tmp_path/'nowhere', '--json')
    assert r.returncode == 2 and 'no such model directory' in r.stderr and r.stdout == ''

@pytest.mark.slow
def test_run_json_on_the_zoo():
    r = cli('run', '--n-prompts', 3, '--max-new-tokens', 12, '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['resid_layers'] == [2, 6, 9] and out['lossless'] is True
    assert 1 <= out['accept_length'] <= 6 and len(out['per_position_acceptance']) == 5
    assert out['cycles'] >= 3 and out['tokens'] >= 36 and 0 <= out['accept_rate'] <= 1
    r = cli('run', '--n-prompts', 3, '--max-new-tokens', 12, '--wiring', '0,2,6', '--topk', 3, '--num-draft-tokens', 8, '--json')
    bad = json.loads(r.stdout)
    assert r.returncode == 0 and bad['resid_layers'] == [0, 2, 6] and bad['lossless'] is True

@pytest.mark.slow
def test_diagnose_json_on_the_zoo():
    r = cli('diagnose', '--n-prompts', 16, '--no-accept', '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out['verdict'] == 'ok' and out['recommended']['resid_layers'] == [2, 6, 9]
    r = cli('diagnose', '--n-prompts', 16, '--no-accept', '--wiring', '0,2,6', '--json')
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out['verdict'] == 'miswired'
    assert {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= {f['code'] for f in out['findings']}
    assert out['recommended']['sglang_eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]
    assert all({'code', 'severity', 'message', 'evidence'} <= set(f) for f in out['findings'])

def test_zoo_list():
    r = cli('zoo', 'list')
    assert r.returncode == 0 and {'zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', 'zoo:tiny-llama', 'zoo:tiny-llama-eagle3'} <= set(r.stdout.split())
    lines = {l.split()[0]: l for l in r.stdout.splitlines()}   # each model says what it is
    assert 'llama architecture, 10 layers, hidden 160' in lines['zoo:tiny-llama']
    assert 'EAGLE-3 draft of zoo:tiny-dsv3' in lines['zoo:tiny-dsv3-eagle3'] and 'resid[2, 6, 9]' in lines['zoo:tiny-dsv3-eagle3']

def test_wiring_says_which_sglang_rule_it_assumed():
    cfg = FIX/'specforge-llama3-8B-eagle3.json'
    r = cli('wiring', cfg, '--n-layers', 32)
    assert r.returncode == 0 and "assumes a DeepSeek/Kimi target" in r.stdout and '--model-type' in r.stdout
    assert "assumes" in json.loads(cli('wiring', cfg, '--n-layers', 32, '--json').stdout)['assumed']
    r = cli('wiring', cfg, '--n-layers', 32, '--model-type', 'llama')
    assert 'PR #25454 did not change this model file' in r.stdout and 'assumes' not in r.stdout
    assert 'assumed' not in json.loads(cli('wiring', cfg, '--n-layers', 32, '--model-type', 'llama', '--json').stdout)

def test_help_imports_nothing_heavy():
    code = ('import sys\nfrom eagle3_workbench.cli import main\n'
            'for argv in (["--help"], ["run", "--help"], ["report", "--help"], ["diagnose", "--help"]):\n'
            '    try: main(argv)\n    except SystemExit: pass\n'
            'print(sorted(m for m in ("torch", "transformers", "numpy", "papermill") if m in sys.modules))')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == '[]', r.stdout[-500:] + r.stderr[-500:]
