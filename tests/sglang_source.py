"""SGLang's own debugging code, run on CPU without SGLang's runtime.

Three files of a real SGLang source tree write what the workbench reads: `model_executor/hook_manager.py`
(`--forward-hooks`), `debug_utils/tensor_dump_forward_hook.py` (`--debug-tensor-dump-output-folder`) and
`debug_utils/dumper.py` (`DUMPER_ENABLE=1`). Importing them normally pulls in the whole server (CUDA kernels, ZMQ
plumbing, multimodal configs), so they are loaded by path instead, with the few SGLang modules they import replaced,
for as long as the context lasts, by namespaces: the dumper's control plane (HTTP/ZMQ, the server's runtime context,
which raise if ever called) and the classes the dump code tests values against (`ForwardBatch`, ...), which are plain
classes the tests instantiate. Nothing else of the three files is changed.

The source is `$EAGLE3_SGLANG_SRC` (an `sglang` package folder), an installed `sglang` located without importing it,
or the three files of the pinned wheel (`PINNED`), which the suite downloads once (`pip download --no-deps`) into
`.ci/cache/` and extracts there (`fetch_pinned`, called from tests/conftest.py before any test is collected). Only
when that download fails (no network) do the tests that need the files skip, saying why.
"""
import importlib.util, os, subprocess, sys, types, zipfile
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

FILES = {'hook_manager': 'srt/model_executor/hook_manager.py',
         'tensor_dump': 'srt/debug_utils/tensor_dump_forward_hook.py',
         'dumper': 'srt/debug_utils/dumper.py'}

PINNED = '0.5.23'   # the SGLang release whose three files the suite runs
CACHE = Path(__file__).resolve().parents[1]/'.ci'/'cache'   # ignored by git
UNAVAILABLE_ENV = 'EAGLE3_SGLANG_SRC_UNAVAILABLE'   # why the download failed, for the test processes after the first

def _installed():
    try: spec = importlib.util.find_spec('sglang')
    except (ImportError, ValueError): return None
    if spec is None or not spec.submodule_search_locations: return None
    p = Path(next(iter(spec.submodule_search_locations)))
    return p if all((p/f).exists() for f in FILES.values()) else None

def pinned_folder()->Path: return CACHE/f'sglang-{PINNED}'/'sglang'

def fetch_pinned(timeout:float=300)->tuple: # (the `sglang` folder or None, why not)
    "The three files of the pinned wheel under CACHE, downloaded and extracted first if missing (one process at a time)."
    import fcntl, glob
    want = pinned_folder()
    if all((want/f).exists() for f in FILES.values()): return want, ''
    if why := os.environ.get(UNAVAILABLE_ENV): return None, why
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE/'sglang.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another test process may be downloading it now
        if not all((want/f).exists() for f in FILES.values()):
            whl = glob.glob(str(CACHE/f'sglang-{PINNED}-*.whl'))
            if not whl:
                cmd = [sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--disable-pip-version-check',
                       '--retries', '1', '--timeout', '20', f'sglang=={PINNED}', '-d', str(CACHE)]
                try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                except subprocess.TimeoutExpired: return None, f"`pip download sglang=={PINNED}` took over {timeout:g} s"
                whl = glob.glob(str(CACHE/f'sglang-{PINNED}-*.whl'))
                if p.returncode or not whl:
                    last = (p.stderr.strip().splitlines() or ['no wheel written'])[-1]
                    return None, f"`pip download sglang=={PINNED}` failed ({last})"
            zipfile.ZipFile(whl[0]).extractall(want.parent, ['sglang/' + f for f in FILES.values()])
    return want, ''

def sglang_source():
    "The `sglang` package folder holding the three files, or None: $EAGLE3_SGLANG_SRC, an installed sglang, the pinned wheel's."
    if p := os.environ.get('EAGLE3_SGLANG_SRC'): return Path(p)
    if p := _installed(): return p
    p = pinned_folder()
    return p if all((p/f).exists() for f in FILES.values()) else None

def missing_reason()->str:
    "Why `sglang_source()` is None, for a skip."
    return (f"SGLang's source is not here: {os.environ.get(UNAVAILABLE_ENV) or 'not fetched'}; set EAGLE3_SGLANG_SRC to an "
            f"sglang package folder, install sglang, or let the suite download sglang=={PINNED} into .ci/cache")

class ForwardBatch(SimpleNamespace): "What the dump code recognises as SGLang's forward batch."
class PPProxyTensors(SimpleNamespace): pass
class LogitsProcessorOutput(SimpleNamespace): pass
class UnreducedOutput(SimpleNamespace): pass
class OwedOutput(SimpleNamespace): pass

def _control_plane(*a, **k): raise RuntimeError("SGLang's control plane is not part of this check")

_STUBS = {
    'sglang': {}, 'sglang.srt': {}, 'sglang.srt.debug_utils': {}, 'sglang.srt.model_executor': {},
    'sglang.srt.managers': {}, 'sglang.srt.layers': {}, 'sglang.srt.layers.layer_boundary': {},
    'sglang.srt.layers.layer_boundary.residual': {},
    'sglang.srt.managers.io_struct': dict(sock_recv=_control_plane, sock_send=_control_plane, wrap_as_pickle=_control_plane),
    'sglang.srt.runtime_context': dict(get_parallel=_control_plane, get_server_args=lambda: None, get_serving=_control_plane),
    'sglang.srt.utils': dict(get_device=lambda *a, **k: 'cpu'),
    'sglang.srt.distributed': {}, 'sglang.srt.layers.dp_attention': dict(get_moe_cp_size=lambda: 1, is_dp_attention_enabled=lambda: False),
    'sglang.srt.layers.logits_processor': dict(LogitsProcessorOutput=LogitsProcessorOutput),
    'sglang.srt.model_executor.forward_batch_info': dict(ForwardBatch=ForwardBatch, PPProxyTensors=PPProxyTensors),
    'sglang.srt.layers.layer_boundary.output': dict(UnreducedOutput=UnreducedOutput),
    'sglang.srt.layers.layer_boundary.residual.stream': dict(OwedOutput=OwedOutput),
}

@contextmanager
def sglang_debug_tools(src):
    "SGLang's hook_manager, tensor dump and dumper modules, loaded from `src`; sys.modules is restored on exit."
    saved = {k: v for k, v in sys.modules.items() if k == 'sglang' or k.startswith('sglang.')}
    for k in saved: del sys.modules[k]
    try:
        for name, attrs in _STUBS.items():
            m = types.ModuleType(name); m.__dict__.update(attrs); m.__path__ = []; sys.modules[name] = m
        loaded = {}
        for key, rel in FILES.items():
            name = 'sglang.' + rel[:-3].replace('/', '.')
            spec = importlib.util.spec_from_file_location(name, Path(src)/rel)
            mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod
            spec.loader.exec_module(mod)
            loaded[key] = mod
        yield SimpleNamespace(**loaded)
    finally:
        for k in [k for k in sys.modules if k == 'sglang' or k.startswith('sglang.')]: del sys.modules[k]
        sys.modules.update(saved)
