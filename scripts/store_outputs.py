"""Run the chapters and store their text outputs, so that a reader of a notebook on the web sees its tables and numbers.

    OMP_NUM_THREADS=1 python scripts/store_outputs.py [nbs/03_engine.ipynb ...]   # default: every chapter

Each chapter runs as `nbdev_test` runs it (same cells skipped, the notebook's folder as working directory). What is
kept: printed text, plain-text and markdown results, small HTML tables and small PNG images, and in the tutorial
(`FIGURE_CHAPTERS`) its plotly figures as plotly's own JSON bundle, each under `FIGURE_LIMIT` (JupyterLab draws them with
the plotly.js it ships: offline, with the no-upload config they were made with). What is dropped: plotly figures elsewhere
and their HTML (a script that needs plotly.js, megabytes, loaded from the page), widget state (a widget's output keeps one line
saying it is a widget, never its `VBox(children=(...` repr), progress bars on stderr (transformers' "Loading weights"
bars are switched off while a chapter runs), anything larger than the limits below. Sources are untouched: only
`outputs` and `execution_count` change, so `nbdev_export` writes the same modules. The file is written as a JupyterLab
save writes it (`canonical`, with a kernelspec), so saving a stored chapter from JupyterLab changes nothing.
"""
from __future__ import annotations
import json, os, re, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_LIMIT, HTML_LIMIT, PNG_LIMIT = 6_000, 30_000, 90_000   # characters kept per output
KEEP = ('text/plain', 'text/markdown', 'text/html', 'image/png')
PLOTLY = 'application/vnd.plotly.v1+json'
FIGURE_CHAPTERS, FIGURE_LIMIT = ('index.ipynb',), 120_000   # chapters whose figures are stored; characters per figure's JSON

# A folder that tempfile (a prefix, then 8 random characters) or pytest made under the temporary directory, and the made
# folders inside it: this run's names, meaningless to a reader and private to the machine. Stored outputs say `$TMPDIR`
# instead (tests/test_layout.py checks that no tracked file keeps one).
TEMP_FOLDER = re.compile(r'(?<![\w.:/~-])(?:' + '|'.join(map(re.escape, sorted({tempfile.gettempdir(), '/tmp'}))) +
                         r')/(?:(?:pytest-of-[^/\s]+|[\w.-]*?(?:tmp|-)[a-z0-9_]{8})(?:/|(?=[\s"\'`:),\]]|$)))+')

def neutral_paths(text:str)->str:
    "`text` with each temporary folder a run made written as `$TMPDIR`."
    return TEMP_FOLDER.sub(lambda m: '$TMPDIR/' if m[0].endswith('/') else '$TMPDIR', text)

def _trim(text, limit):
    text = neutral_paths(''.join(text) if isinstance(text, list) else text)
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters not stored]\n"

WIDGET = 'application/vnd.jupyter.widget-view+json'
WIDGET_SAID = '[an interactive widget: it shows when the notebook runs in Jupyter]'
PROGRESS = re.compile(r'^[^\n\r]*\d+%\|[^\n\r]*\|[^\n\r]*$')   # a tqdm bar's line: "desc:  40%|####      | 2/5 [...]"

def _no_bars(text:str)->str:
    "stderr text without its progress-bar lines (tqdm redraws a bar with carriage returns)."
    return ''.join(l for l in re.split(r'(?<=[\r\n])', text) if not PROGRESS.match(l.rstrip('\r\n')) and l.strip('\r'))

def keep_output(o:dict, figures:bool=False)->dict|None:
    "The part of one output worth storing, or None; with `figures`, a plotly figure's JSON bundle under `FIGURE_LIMIT` too."
    kind = o.get('output_type')
    if kind == 'stream':
        text = _trim(o.get('text', ''), TEXT_LIMIT)
        if o.get('name') == 'stderr' and not (text := _no_bars(text)).strip(): return None
        return dict(output_type='stream', name=o.get('name', 'stdout'), text=text)
    if kind not in ('execute_result', 'display_data'): return None
    if WIDGET in o.get('data', {}):   # its repr (VBox(children=(...))) says nothing to a reader
        return dict(output_type=kind, data={'text/plain': WIDGET_SAID}, metadata={}, **({'execution_count': None} if kind == 'execute_result' else {}))
    data = {}
    if figures and isinstance(fig := o.get('data', {}).get(PLOTLY), dict) and len(json.dumps(fig)) <= FIGURE_LIMIT: data[PLOTLY] = fig
    for mime in KEEP:
        v = o.get('data', {}).get(mime)
        if v is None: continue
        v = ''.join(v) if isinstance(v, list) else v
        if mime == 'text/html' and (len(v) > HTML_LIMIT or '<script' in v): continue
        if mime == 'text/html': v = neutral_paths(v)
        if mime == 'image/png' and len(v) > PNG_LIMIT: continue
        data[mime] = _trim(v, TEXT_LIMIT) if mime in ('text/plain', 'text/markdown') else v
    if not data: return None
    out = dict(output_type=kind, data=data, metadata={})
    if kind == 'execute_result': out['execution_count'] = o.get('execution_count')
    return out

def run_chapter(fn:Path)->dict:
    "Execute a chapter as nbdev_test does; return {cell index: outputs} for the code cells that ran."
    from nbdev.process import NBProcessor
    from nbdev.frontmatter import FrontmatterProc
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    os.environ['IN_TEST'] = '1'
    import transformers
    transformers.utils.logging.disable_progress_bar()   # "Loading weights" bars: stderr noise in a stored output
    nb = NBProcessor(fn, procs=FrontmatterProc, process=True).nb
    def no_eval(cell):
        if cell.cell_type != 'code': return True
        d = getattr(cell, 'directives_', {}) or {}
        return d.get('eval:', [''])[0].lower() == 'false'
    for c in nb.cells:   # execnb leaves a cell's old outputs when the new run shows nothing: a stale one would be stored again
        if c.cell_type == 'code': c.outputs = []
    shell = CaptureShell(fn)
    with working_directory(fn.parent): shell.run_all(nb, exc_stop=True, preproc=no_eval)
    return {i: list(c.get('outputs', [])) for i, c in enumerate(nb.cells) if c.cell_type == 'code'}

def store(fn:Path)->tuple:
    "Run one chapter and write its kept outputs into the notebook file; returns (cells with output, characters stored)."
    raw = json.loads(fn.read_text(encoding='utf-8'))
    outs = run_chapter(fn)
    n_cells = n_chars = 0
    for i, c in enumerate(raw['cells']):
        if c['cell_type'] != 'code': continue
        kept = [k for o in outs.get(i, []) if (k := keep_output(o, fn.name in FIGURE_CHAPTERS)) is not None]
        c['outputs'], c['execution_count'] = kept, None
        for k in kept:
            if k['output_type'] == 'execute_result': k['execution_count'] = None
        n_cells += bool(kept); n_chars += len(json.dumps(kept))
    write_notebook(fn, raw)
    return n_cells, n_chars

# every chapter names its kernel (no "Select Kernel" dialog on open); as JupyterLab 4 writes it for ipykernel's python3
KERNELSPEC = {'display_name': 'Python 3 (ipykernel)', 'language': 'python', 'name': 'python3'}

def with_kernelspec(meta:dict)->dict:
    "The notebook metadata with a kernelspec: its own where it has one, else `KERNELSPEC`."
    return meta if (meta or {}).get('kernelspec') else {**(meta or {}), 'kernelspec': dict(KERNELSPEC)}

def canonical(nb:dict)->str:
    "The notebook as a JupyterLab save writes it (nbformat's serialisation: keys sorted, text in lines) and its final newline."
    import nbformat
    return nbformat.writes(nbformat.from_dict(nb), version=4) + '\n'

def write_notebook(fn:Path, nb:dict):
    "Write a chapter as a JupyterLab save would, with a kernelspec: saving it from JupyterLab then changes nothing."
    Path(fn).write_text(canonical(dict(nb, metadata=with_kernelspec(nb.get('metadata', {})))), encoding='utf-8')

if __name__ == '__main__':
    files = [Path(a).resolve() for a in sys.argv[1:]] or sorted((ROOT/'nbs').glob('[0-9]*.ipynb'))
    if len(files) > 1:   # one process per chapter, as nbdev_test runs them (a chapter may check what is not imported yet)
        bad = [f.name for f in files if subprocess.run([sys.executable, __file__, str(f)]).returncode]
        sys.exit(f"failed: {bad}" if bad else 0)
    cells, chars = store(files[0])
    print(f"{files[0].name}: outputs stored in {cells} cells, {chars / 1e3:.0f} kB", flush=True)
