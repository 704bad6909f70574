"""The house rules of the package layout, checked on the source: imports flow one way, in the order of the chapters;
no module imports another's private name or a name that module only imported itself; engine names live in the engine
registry; the README lists the chapters in that order. `ruff` (in .ci/run) checks for unused imports."""
import ast, json, re
from pathlib import Path
import pytest

ROOT = Path(__file__).parent.parent
PKG = ROOT/'eagle3_workbench'

def chapters()->dict:
    "module name -> (position in the chapter order, notebook stem), from each notebook's `#| default_exp`."
    out = {}
    for i, nb in enumerate(sorted((ROOT/'nbs').glob('[0-9]*.ipynb'))):
        for c in json.loads(nb.read_text())['cells']:
            if m := re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M):
                out[('eagle3_workbench.' + m[1]).removesuffix('.__init__')] = (i, nb.stem)   # sglang.__init__ -> .sglang, __init__ -> the package
    return out

def modules()->dict:
    "module name -> (parsed source, is a package), for every generated module of the package."
    out = {}
    for f in PKG.rglob('*.py'):
        if f.name == '_modidx.py': continue
        parts = f.relative_to(ROOT).with_suffix('').parts
        pkg = parts[-1] == '__init__'
        out['.'.join(parts[:-1] if pkg else parts)] = (ast.parse(f.read_text()), pkg)
    return out

def imports(name:str, tree, pkg:bool)->list:
    "(imported module, [names]) for every import of a package module, at the top or inside a function."
    out, here = [], name.split('.') if pkg else name.split('.')[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = '.'.join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level else (node.module or '')
            if mod.startswith('eagle3_workbench'): out.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith('eagle3_workbench.')]
    return out

def defined(tree)->set:
    "Names a module defines itself at its top level (functions, classes, assignments), not names it imports."
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): out.add(node.name)
        elif isinstance(node, ast.Assign): out |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name): out.add(node.target.id)
    return out

MODS, ORDER = modules(), chapters()

def test_every_module_has_a_chapter():
    "The package's own `__init__.py` too: `09_api` exports it (the top-level names), nbdev writing its version line."
    assert set(MODS) == set(ORDER), set(MODS) ^ set(ORDER)

@pytest.mark.parametrize('name', sorted(ORDER))
def test_imports_flow_down_the_chapters(name):
    "A module imports only modules of earlier chapters (no circle, no upward import), only names they define, none private."
    me = ORDER[name][0]
    for mod, names in imports(name, *MODS[name]):
        if mod == 'eagle3_workbench': continue   # `import eagle3_workbench` for its version
        assert mod in ORDER, f"{name} imports {mod}, which no chapter exports"
        assert ORDER[mod][0] < me, f"{name} ({ORDER[name][1]}) imports {mod} ({ORDER[mod][1]}): a later or the same chapter"
        assert not [n for n in names if n.startswith('_')], f"{name} imports private names {names} from {mod}"
        assert not (missing := [n for n in names if n != '*' and n not in defined(MODS[mod][0])]), \
            f"{name} imports {missing} from {mod}, which does not define them (a re-export)"

TOP_LEVEL_LAZY = 'eagle3_workbench'   # its __getattr__ imports the entry points when used (09_api): the one allowed

def test_no_reexport_or_module_getattr():
    "No module keeps names alive at a second address; the package's top level, whose lazy names are its front door, excepted."
    for name, (tree, _) in MODS.items():
        assert name == TOP_LEVEL_LAZY or '__getattr__' not in defined(tree), f"{name} defines a module __getattr__"
        assert '_all_' not in defined(tree), f"{name} re-exports names through _all_"

ENGINE_TEXT = re.compile(r'^(sglang|vllm|trtllm|specforge|speculators)(==\S+|-legacy)$')

@pytest.mark.parametrize('name', sorted(ORDER))
def test_engine_names_live_in_the_registry(name):
    "Outside the engine registry (its rows, engine_rows.py, and engines.py that reads them) and the command line's parsing, no code spells an engine release or defaults to an engine name."
    if name in ('eagle3_workbench.engine_rows', 'eagle3_workbench.engines', 'eagle3_workbench.cli'): return
    tree = MODS[name][0]
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and ENGINE_TEXT.match(n.value)]
    assert not texts, f"{name} spells engine releases {texts}: ask an `Engine` from engines.py"
    for f in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        args = f.args.args[-len(f.args.defaults):] if f.args.defaults else []
        for a, d in [*zip(args, f.args.defaults), *zip(f.args.kwonlyargs, f.args.kw_defaults)]:
            assert not (a.arg == 'engine' and isinstance(d, ast.Constant) and isinstance(d.value, str)), \
                f"{name}.{f.name} defaults engine={d.value!r}: default to None (the registry's DEFAULT_ENGINE)"

def test_readme_lists_the_chapters_in_order():
    layout = (ROOT/'README.md').read_text().split('## Layout', 1)[1].split('\n## ', 1)[0]
    named = [m for m in re.findall(r'`(\d\d[a-z]{0,2}_[a-z0-9_]+|index)`', layout)]
    stems = [p.stem for p in sorted((ROOT/'nbs').glob('[0-9]*.ipynb'))] + ['index']
    assert named == stems, f"README layout lists {named}, the notebooks are {stems}"

def tracked_text()->dict:
    "path -> text of every file git tracks that reads as UTF-8 text (weights, shards and images are skipped)."
    import subprocess
    names = subprocess.run(['git', 'ls-files', '-z'], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split('\0')
    out = {}
    for n in filter(None, names):
        try: b = (ROOT/n).read_bytes()
        except (FileNotFoundError, IsADirectoryError): continue   # deleted in the work tree, or a submodule
        if b'\0' in b[:8192]: continue
        try: out[n] = b.decode('utf-8')
        except UnicodeDecodeError: continue
    return out

def machine_paths()->list:
    """(what, pattern) for an absolute path of the machine that made a file: the folder holding this checkout and those
    above it, a home folder, and a temporary folder a run made (tempfile's or pytest's random names,
    `store_outputs.TEMP_FOLDER`). A path is one that starts a word, so URLs (`https://host/home/...`) and fixed example
    folders (`/usr/bin/chromium`, `{'folder': '/tmp/x'}`) are no match."""
    import sys
    sys.path.insert(0, str(ROOT/'scripts'))
    from store_outputs import TEMP_FOLDER
    start, end = r'(?<![\w.:/~-])', r'(?=/|[\s"\'`:),\]]|$)'
    import tempfile
    shared = {'/', '/tmp', '/var', '/var/tmp', '/home', '/Users', '/private', tempfile.gettempdir()}   # roots any machine has (a clone may sit under them)
    here = [str(p) for p in (ROOT, *ROOT.parents) if str(p) not in shared]
    homes = [str(Path.home())] if str(Path.home()) != '/' else []
    return [('the checkout or a folder above it', re.compile(start + '(?:' + '|'.join(map(re.escape, here)) + ')' + end)),
            ('a home folder', re.compile(start + '(?:' + '|'.join([*map(re.escape, homes), r'/root', r'/home/[^/\s]+', r'/Users/[^/\s]+']) + ')' + end)),
            ('a temporary folder a run made', TEMP_FOLDER)]

SESSION_WORDS = re.compile(r'\b(?:(?:this|that|last|previous|next|earlier|later) (?:work )?session|sessions? \d+|work sessions?)\b', re.I)

# Chapters whose stored outputs still show a run's temporary folders, to be re-stored (scripts/store_outputs.py writes
# them as $TMPDIR now) by the engineers editing them: 02b_capture (a Record's location).
STORED_TEMP_PATHS_PENDING = {'nbs/02b_capture.ipynb'}

def test_no_machine_paths_or_session_words():
    "No tracked text file holds an absolute path of the machine that made it, or words about the work sessions that made it."
    pats, found = machine_paths(), []
    for name, text in tracked_text().items():
        if name == 'tests/test_layout.py': continue   # this file spells the patterns and their examples
        for what, p in pats:
            if what == 'a temporary folder a run made' and name in STORED_TEMP_PATHS_PENDING: continue
            found += [f"{name}: {what}: {m[0]!r}" for m in p.finditer(text)][:3]
        found += [f"{name}: words about a work session: {m[0]!r}" for m in SESSION_WORDS.finditer(text)][:3]
    assert not found, '\n'.join(found)

def test_machine_paths_are_found():
    "The patterns find what they are for, and leave URLs and fixed example folders alone."
    import tempfile
    pats = machine_paths()
    hit = lambda s: [what for what, p in pats if p.search(s)]
    made = tempfile.mkdtemp(prefix='eagle3-workbench-')
    try:
        for s in (f"see {ROOT}/README.md", f"python {ROOT}/.venv/bin/python", f"{Path.home()}/.cache/x", '`/home/alice/x`',
                  f"Recording({made}/rec: llama", f"{tempfile.gettempdir()}/tmpab12cd_9/rec"):
            assert hit(s), s
    finally: Path(made).rmdir()
    for s in ('https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/models/llama.py', '/usr/bin/chromium',
              "factory({'folder': '/tmp/x'})", 'e.g. {"folder": "/tmp/eagle3-probe"}', 'tests/fixtures/recordings/README.md',
              'eagle3_workbench/zoo_data/tiny-llama', 'a Session is re-extended'):
        assert not hit(s) and not SESSION_WORDS.search(s), s
    assert SESSION_WORDS.search('## Added in session 7') and SESSION_WORDS.search('measured in this session')

EXPORT_CELL = re.compile(r'^\s*#\|\s*export[si]?\s*$', re.M)

def bare_exports(cells:list)->list:
    "Ids of the export cells with no example or test under them: the next code cell is another export cell, or none follows."
    code = [c for c in cells if c['cell_type'] == 'code']
    is_export = [bool(EXPORT_CELL.search(''.join(c['source']))) for c in code]
    return [c.get('id') for i, c in enumerate(code) if is_export[i] and (i + 1 == len(code) or is_export[i + 1])]

# Bare export cells allowed, per chapter: none now; a chapter given an allowance here may only lower it.
BARE_PENDING = {}

@pytest.mark.parametrize('nb', sorted((ROOT/'nbs').glob('[0-9]*.ipynb')), ids=lambda p: p.stem)
def test_every_export_cell_has_an_example_under_it(nb):
    "An example or a test right under each definition (the code cell after an export cell is not another export cell)."
    bare, allowed = bare_exports(json.loads(nb.read_text())['cells']), BARE_PENDING.get(nb.stem, 0)
    assert len(bare) <= allowed, f"{nb.name}: {len(bare)} export cells with no example or test under them (allowed {allowed}): cell ids {bare}"

def test_bare_exports_are_found():
    "The checker on a made-up chapter: a definition followed by another, and one at the end, are bare; one with a test under it, or with prose and then a test, is not."
    md = lambda: dict(cell_type='markdown', source=['prose'])
    code = lambda i, s: dict(cell_type='code', id=i, source=[s])
    cells = [code('a', '#| export\ndef f(): pass'), code('b', '#|export\ndef g(): pass'), code('t', 'assert g() is None'),
             code('c', '#| export\nx = 1'), md(), code('u', 'x'), code('d', '#| hide\n#| export\ny = 2'), md()]
    assert bare_exports(cells) == ['a', 'd']

MAX_LINES = 500   # a module longer than this holds more than one job

@pytest.mark.parametrize('name', sorted(ORDER))
def test_modules_are_small(name):
    "Each generated module stays under MAX_LINES lines (a room with one job)."
    f = PKG.joinpath(*name.split('.')[1:])
    f = f/'__init__.py' if f.is_dir() else f.with_suffix('.py')
    n = len(f.read_text().splitlines())
    assert n <= MAX_LINES, f"{name} is {n} lines, over {MAX_LINES}: split it by job"
