"""The JSON that scripts read from `run`, `diagnose` and `wiring` stays what it was when recorded
(tests/fixtures/cli-json/record.py wrote it; rerun that script only for an intended change, and say so in the commit)."""
import json, math, sys
from pathlib import Path
import pytest

HERE = Path(__file__).parent/'fixtures'/'cli-json'
sys.path.insert(0, str(HERE))
from record import CASES, run_case   # noqa: E402

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
@pytest.mark.parametrize('name', list(CASES))
def test_cli_json_unchanged(name):
    want = json.loads((HERE/f'{name}.json').read_text())
    assert (d := same(run_case(CASES[name]), want)) is None, f"`eagle3-workbench {' '.join(CASES[name])}` changed: {d}"
