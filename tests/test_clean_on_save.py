"""Every chapter opens with its kernel named and saves from JupyterLab byte for byte as stored (scripts/clean_on_save.py):
what a save writes is nbformat's serialisation, so a chapter stored any other way turns `git status` dirty on the first
save. `python scripts/clean_on_save.py --fix nbs/*.ipynb` rewrites chapters so; scripts/store_outputs.py writes so."""
import copy, json, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).parent.parent
NBS = sorted((ROOT/'nbs').glob('*.ipynb'))
sys.path.insert(0, str(ROOT/'scripts'))
from clean_on_save import stored_cells, KERNELSPEC  # noqa: E402

def jupyterlab_save(path:Path)->str:
    "What a JupyterLab save of the chapter after Run All writes through the hook: the JupyterLab server's own writer (nbformat.write)."
    import nbformat
    old = json.loads(path.read_text(encoding='utf-8'))
    ran = copy.deepcopy(old)   # new counts, a plotly bundle per code cell, execution metadata, the kernel's info
    ran['metadata'] = {**ran['metadata'], 'language_info': {'name': 'python', 'version': '3.11'},
                       'kernelspec': {'display_name': 'Python 3 (ipykernel)', 'language': 'python', 'name': 'python3'}}
    for i, c in enumerate(c for c in ran['cells'] if c['cell_type'] == 'code'):
        c['execution_count'], c['metadata'] = 100 + i, {**c['metadata'], 'execution': {'iopub.status.busy': '2026-01-01T00:00:00Z'}}
        c['outputs'] = [{'output_type': 'display_data', 'metadata': {}, 'data': {'application/vnd.plotly.v1+json': {'data': []}, 'text/plain': 'Figure'}}]
    out = path.parent/(path.stem + '.saved.ipynb')
    nbformat.write(nbformat.from_dict(stored_cells(ran, old)), str(out), version=nbformat.NO_CONVERT)
    try: return out.read_text(encoding='utf-8')
    finally: out.unlink()

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_chapter_names_its_kernel(nb):
    spec = json.loads(nb.read_text(encoding='utf-8'))['metadata'].get('kernelspec') or {}
    assert spec.get('name') == KERNELSPEC['name'] and spec.get('language') == 'python', \
        f"{nb.name} has no python3 kernelspec (JupyterLab asks to select a kernel): run `python scripts/clean_on_save.py --fix nbs/*.ipynb`"

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_chapter_saves_unchanged(nb, tmp_path):
    copy_ = tmp_path/nb.name; shutil.copy(nb, copy_)
    assert jupyterlab_save(copy_) == nb.read_text(encoding='utf-8'), \
        f"saving {nb.name} from JupyterLab rewrites it: run `python scripts/clean_on_save.py --fix nbs/*.ipynb`"

def test_fix_makes_a_save_change_nothing(tmp_path):
    "A chapter stored as json.dumps writes it (keys in insertion order, text outputs as one string) and without a kernelspec."
    nb = {'cells': [{'cell_type': 'code', 'execution_count': None, 'id': 'a1', 'metadata': {}, 'source': ['x = 1\n', 'x'],
                     'outputs': [{'output_type': 'execute_result', 'data': {'text/plain': 'line 1\nline 2'}, 'metadata': {}, 'execution_count': None}]},
                    {'cell_type': 'markdown', 'id': 'b2', 'metadata': {}, 'source': ['# Title']}],
          'metadata': {'jupytext': {'main_language': 'python'}}, 'nbformat': 4, 'nbformat_minor': 5}
    p = tmp_path/'ch.ipynb'
    p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
    before = p.read_text()
    assert jupyterlab_save(p) != before                      # the counterpart: stored so, a save dirties it
    run = lambda *a: subprocess.run([sys.executable, str(ROOT/'scripts'/'clean_on_save.py'), *a], capture_output=True, text=True)
    r = run('--fix', str(p))
    assert r.returncode == 0 and r.stdout.startswith('1 of 1 notebooks rewritten'), r
    fixed = json.loads(p.read_text())
    assert fixed['metadata'] == {'jupytext': {'main_language': 'python'}, 'kernelspec': KERNELSPEC}
    assert fixed['cells'][0]['outputs'][0]['data']['text/plain'] == ['line 1\n', 'line 2']   # nbformat's lines; the cells' content kept
    assert [c['source'] for c in fixed['cells']] == [c['source'] for c in nb['cells']]
    assert jupyterlab_save(p) == p.read_text()               # now a save writes the file as it is
    assert run('--fix', str(p)).stdout.startswith('0 of 1 notebooks rewritten') and run(str(p)).returncode == 0

def test_store_outputs_writes_as_a_save_does(tmp_path):
    "store_outputs' writer is the save's: a chapter it stores saves unchanged."
    from store_outputs import write_notebook
    nb = {'cells': [{'cell_type': 'code', 'execution_count': None, 'id': 'a1', 'metadata': {}, 'source': ['1'],
                     'outputs': [{'output_type': 'stream', 'name': 'stdout', 'text': 'a\nb\n'}]}],
          'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
    p = tmp_path/'ch.ipynb'
    write_notebook(p, nb)
    assert json.loads(p.read_text())['metadata']['kernelspec'] == KERNELSPEC
    assert jupyterlab_save(p) == p.read_text()

def test_store_outputs_drops_a_stale_output(tmp_path):
    "A cell that now shows nothing stores nothing (execnb keeps a cell's old outputs when its new run shows none)."
    nb = {'cells': [{'cell_type': 'code', 'execution_count': None, 'id': c, 'metadata': {}, 'source': [src],
                     'outputs': [{'output_type': 'execute_result', 'execution_count': None, 'metadata': {}, 'data': {'text/plain': ["'stale'"]}}]}
                    for c, src in (('a1', '1 + 1'), ('a2', 'x = 1'))], 'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}
    p = tmp_path/'ch.ipynb'
    p.write_text(json.dumps(nb))
    r = subprocess.run([sys.executable, str(ROOT/'scripts'/'store_outputs.py'), str(p)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = json.loads(p.read_text())['cells']
    assert [o['data']['text/plain'] for o in a['outputs']] == [['2']] and b['outputs'] == [], (a['outputs'], b['outputs'])
