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
                out['eagle3_workbench.' + m[1].removesuffix('.__init__')] = (i, nb.stem)
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
    assert set(MODS) - {'eagle3_workbench'} == set(ORDER), set(MODS) ^ set(ORDER)

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

def test_no_reexport_or_module_getattr():
    for name, (tree, _) in MODS.items():
        assert '__getattr__' not in defined(tree), f"{name} defines a module __getattr__"
        assert '_all_' not in defined(tree), f"{name} re-exports names through _all_"

ENGINE_TEXT = re.compile(r'^(sglang|vllm|trtllm|specforge|speculators)(==\S+|-legacy)$')

@pytest.mark.parametrize('name', sorted(ORDER))
def test_engine_names_live_in_the_registry(name):
    "Outside the engine registry (engines.py) and the command line's parsing, no code spells an engine release or defaults to an engine name."
    if name in ('eagle3_workbench.engines', 'eagle3_workbench.cli'): return
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
    named = [m for m in re.findall(r'`(\d\d[a-z]?_[a-z0-9_]+|index)`', layout)]
    stems = [p.stem for p in sorted((ROOT/'nbs').glob('[0-9]*.ipynb'))] + ['index']
    assert named == stems, f"README layout lists {named}, the notebooks are {stems}"

MAX_LINES = 600   # a module longer than this holds more than one job; the aim is 500, once search, observed, zoo and doctor are split

@pytest.mark.parametrize('name', sorted(ORDER))
def test_modules_are_small(name):
    "Each generated module stays under MAX_LINES lines (a room with one job)."
    f = PKG.joinpath(*name.split('.')[1:])
    f = f/'__init__.py' if f.is_dir() else f.with_suffix('.py')
    n = len(f.read_text().splitlines())
    assert n <= MAX_LINES, f"{name} is {n} lines, over {MAX_LINES}: split it by job"
