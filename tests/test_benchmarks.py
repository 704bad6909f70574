"The benchmark runner produces every benchmark's numbers (no timing assertions: timings belong in BENCHMARKS.md)."
import json, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ('load', 'capture', 'forward_hooks', 'cycle', 'scale', 'acceptance', 'first_figure', 'doctor', 'report')
KEYS = {'metric', 'value', 'target', 'met', 'note'}

def _not_measurable(row):
    "A row that says why it has no number (an optional package missing, a feature not there yet)."
    return row['value'] is None and any(w in row['note'] for w in ('not installed', 'not available', 'cannot run', 'no engine captures'))

@pytest.mark.slow
def test_quick_benchmarks_produce_numbers(tmp_path):
    md, js = tmp_path/'B.md', tmp_path/'B.json'
    p = subprocess.run([sys.executable, str(ROOT/'benchmarks'/'run.py'), '--quick', '--threads', '1', '--out', str(md), '--json', str(js)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert md.exists()
    text = md.read_text()
    data = json.loads(js.read_text())
    assert data['errors'] == []
    assert list(data['benchmarks']) == list(BENCHMARKS)
    for name, res in data['benchmarks'].items():
        rows = res['rows']
        assert rows, name
        for r in rows:
            assert KEYS <= set(r), (name, r)
            assert isinstance(r['value'], (int, float)) or _not_measurable(r), (name, r)
            assert r['met'] in (True, False, None), (name, r)
            assert r['metric'] in text  # every row is in the markdown table
        numeric = [r for r in rows if isinstance(r['value'], (int, float))]
        assert numeric or all(_not_measurable(r) for r in rows), name
    for h in ('cores', 'RAM', 'python', 'torch', 'transformers', 'eagle3-workbench'):
        assert h in text
