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


def test_saving_from_jupyterlab_keeps_stored_outputs():
    "The save hook of `jupyter lab --config=jupyter_server_config.py`: a chapter run and saved unedited is written byte for byte as stored."
    import copy, json, sys
    import nbformat
    sys.path.insert(0, str(Path(__file__).parent.parent/'scripts'))
    from clean_on_save import stored_cells
    nb = next(p for p in NBS if p.stem == 'index')   # the tutorial
    raw = nb.read_text(encoding='utf-8')
    old = json.loads(raw)
    ran = copy.deepcopy(old)   # what JupyterLab sends after Run All: new counts, plotly bundles, execution metadata, kernel info
    ran['metadata']['language_info'] = {'name': 'python', 'version': '3.11'}
    for i, c in enumerate(c for c in ran['cells'] if c['cell_type'] == 'code'):
        c['execution_count'], c['metadata']['execution'] = 100 + i, {'iopub.status.busy': '2026-01-01T00:00:00Z'}
        c['outputs'] = [{'output_type': 'display_data', 'metadata': {}, 'data': {'application/vnd.plotly.v1+json': {'data': [0] * 10_000},
                                                                                   'text/plain': 'Figure'}}]
    saved = lambda new: nbformat.writes(nbformat.from_dict(stored_cells(new, old)), version=4) + '\n'
    assert saved(ran) == raw                       # unedited: the file as it was, `git status` clean
    code = [i for i, c in enumerate(ran['cells']) if c['cell_type'] == 'code']
    ran['cells'][code[1]]['source'] = ''.join(ran['cells'][code[1]]['source']) + '\n1 + 1'   # one edited cell: only it changes, text outputs only
    after = json.loads(saved(ran))
    changed = [i for i, (a, b) in enumerate(zip(old['cells'], after['cells'])) if a != b]
    assert changed == [code[1]], changed
    assert after['cells'][code[1]]['outputs'] == [{'output_type': 'display_data', 'data': {'text/plain': ['Figure']}, 'metadata': {}}]
    assert 'execution' not in after['cells'][code[1]]['metadata'] and after['metadata'] == old['metadata']
