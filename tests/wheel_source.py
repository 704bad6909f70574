"""Functions of pinned engine wheels, run as written: read from the wheel, compiled alone, given stand-ins for what they touch.

The block-draft rows of `family_wiring` (which field each release reads, in which precedence, with which offset) are
held against the engines' own code: the wheel of each release is downloaded once (`pip download --no-deps`) into
`.ci/cache/`, as tests/sglang_source.py does for SGLang, and the functions the rows cite are taken out of its files by
name (`ast`), compiled and executed in a namespace of stand-ins (the rest of those files imports CUDA kernels and the
server). Only when the download fails (no network) do the tests that need them skip, saying why."""
import ast, fcntl, glob, subprocess, sys, textwrap, zipfile
from pathlib import Path

CACHE = Path(__file__).resolve().parents[1]/'.ci'/'cache'   # ignored by git

def wheel(package:str, version:str, timeout:float=600)->tuple:
    "(the wheel file of package==version under CACHE or None, why not), downloaded first if missing (one process at a time)."
    pat = str(CACHE/f"{package.replace('-', '_')}-{version}-*.whl")
    if found := glob.glob(pat): return Path(found[0]), ''
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE/f'{package}.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not glob.glob(pat):
            cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--disable-pip-version-check', '--retries', '1',
                   '--timeout', '20', f'{package}=={version}', '-d', str(CACHE)]
            try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired: return None, f"`pip download {package}=={version}` took over {timeout:g} s"
            if p.returncode or not glob.glob(pat):
                return None, f"`pip download {package}=={version}` failed ({(p.stderr.strip().splitlines() or ['no wheel written'])[-1]})"
    return Path(glob.glob(pat)[0]), ''

def source(whl:Path, path:str)->str:
    "The text of one file of a wheel (path inside it, e.g. 'vllm/config/speculative.py')."
    with zipfile.ZipFile(whl) as z: return z.read(path).decode()

def definitions(text:str, *names:str, within:str|None=None)->str:
    "The source of the top-level functions, classes and assignments `names` of a file (or the methods of class `within`), decorators kept."
    tree, lines = ast.parse(text), text.splitlines(keepends=True)
    body = tree.body
    if within: body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == within).body
    out = []
    for name in names:
        node = next((n for n in body if getattr(n, 'name', None) == name
                     or (isinstance(n, (ast.Assign, ast.AnnAssign)) and name in [t.id for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target) if isinstance(t, ast.Name)])), None)
        if node is None: raise KeyError(f"{name} is not defined in that file")
        start = min([node.lineno] + [d.lineno for d in getattr(node, 'decorator_list', [])]) - 1
        out.append(textwrap.dedent(''.join(lines[start:node.end_lineno])))
    return '\n\n'.join(out)

def compiled(text:str, names:tuple, namespace:dict, within:str|None=None, where:str='<wheel>')->dict:
    "`namespace` with the definitions `names` of `text` executed in it."
    exec(compile('from __future__ import annotations\n' + definitions(text, *names, within=within), where, 'exec'), namespace)   # annotations unevaluated: their names are not here
    return namespace
