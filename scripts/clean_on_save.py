"""Save the chapters from JupyterLab as the tests expect them: running a notebook never rewrites its stored outputs.

    jupyter lab --config=jupyter_server_config.py      # from the repository root (the file there registers the hook)

The chapters in nbs/ are stored with the text outputs `scripts/store_outputs.py` keeps (tests/test_notebooks.py checks
them). Run in JupyterLab, a chapter collects megabytes of plotly figures and new execution counts, and a save (or
JupyterLab's autosave) would write all of it. With this hook a save writes, for every cell whose source is unchanged,
the cell as it is on disk (its stored outputs, count and metadata); for a new or edited cell, its text outputs as
`store_outputs.keep_output` keeps them and only the cell metadata nbdev keeps (`allowed_cell_metadata_keys`); and the
notebook's metadata as on disk (a kernelspec added where it has none). A notebook run without edits is therefore saved byte for byte as it was
(`git status` stays clean); an edited one differs only where it was edited, and `store_outputs.py` refreshes the
outputs when the chapter is done. Notebooks outside the folder given to `hook_for` are saved untouched.

This holds for a chapter stored as a save writes it (`store_outputs.canonical`: nbformat's serialisation, with a
kernelspec), as `store_outputs.py` writes them. `python scripts/clean_on_save.py --fix nbs/*.ipynb` rewrites chapters
stored otherwise (their cells' content unchanged); without `--fix` it checks that each file given saves unchanged.
"""
from __future__ import annotations
import difflib, json, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_outputs import keep_output, canonical, with_kernelspec, KERNELSPEC   # noqa: E402,F401  (one rule for what is stored, and how)

CELL_METADATA = ('tags',)   # settings.ini allowed_cell_metadata_keys

def _key(c)->tuple: return (c.get('cell_type'), ''.join(c.get('source') or ''))

def _fresh(c:dict)->dict:
    "A new or edited cell as it is stored: text outputs only, no execution metadata."
    c = dict(c, metadata={k: v for k, v in (c.get('metadata') or {}).items() if k in CELL_METADATA})
    if c.get('cell_type') == 'code': c['outputs'] = [o for o in map(keep_output, c.get('outputs') or []) if o is not None]
    return c

def stored_cells(new:dict, # the notebook JupyterLab is saving (nbformat 4 JSON)
                 old:dict, # the notebook on disk
                )->dict: # what to save
    "The notebook to save: unchanged cells as on disk, new and edited ones cleaned; the notebook's metadata as on disk (a kernelspec added where it has none)."
    a, b = [_key(c) for c in old['cells']], [_key(c) for c in new['cells']]
    take = {}
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(blk.size): take[blk.b + k] = old['cells'][blk.a + k]
    cells = [take.get(i) or _fresh(c) for i, c in enumerate(new['cells'])]
    return dict(new, cells=cells, metadata=with_kernelspec(old.get('metadata', new.get('metadata', {}))),
                nbformat=old.get('nbformat', new.get('nbformat')), nbformat_minor=old.get('nbformat_minor', new.get('nbformat_minor')))

def hook_for(folder)->callable:
    "A Jupyter `pre_save_hook` that stores the notebooks in `folder` (not below it) with `stored_cells`."
    folder = Path(folder).resolve()
    def keep_stored_outputs(model=None, path=None, contents_manager=None, **kw):
        if not model or model.get('type') != 'notebook' or contents_manager is None: return
        os_path = Path(contents_manager._get_os_path(path)).resolve()
        if os_path.parent != folder or not os_path.exists(): return
        old = json.loads(os_path.read_text(encoding='utf-8'))
        model['content'] = stored_cells(model['content'], old)
    return keep_stored_outputs

def fix(path)->bool: # whether the file changed
    "Rewrite one notebook as a JupyterLab save of it would (`canonical`), with a kernelspec: a later save changes nothing."
    path = Path(path); raw = path.read_text(encoding='utf-8')
    nb = json.loads(raw); nb['metadata'] = with_kernelspec(nb.get('metadata', {}))
    out = canonical(nb)
    if out != raw: path.write_text(out, encoding='utf-8')
    return out != raw

if __name__ == '__main__':
    # `--fix FILES`: rewrite them as a save would (run once on nbs/*.ipynb after a merge); else check they save unchanged
    args = sys.argv[1:]
    if args[:1] == ['--fix']:
        changed = [f for f in args[1:] if fix(f)]
        print(f"{len(changed)} of {len(args) - 1} notebooks rewritten" + (f": {' '.join(changed)}" if changed else ''))
        sys.exit(0)
    bad = 0
    for f in args:
        raw = Path(f).read_text(encoding='utf-8')
        nb = json.loads(raw)
        same = canonical(stored_cells(nb, nb)) == raw
        bad += not same
        print(f, 'unchanged' if same else 'CHANGED')
    sys.exit(1 if bad else 0)
