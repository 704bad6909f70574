"""SGLang's own debugging code, run on CPU without SGLang's runtime.

Three files of a real SGLang source tree write what the workbench reads: `model_executor/hook_manager.py`
(`--forward-hooks`), `debug_utils/tensor_dump_forward_hook.py` (`--debug-tensor-dump-output-folder`) and
`debug_utils/dumper.py` (`DUMPER_ENABLE=1`). Importing them normally pulls in the whole server (CUDA kernels, ZMQ
plumbing, multimodal configs), so they are loaded by path instead, with the few SGLang modules they import replaced,
for as long as the context lasts, by namespaces: the dumper's control plane (HTTP/ZMQ, the server's runtime context,
which raise if ever called) and the classes the dump code tests values against (`ForwardBatch`, ...), which are plain
classes the tests instantiate. Nothing else of the three files is changed.

The source is `$EAGLE3_SGLANG_SRC` (the `sglang` package folder; `.ci/run` extracts the three files of a pinned wheel
there) or an installed `sglang`, located without importing it.
"""
import importlib.util, os, sys, types
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

FILES = {'hook_manager': 'srt/model_executor/hook_manager.py',
         'tensor_dump': 'srt/debug_utils/tensor_dump_forward_hook.py',
         'dumper': 'srt/debug_utils/dumper.py'}

def sglang_source():
    "The `sglang` package folder holding the three files, or None."
    if p := os.environ.get('EAGLE3_SGLANG_SRC'): return Path(p)
    try: spec = importlib.util.find_spec('sglang')
    except (ImportError, ValueError): return None
    if spec is None or not spec.submodule_search_locations: return None
    p = Path(next(iter(spec.submodule_search_locations)))
    return p if all((p/f).exists() for f in FILES.values()) else None

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
