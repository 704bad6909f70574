"Every chapter in nbs/ is also a test: run each notebook top to bottom as nbdev_test does."
import subprocess, sys
from pathlib import Path
import pytest

NBS = sorted((Path(__file__).parent.parent/'nbs').glob('*.ipynb'))   # every chapter, and the tutorial (index.ipynb)

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook_runs(nb):
    r = subprocess.run(['nbdev_test', '--path', str(nb), '--do_print'], capture_output=True, text=True,
                       cwd=nb.parent.parent, timeout=900)
    assert r.returncode == 0, f"{nb.name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook_stores_what_a_reader_sees(nb):
    "A reader on the web sees each chapter's text outputs (scripts/store_outputs.py), never a multi-megabyte plotly bundle."
    import json
    cells = json.loads(nb.read_text())['cells']
    outs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    assert outs, f"{nb.name} stores no outputs: run `OMP_NUM_THREADS=1 python scripts/store_outputs.py {nb.relative_to(nb.parent.parent)}`"
    assert not any('application/vnd.plotly.v1+json' in o.get('data', {}) for o in outs), f"{nb.name} stores a plotly bundle"
    assert len(json.dumps(outs)) < 400_000, f"{nb.name} stores {len(json.dumps(outs)) / 1e3:.0f} kB of outputs"
