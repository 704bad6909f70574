"""The JSON that scripts read from `run`, `diagnose` and `wiring`: what it means (checked against the zoo's recipe), and
that it stays what it was when recorded (tests/fixtures/cli-json/record.py wrote it; rerun that script only for an
intended change, and say so in the commit). Each command runs once, in a process of its own (exit codes are the point:
forked from an interpreter that imported torch once, `forked_cli.py`)."""
import json, math, sys
from pathlib import Path
import pytest

HERE = Path(__file__).parent/'fixtures'/'cli-json'
sys.path.insert(0, str(HERE))
from record import CASES, run_cli, strip   # noqa: E402

_RUNS = {}
@pytest.fixture
def output(forked_cli, tmp_path):
    "(exit code, JSON) of the recorded case `name`, run once per test session."
    def get(name):
        if name not in _RUNS: _RUNS[name] = run_cli(CASES[name], lambda argv: forked_cli.run(argv, tmp_path, 900))
        return _RUNS[name]
    return get

def same(a, b, path='$'):
    "Where two JSON values differ (floats to 1e-6 relative), or None."
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and (a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)): return None
        return f"{path}: {a!r} != {b!r}"
    if type(a) != type(b): return f"{path}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
    if isinstance(a, dict):
        if set(a) != set(b): return f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        return next((d for k in a if (d := same(a[k], b[k], f"{path}.{k}"))), None)
    if isinstance(a, list):
        if len(a) != len(b): return f"{path}: length {len(a)} != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := same(x, y, f"{path}[{i}]"))), None)
    return None if a == b else f"{path}: {a!r} != {b!r}"

def test_same_reports_differences():
    assert same({'a': [1, 2.0]}, {'a': [1, 2.0 + 1e-9]}) is None
    assert same({'a': [1, 2.0]}, {'a': [1, 2.1]}) == '$.a[1]: 2.0 != 2.1'
    assert same({'a': 1}, {'b': 1}) == "$: keys ['a', 'b'] differ"

@pytest.mark.slow
def test_run_json_on_the_zoo(output):
    rc, out = output('run')   # 3 prompts x 12 new tokens, the zoo pair as trained (resid[2, 6, 9])
    assert rc == 0 and out['resid_layers'] == [2, 6, 9] and out['lossless'] is True
    assert 1 <= out['accept_length'] <= 6 and len(out['per_position_acceptance']) == 5
    assert out['cycles'] >= 3 and out['tokens'] >= 36 and 0 <= out['accept_rate'] <= 1
    rc, bad = output('run_tree')   # a tree (topk 3, 8 draft tokens) on the embedding-captured wiring: still lossless
    assert rc == 0 and bad['resid_layers'] == [0, 2, 6] and bad['lossless'] is True

@pytest.mark.slow
def test_diagnose_json_on_the_zoo(output):
    rc, out = output('diagnose')
    assert rc == 0 and out['verdict'] == 'ok' and out['recommended']['resid_layers'] == [2, 6, 9]
    rc, out = output('diagnose_fault')
    assert rc == 1 and out['verdict'] == 'miswired'
    assert {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= {f['code'] for f in out['findings']}
    assert out['recommended']['sglang_eagle_aux_hidden_state_layer_ids'] == [1, 5, 8]
    assert all({'code', 'severity', 'message', 'evidence'} <= set(f) for f in out['findings'])

@pytest.mark.slow
@pytest.mark.parametrize('name', list(CASES))
def test_cli_json_unchanged(name, output):
    want = json.loads((HERE/f'{name}.json').read_text())
    assert (d := same(strip(output(name)[1]), want)) is None, f"`eagle3-workbench {' '.join(CASES[name])}` changed: {d}"
