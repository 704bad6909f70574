"""The command line as a user runs it: processes of their own (forked from an interpreter that imported torch once,
`forked_cli.py`, which test_bad_inputs holds equal to a new one), exit codes, and the JSON they print."""
import json, subprocess, sys, time
from pathlib import Path
import pytest

FIX = Path(__file__).parent/'fixtures'/'draft-configs'

@pytest.fixture
def cli(forked_cli, tmp_path):
    return lambda *args, timeout=600: forked_cli.run(list(args), tmp_path, timeout)

def test_wiring_json_for_a_public_config(cli):
    r = cli('wiring', FIX/'specforge-gpt-oss-120B-eagle3.json', '--n-layers', 36, '--model-type', 'gpt_oss', '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    fed = {x['engine']: x['fed'] for x in out['readings']}
    assert fed['SGLang 0.5.12'] == [2, 18, 34] and fed['vLLM 0.21'] == [2, 18, 33]   # older vLLM: ignores the nested ids
    assert fed['vLLM 0.32'] == [1, 17, 33]   # vLLM 0.32 reads the nested ids, verbatim
    assert out['n_layers'] == 36 and out['disagreements']

def test_bad_input_exit_code_and_one_line_error(cli, tmp_path):
    r = cli('wiring', tmp_path/'missing.json', '--n-layers', 12)
    assert r.returncode == 2 and r.stderr.strip().count('\n') == 0 and 'no config.json' in r.stderr
    r = cli('run', '--target', tmp_path/'nowhere', '--json')
    assert r.returncode == 2 and 'no such model directory' in r.stderr and r.stdout == ''

def test_wiring_on_pipeline_stages(cli):
    "The GPT-OSS-120B draft's ids on 2 stages of 36 layers (18 each): vLLM 0.32's gpt_oss.py and SGLang 0.5.23 both refuse to start;"
    " were SGLang started, its last stage (layers 18..35) would hold only the states from 18 on."
    r = cli('wiring', FIX/'specforge-gpt-oss-120B-eagle3.json', '--n-layers', 36, '--model-type', 'gpt_oss', '--pp', 2, '--json')
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    st = {s['engine']: s for s in out['pipeline']['stages']}
    sgl = st['SGLang 0.5.23']
    assert sgl['split'] == [[0, 18], [18, 36]] and sgl['starts'] == 'refused'
    assert sgl['findings'][0]['evidence']['lost'] == [k for k in sgl['fed_one_stage'] if k < 18]
    assert st['vLLM 0.32']['starts'] == 'refused' and st['vLLM 0.32']['fed'] is None
    r = cli('wiring', FIX/'specforge-gpt-oss-120B-eagle3.json', '--n-layers', 36, '--pp', 2, '--pp-partition', '20,20')
    assert r.returncode == 2 and r.stderr.strip().count('\n') == 0 and '--pp-partition 20,20' in r.stderr and r.stdout == ''

def test_zoo_list(cli):
    r = cli('zoo', 'list')
    assert r.returncode == 0 and {'zoo:tiny-dsv3', 'zoo:tiny-dsv3-eagle3', 'zoo:tiny-llama', 'zoo:tiny-llama-eagle3'} <= set(r.stdout.split())
    lines = {l.split()[0]: l for l in r.stdout.splitlines()}   # each model says what it is
    assert 'llama architecture, 10 layers, hidden 160' in lines['zoo:tiny-llama']
    assert 'EAGLE-3 draft of zoo:tiny-dsv3' in lines['zoo:tiny-dsv3-eagle3'] and 'resid[2, 6, 9]' in lines['zoo:tiny-dsv3-eagle3']

def test_wiring_says_which_sglang_rule_it_assumed(cli):
    cfg = FIX/'specforge-llama3-8B-eagle3.json'
    r = cli('wiring', cfg, '--n-layers', 32)
    assert r.returncode == 0 and "assumes a DeepSeek/Kimi target" in r.stdout and '--model-type' in r.stdout
    assert "assumes" in json.loads(cli('wiring', cfg, '--n-layers', 32, '--json').stdout)['assumed']
    r = cli('wiring', cfg, '--n-layers', 32, '--model-type', 'llama')
    assert 'SGLang 0.5.23 reads the ids as SGLang 0.5.12 did' in r.stdout and 'assumes' not in r.stdout
    assert 'assumed' not in json.loads(cli('wiring', cfg, '--n-layers', 32, '--model-type', 'llama', '--json').stdout)

def test_help_imports_nothing_heavy():
    code = ('import sys\nfrom eagle3_workbench.cli import main\n'
            'for argv in (["--help"], ["run", "--help"], ["report", "--help"], ["diagnose", "--help"]):\n'
            '    try: main(argv)\n    except SystemExit: pass\n'
            'print(sorted(m for m in ("torch", "transformers", "numpy", "papermill") if m in sys.modules))')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == '[]', r.stdout[-500:] + r.stderr[-500:]

WIRING_CASES = ([str(FIX/'specforge-llama3-8B-eagle3.json'), '--n-layers', '32'],   # a lone config.json
                ['zoo:tiny-llama-eagle3', '--target', 'zoo:tiny-llama'],            # a draft folder with weights: names from the headers
                [str(FIX/'specforge-gpt-oss-120B-eagle3.json'), '--n-layers', '36', '--model-type', 'gpt_oss', '--pp', '2'])   # and the stages

@pytest.mark.parametrize('args', WIRING_CASES)
def test_wiring_answers_without_torch(cli, args):
    "`wiring` reads configs and safetensors headers only: a new interpreter answers without importing torch, quickly,"
    " and prints what the command prints where torch is loaded (the forked CLI)."
    code = ('import sys, time\nt = time.perf_counter()\nfrom eagle3_workbench.cli import main\n'
            f'rc = main(["wiring", *{args!r}, "--json"])\n'
            'print("rc", rc, "heavy", sorted(m for m in ("torch", "transformers", "numpy", "safetensors") if m in sys.modules), '
            '"took", time.perf_counter() - t, file=sys.stderr)')
    t = time.perf_counter()
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    wall = time.perf_counter() - t
    assert r.returncode == 0 and "rc 0 heavy []" in r.stderr, r.stderr[-800:]
    assert wall < 3.0, f"wiring took {wall:.2f} s in a new interpreter"   # importing torch alone takes longer on this kind of machine
    heavy = cli('wiring', *args, '--json')
    assert heavy.returncode == 0 and json.loads(r.stdout) == json.loads(heavy.stdout)
