"""One of each: the package parses a safetensors header in one place (`formats.safetensors_header`), computes a relative
error in one place (`chunks.relative_error`) and builds the draft's fc input in one place (`teacher.fc_input`). The
checks read the package source (AST, not text), so a second copy of any of them, wherever it is written, fails here."""
import ast
from pathlib import Path
import pytest

PKG = Path(__file__).parent.parent/'eagle3_workbench'
WIRING_NAMES = {'wiring', 'resid_layers'}   # what the package calls the wired resid indices, in chunk order

def _name(node)->str|None:
    "`x` for a Name, `x` for an Attribute `....x`."
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None

def _is_call(node, *names)->bool: return isinstance(node, ast.Call) and _name(node.func) in names

def header_parsers(tree)->list:
    "Lines that read a safetensors header's length: the 8-byte little-endian u64 unpacked (`struct.unpack('<Q', ...)`, `int.from_bytes`)."
    out = []
    for n in ast.walk(tree):
        if _is_call(n, 'unpack', 'unpack_from', 'iter_unpack') and n.args and isinstance(n.args[0], ast.Constant) \
           and isinstance(n.args[0].value, (str, bytes)) and 'Q' in str(n.args[0].value): out.append(n.lineno)
        elif _is_call(n, 'from_bytes') and _name(getattr(n.func, 'value', None)) == 'int': out.append(n.lineno)
    return out

def _norm_of_difference(node)->bool:
    "`(a - b).norm(...)`, `torch.linalg.vector_norm(a - b)` or `torch.norm(a - b)`."
    if not _is_call(node, 'norm', 'vector_norm'): return False
    of = [node.func.value] if isinstance(node.func, ast.Attribute) else []   # the tensor of a method call, or the first argument
    return any(isinstance(a, ast.BinOp) and isinstance(a.op, ast.Sub) for a in of + node.args[:1])

def relative_errors(tree)->list:
    "Lines that divide a norm of a difference by a norm: ||a - b|| / ||b||, however it is floored."
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
            and _norm_of_difference(n.left) and any(_is_call(m, 'norm', 'vector_norm') for m in ast.walk(n.right))]

def fc_input_builders(tree)->list:
    "Lines that concatenate on the last dimension inside a function that walks a wiring (`for k in wiring`, `... for k in resid_layers`)."
    out = []
    for f in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
        loops = [n.iter for n in ast.walk(f) if isinstance(n, (ast.For, ast.comprehension))]
        if not any(_name(it) in WIRING_NAMES for it in loops): continue
        for n in ast.walk(f):
            if _is_call(n, 'cat', 'concat', 'concatenate') and _name(getattr(n.func, 'value', None)) == 'torch':
                dim = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg in ('dim', 'axis')), None)
                if isinstance(dim, ast.UnaryOp) and isinstance(dim.op, ast.USub) and getattr(dim.operand, 'value', None) == 1: out.append(n.lineno)
    return sorted(set(out))

def found(source:dict, finder)->list:
    "'module.py:line' for every hit of `finder` in {path: text}."
    return [f"{p}:{line}" for p, text in sorted(source.items()) for line in finder(ast.parse(text))]

def package_source()->dict: return {str(f.relative_to(PKG)): f.read_text() for f in PKG.rglob('*.py') if f.name != '_modidx.py'}

KEPT = [('a safetensors header parser', header_parsers, 'formats.py', 'formats.safetensors_header'),
        ('a relative-error formula', relative_errors, 'chunks.py', 'chunks.relative_error'),
        ('a builder of the draft\'s fc input', fc_input_builders, 'teacher.py', 'teacher.fc_input')]

@pytest.mark.parametrize('what,finder,home,use', KEPT, ids=[k[0] for k in KEPT])
def test_one_of_each(what, finder, home, use):
    hits = found(package_source(), finder)
    assert len(hits) == 1 and hits[0].startswith(home + ':'), f"{what} at {hits}: keep the one in {home}, call `{use}` elsewhere"

# The finders on copies of what the package held before there was one of each (each spelled as it was), and on
# look-alikes that are no copy (a norm ratio, a concatenation of something else, a header written, not read).
PLANTED = {
    'a safetensors header parser': ("""
def header(f):
    n = struct.unpack('<Q', f.read(8))[0]
    return json.loads(f.read(n))
def other(raw): return int.from_bytes(raw[:8], 'little')
def written(n): return struct.pack('<Q', n)
""", 2),
    'a relative-error formula': ("""
def rel(x, y): return float(((x.double() - y.double()).norm(dim=-1) / x.double().norm(dim=-1).clamp_min(1e-30)).max())
def rot(tx, ty, r): return float(((tx @ r - ty).norm(dim=-1) / ty.norm(dim=-1).clamp_min(1e-12)).mean())
def per(x, y): return ((y - x).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-12)).tolist()
def ratio(x, y): return y.norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-12)
def lin(a, b): return torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)
""", 4),
    "a builder of the draft's fc input": ("""
def aux(states, resid_layers): return torch.cat([states[k] if k is not None else torch.zeros_like(states[0]) for k in resid_layers], -1)
class Table:
    def features(self, b, wiring): return torch.cat([self.layer(b, k) for k in wiring], -1)
def accepts(rec, wiring):
    feats = []
    for k in wiring: feats.append(rec.resid(k))
    return torch.cat(feats, -1)
def rope(x1, x2): return torch.cat([-x2, x1], -1)
def stitched(rows, wiring): return torch.cat([rows[k] for k in wiring])
""", 3),
}

@pytest.mark.parametrize('what,finder,home,use', KEPT, ids=[k[0] for k in KEPT])
def test_the_finders_find_copies(what, finder, home, use):
    text, n = PLANTED[what]
    assert len(finder(ast.parse(text))) == n, finder(ast.parse(text))
