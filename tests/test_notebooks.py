"Every chapter in nbs/ is also a test: run each notebook top to bottom as nbdev_test does."
import os, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).parent.parent
NBS = sorted((ROOT/'nbs').glob('*.ipynb'))   # every chapter, and the tutorial (index.ipynb)
from browser_util import browser_missing
# Where a browser is at hand, test_browser runs every cell of the tutorial in JupyterLab (Run All, and it fails on any
# error output), which is what running it here would check, and more (nbdev's skip flags skip nothing there): it is
# run once, there. Without a browser (outside CI) it runs here with the chapters.
RUN = [p for p in NBS if p.name != 'index.ipynb' or browser_missing() is not None]

def run_chapter(fn:str)->tuple:
    "Run one chapter as `nbdev_test` does (settings.ini's skip flags, the notebook's folder as working directory): (ok, seconds, errors)."
    import contextlib, io
    os.chdir(ROOT)
    from nbdev.config import get_config
    from nbdev.test import test_nb
    cfg, err = get_config(), io.StringIO()
    with contextlib.redirect_stderr(err):
        ok, secs = test_nb(Path(fn), skip_flags=cfg.tst_flags.split(), basepath=cfg.config_path)
    return ok, secs, err.getvalue()[-6000:]

def chapter_processes()->int:
    "One per core this test process may use: the cores shared out among pytest-xdist's workers (all of them without xdist), at most 2."
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    return max(1, min(2, (os.cpu_count() or 1) // workers))

@pytest.fixture(scope='session')
def chapters()->dict:
    "Every chapter run once per session, as `nbdev_test --path nbs` runs them: worker processes (`chapter_processes`), each running whole notebooks."
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(chapter_processes(), mp_context=mp.get_context('spawn')) as ex:
        return dict(zip(RUN, ex.map(run_chapter, map(str, RUN))))

@pytest.mark.parametrize('nb', RUN, ids=[p.stem for p in RUN])
def test_notebook_runs(nb, chapters):
    ok, secs, err = chapters[nb]
    assert ok, f"{nb.name} failed after {secs:.0f} s:\n{err}"

def test_a_failing_chapter_is_reported(tmp_path):
    "The runner reports a failing cell as a failure, with its error (a runner that passes everything would prove nothing)."
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('x = 1'), nbformat.v4.new_code_cell("assert x == 2, 'planted'")])
    nbformat.write(nb, tmp_path/'bad.ipynb')
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(1, mp_context=mp.get_context('spawn')) as ex:   # not here: an IPython shell would stay in this process
        ok, _, err = ex.submit(run_chapter, str(tmp_path/'bad.ipynb')).result()
    assert not ok and 'planted' in err

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook_stores_what_a_reader_sees(nb):
    "A reader sees each chapter's text outputs (scripts/store_outputs.py); only the tutorial keeps its figures, each small and without an upload button."
    import json
    sys.path.insert(0, str(ROOT/'scripts'))
    from store_outputs import PLOTLY, FIGURE_CHAPTERS, FIGURE_LIMIT
    from eagle3_workbench.plotstyle import PLOTLY_CONFIG
    cells = json.loads(nb.read_text())['cells']
    outs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    assert outs, f"{nb.name} stores no outputs: run `OMP_NUM_THREADS=1 python scripts/store_outputs.py {nb.relative_to(nb.parent.parent)}`"
    figs = [o['data'][PLOTLY] for o in outs if PLOTLY in o.get('data', {})]
    assert not figs or nb.name in FIGURE_CHAPTERS, f"{nb.name} stores a plotly bundle"
    for f in figs:
        assert len(json.dumps(f)) <= FIGURE_LIMIT and f.get('data'), f"{nb.name}: a stored figure of {len(json.dumps(f))} characters, or empty"
        assert {k: f.get('config', {}).get(k) for k in PLOTLY_CONFIG} == PLOTLY_CONFIG, f"{nb.name}: a stored figure offers an upload: {f.get('config')}"
    assert len(json.dumps(outs)) < 400_000, f"{nb.name} stores {len(json.dumps(outs)) / 1e3:.0f} kB of outputs"


def test_saving_from_jupyterlab_keeps_stored_outputs():
    "The save hook of `jupyter lab --config=jupyter_server_config.py`: a chapter run and saved unedited is written byte for byte as stored."
    import copy, json
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
