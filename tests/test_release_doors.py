"""Doors for the release classes: `wiring --engine sglang==0.5.6` and the doctor's static checks name what a release's fixed
code does to a draft (AUX_COUNT_FIXED, TARGET_WIDTH_ASSUMED, rows of `engine_rows.LIMITS`), read from `--json`; the twins
(three aux states, a release that reads the count, a draft as wide as its target) must not."""
import json, subprocess, sys
from pathlib import Path
import pytest

FIX = Path(__file__).parent/'fixtures'/'draft-configs'

def _config(tmp_path, ids, **kw):
    "The public SpecForge Llama-3 8B draft config with its aux ids (and any key) replaced."
    cfg = json.loads((FIX/'specforge-llama3-8B-eagle3.json').read_text())
    cfg['eagle_config'] = dict(eagle_aux_hidden_state_layer_ids=list(ids), use_aux_hidden_state=True)
    cfg.update(kw)
    p = tmp_path/f"draft-{len(ids)}-{kw.get('target_hidden_size', 'same')}.json"; p.write_text(json.dumps(cfg))
    return p, cfg

def _wiring(*args):
    "`wiring ... --json` in a new interpreter, asserting it never imported torch; its rc and JSON."
    code = ('import sys, json\nfrom eagle3_workbench.cli import main\n'
            f'rc = main(["wiring", *{[str(a) for a in args]!r}, "--json"])\n'
            'assert "torch" not in sys.modules, "wiring imported torch"\nsys.exit(rc)')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-800:]
    return json.loads(r.stdout)

def test_wiring_names_a_fixed_aux_count(tmp_path):
    p, cfg = _config(tmp_path, (1, 9, 17, 29))
    f, = _wiring(p, '--n-layers', 32, '--engine', 'sglang==0.5.6')['findings']
    h = cfg['hidden_size']   # SGLang 0.5.6 builds Linear(hidden_size * 3, hidden_size); the checkpoint's fc is [h, 4 * h]
    assert (f['code'], f['severity'], f['evidence']['num_aux'], f['evidence']['fixed']) == ('AUX_COUNT_FIXED', 'error', 4, 3)
    assert f"[{h}, {4 * h}]" in f['message'] and f"[{h}, {3 * h}]" in f['message'] and 'llama_eagle3.py' in f['message']
    text = subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', 'wiring', str(p), '--n-layers', '32', '--engine', 'sglang==0.5.6'],
                          capture_output=True, text=True).stdout
    assert 'AUX_COUNT_FIXED (error): SGLang 0.5.6 builds' in text

def test_wiring_twins_are_silent(tmp_path):
    three, _ = _config(tmp_path, (1, 15, 28))
    four, _ = _config(tmp_path, (1, 9, 17, 29))
    assert _wiring(three, '--n-layers', 32, '--engine', 'sglang==0.5.6')['findings'] == []   # three states: what 0.5.6 builds
    assert _wiring(four, '--n-layers', 32, '--engine', 'sglang==0.5.12')['findings'] == []  # 0.5.12 reads len(ids)
    assert _wiring(four, '--n-layers', 32)['findings'] == []   # no release named: no release's limits

def test_wiring_names_a_width_assumed(tmp_path):
    narrow, cfg = _config(tmp_path, (1, 15, 28), target_hidden_size=8192)
    f, = _wiring(narrow, '--n-layers', 32, '--engine', 'sglang==0.5.8')['findings']
    assert (f['code'], f['evidence']['draft_hidden'], f['evidence']['target_hidden']) == ('TARGET_WIDTH_ASSUMED', cfg['hidden_size'], 8192)
    assert _wiring(narrow, '--n-layers', 32, '--engine', 'sglang==0.5.12')['findings'] == []

def test_static_checks_run_the_release_limits(tmp_path):
    "The doctor's static checks on a loaded four-aux pair: AUX_COUNT_FIXED on 0.5.6, not on 0.5.12, not for a three-aux twin."
    from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_draft
    from eagle3_workbench.loading import save_draft, load_pair
    from eagle3_workbench.checks import static_findings
    save_tiny_target(tmp_path/'t', 'llama')
    codes = {}
    for ids in ((1, 2, 3), (1, 2, 3, 4)):
        cfg = tiny_draft_config(eagle_config=dict(eagle_aux_hidden_state_layer_ids=list(ids), use_aux_hidden_state=True))
        save_draft(random_draft(cfg), tmp_path/f'd{len(ids)}', cfg)
        pair = load_pair(str(tmp_path/'t'), str(tmp_path/f'd{len(ids)}'))
        for rel in ('0.5.6', '0.5.12'):
            codes[len(ids), rel] = {f.code for f in static_findings(pair, f'sglang=={rel}')[0]}
    assert 'AUX_COUNT_FIXED' in codes[4, '0.5.6']
    assert not {c for k, cs in codes.items() if k != (4, '0.5.6') for c in cs} & {'AUX_COUNT_FIXED', 'TARGET_WIDTH_ASSUMED'}

OBS = Path(__file__).parent/'fixtures'/'observed'
SMALL = ['--target', 'zoo:tiny-llama', '--n-prompts', 2, '--max-new-tokens', 8, '--json']

def _compare(forked_cli, tmp_path, observed, *extra)->tuple:
    "(exit code, finding codes, findings by code) of `compare --observed OBSERVED ... --json` in a process of its own."
    p = forked_cli.run(['compare', '--observed', observed, *SMALL, *extra], tmp_path, 900)
    j = json.loads(p.stdout)
    assert 'error' not in j, j
    return p.returncode, [f['code'] for f in j['findings']], {f['code']: f for f in j['findings']}

def test_a_knob_the_engine_writes_nowhere_is_stated(forked_cli, tmp_path):
    "SGLang 0.5.23 reads SGLANG_SIMULATE_ACC_LEN from the environment (srt/environ.py:527) and replaces the accept index"
    " with a simulated one (srt/speculative/eagle_utils.py:807-840); its responses do not show it, `--setting` states it."
    _, codes, by = _compare(forked_cli, tmp_path, OBS/'sglang_generate.jsonl', '--setting', 'SGLANG_SIMULATE_ACC_LEN=3.5')
    assert 'ACCEPT_SYNTHETIC' in codes and 'SGLANG_SIMULATE_ACC_LEN 3.5' in by['ACCEPT_SYNTHETIC']['message']
    assert by['ACCEPT_SYNTHETIC']['evidence']['settings']['simulate_acc_len'] == 3.5
    _, codes, _ = _compare(forked_cli, tmp_path, OBS/'sglang_generate.jsonl', '--setting', 'SGLANG_SIMULATE_ACC_LEN=-1')   # SGLang's default: off
    assert 'ACCEPT_SYNTHETIC' not in codes

def test_vllm_fly_is_lossy_read_or_stated(forked_cli, tmp_path):
    "vLLM 0.34's rejection_sample_method 'fly' (config/speculative.py:98, 616-617, 1700-1720): read from the log's non-default"
    " args where vLLM writes it, stated with --setting where the output does not show it; the clean log names neither."
    log = (OBS/'vllm_server.log').read_text()
    plain = "'num_speculative_tokens': 3}}"
    assert plain in log
    planted = tmp_path/'fly.log'; planted.write_text(log.replace(plain, "'num_speculative_tokens': 3, 'rejection_sample_method': 'fly'}}"))
    _, codes, by = _compare(forked_cli, tmp_path, planted)
    assert 'ACCEPT_LOSSY' in codes and 'ACCEPT_SYNTHETIC' not in codes
    assert "rejection_sample_method 'fly'" in by['ACCEPT_LOSSY']['message'] and 'fly.py' in by['ACCEPT_LOSSY']['evidence']['rows'][0]['source']
    _, codes, _ = _compare(forked_cli, tmp_path, OBS/'vllm_server.log', '--setting', 'rejection_sample_method=fly')
    assert 'ACCEPT_LOSSY' in codes
    _, codes, _ = _compare(forked_cli, tmp_path, OBS/'vllm_server.log')
    assert not {'ACCEPT_LOSSY', 'ACCEPT_SYNTHETIC'} & set(codes)

@pytest.mark.parametrize('setting, said', [('SGLANG_SIMULATE_ACC_LEN=many', 'SGLANG_SIMULATE_ACC_LEN takes a number'),
                                           ('rejection_sample_method=loose', 'takes one of standard, synthetic, block, fly'),
                                           ('speculative_num_steps=3', 'is no acceptance setting'),
                                           ('SGLANG_SIMULATE_ACC_LEN', 'expected NAME=VALUE')])
def test_a_bad_setting_is_one_line(setting, said):
    r = subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', 'compare', '--observed', str(OBS/'vllm_server.log'), '--setting', setting],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == '' and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith('eagle3-workbench compare: error: --setting ') and said in r.stderr

def _baseline(*args):
    "`compare --observed NEW --baseline OLD ...` in a new interpreter: (exit code, stdout, stderr)."
    r = subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', 'compare', *map(str, args)], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr

def _mean_accept(path)->float:
    "The mean over requests of each request's tokens per verify step, read straight from SGLang's histograms (1 + accepted per step)."
    hs = [json.loads(l)['meta_info']['spec_correct_drafts_histogram'] for l in path.read_text().splitlines()]
    return sum(sum((1 + j) * c for j, c in enumerate(h)) / sum(h) for h in hs) / len(hs)

def test_baseline_names_a_release_regression():
    "The same 8 requests on a release that accepts 1 where the other accepted 3 (make_release_outputs.py): surely below, exit 1."
    new, old = OBS/'sglang_release_regressed.jsonl', OBS/'sglang_generate_output_ids.jsonl'
    rc, out, err = _baseline('--observed', new, '--baseline', old, '--engine', 'sglang==0.5.23', '--baseline-engine', 'sglang==0.5.12', '--json')
    j = json.loads(out)
    assert rc == 1 and j['verdict'] == 'below' and j['paired'], err
    f, = j['findings']
    assert f['code'] == 'RELEASE_REGRESSION' and 'SGLang 0.5.23' in f['message'] and 'SGLang 0.5.12' in f['message']
    c = j['change']
    assert c['lo'] <= _mean_accept(new) - _mean_accept(old) <= c['hi'] < 0   # the paired change brackets the drop the files hold
    assert any(r[0] == '0.5.13' for r in j['rows'])   # the rows between the releases: PR #25454 came in 0.5.13

def test_baseline_twins():
    same = OBS/'sglang_generate_output_ids.jsonl'
    rc, out, _ = _baseline('--observed', same, '--baseline', same, '--engine', 'sglang==0.5.23', '--json')
    assert (rc, json.loads(out)['verdict'], json.loads(out)['findings']) == (0, 'not below', [])
    rc, out, _ = _baseline('--observed', OBS/'sglang_release_two_b.jsonl', '--baseline', OBS/'sglang_release_two_a.jsonl', '--engine', 'sglang==0.5.23', '--json')
    assert (rc, json.loads(out)['verdict'], json.loads(out)['findings']) == (3, 'cannot tell', [])   # one of two requests dropped
    rc, out, err = _baseline('--observed', OBS/'sglang_release_two_b.jsonl', '--baseline', OBS/'sglang_release_two_a.jsonl')
    assert rc == 2 and out == '' and len(err.strip().splitlines()) == 1 and 'give --engine ENGINE==VERSION' in err
