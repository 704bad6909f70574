"""A verify that falls back to greedy (VERIFY_GREEDY): SGLang releases whose verify commits the target's argmax for every
request where the sampling kernels are not used (`engine_rows.VERIFY_ROWS`, read from each release's
`srt/speculative/eagle_info.py` / `eagle_utils.py`). Requests at a temperature then get the greedy outputs, and the
deployment's accept length is the greedy pair's. Each row is stated by what the server reports: from 0.5.17 on the CPU
test is `is_cpu()`, the environment variable SGLANG_USE_CPU_ENGINE=1, which `--device cpu` does not set and no output
states, so a 'cpu' device alone gets a note that says it cannot tell, and the line SGLang's `get_device` prints only
where the variable is set names the fault. Planted: a 0.5.23 server on XPU, and one whose log carries that line, serving
sampled requests whose acceptance is what the pair accepts greedily; clean: the same on CUDA, `--device cpu` without the
line, and vLLM, which rejection-samples each request at its own temperature on every platform
(v1/sample/rejection_sampler.py:451-483). The 0.5.23 row is held against SGLang's own `_verify_uses_greedy`, `is_cpu` and
`get_device`, compiled from the pinned wheel (tests/sglang_source.py), with and without the variable."""
import json
import pytest
from eagle3_workbench.observed import compare_deployment

STEPS, N, PROMPTS = 4, 16, 4

@pytest.fixture(scope='module')
def greedy():
    "The zoo pair's own greedy runs on the prompts: what a deployment that verifies by argmax accepts (tokens per verify step)."
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    from eagle3_workbench.prompts import read_prompts
    s = Session(load_pair('zoo:tiny-dsv3'), speculative_num_steps=STEPS)
    lengths = [r.verify.accepted + 1 for p in read_prompts(n=PROMPTS) for r in s.run(N, prompt=p)]
    return sum(lengths) / len(lengths)

def _server_info(tmp_path, average, **args):
    "SGLang's /get_server_info as the server writes it (server args at the top, per-rank internal states), for the zoo pair."
    info = dict(model_path='zoo:tiny-dsv3', speculative_algorithm='EAGLE3', speculative_num_steps=STEPS, speculative_eagle_topk=1,
                speculative_num_draft_tokens=STEPS + 1, internal_states=[dict(avg_spec_accept_length=average)], **args)
    f = tmp_path/'server_info.json'; f.write_text(json.dumps(info))
    return f

def test_sampled_requests_verified_by_argmax_on_xpu_are_named(greedy, tmp_path):
    f = _server_info(tmp_path, greedy, device='xpu', version='0.5.23', speculative_use_rejection_sampling=False)
    cmp = compare_deployment(f, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7)
    vg = [x for x in cmp.findings() if x.code == 'VERIFY_GREEDY']
    assert len(vg) == 1 and vg[0].severity == 'error' and "device 'xpu'" in vg[0].message and 'eagle_utils.py:485-500' in vg[0].message
    assert vg[0].evidence['temperature'] == 0.7
    assert cmp.expected.settings['temperature'] == 0.0   # the expectation is what this deployment computes: greedy verification
    assert cmp.expected.accept_length == pytest.approx(greedy, abs=1e-9)   # the same runs as the pair's own greedy Session above
    assert cmp.verdict != 'below expectation'   # the greedy deployment accepts what the greedy pair does
    assert 'VERIFY_GREEDY' in str(cmp)

def test_device_cpu_alone_is_not_told_argmax_but_that_it_cannot_tell(greedy, tmp_path):
    "--device cpu without SGLANG_USE_CPU_ENGINE=1 samples in 0.5.23 (is_cpu() is the variable): the server info cannot say which, and the note says so."
    f = _server_info(tmp_path, greedy, device='cpu', version='0.5.23', speculative_use_rejection_sampling=False)
    cmp = compare_deployment(f, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7)
    assert 'VERIFY_GREEDY' not in [x.code for x in cmp.findings()]
    assert cmp.expected.settings['temperature'] == 0.7   # no verdict: the expectation samples as asked
    said = [n for n in cmp.notes if n.startswith('cannot tell from what the server reports')]
    assert len(said) == 1 and 'SGLANG_USE_CPU_ENGINE=1' in said[0] and '--device cpu' in said[0] and 'common.py:221-224' in said[0], cmp.notes

def test_the_cpu_engines_own_line_in_the_log_names_it(greedy, tmp_path):
    "With the variable set, SGLang's get_device (compiled from the pinned wheel) prints its line; the log holding it is told VERIFY_GREEDY."
    said = _get_device_line(env='1')
    assert said is not None and _get_device_line(env=None) is None   # printed only where is_cpu() holds
    from pathlib import Path
    fix = (Path(__file__).parent/'fixtures'/'observed'/'sglang_server.log').read_text()
    log = tmp_path/'cpu.log'; log.write_text(f"[2026-11-30 10:00:00] {said}\n" + fix)
    cmp = compare_deployment(log, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7)
    vg = [x for x in cmp.findings() if x.code == 'VERIFY_GREEDY']
    assert len(vg) == 1 and 'its log says so' in vg[0].message and cmp.expected.settings['temperature'] == 0.0

def test_the_same_deployment_on_cuda_is_clean(greedy, tmp_path):
    f = _server_info(tmp_path, greedy, device='cuda', version='0.5.23')
    cmp = compare_deployment(f, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7)
    assert 'VERIFY_GREEDY' not in [x.code for x in cmp.findings()]
    assert cmp.expected.settings['temperature'] == 0.7   # a sampled expectation, as the deployment samples
    assert any('ROCm' in n for n in cmp.notes)   # what 'cuda' cannot tell: a ROCm build's device is 'cuda' too

def test_greedy_requests_are_not_a_fault_on_cpu(greedy, tmp_path):
    "At temperature 0 every engine verifies by argmax: nothing to name."
    f = _server_info(tmp_path, greedy, device='cpu', version='0.5.23')
    cmp = compare_deployment(f, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.0)
    assert 'VERIFY_GREEDY' not in [x.code for x in cmp.findings()] and cmp.verdict != 'below expectation'

def test_the_log_line_of_an_older_release_names_it(greedy, tmp_path):
    "SGLang 0.5.6-0.5.12 warn once in the log (eagle_info.py); the log's server_args name no device here: the line is the evidence."
    from pathlib import Path
    fix = (Path(__file__).parent/'fixtures'/'observed'/'sglang_server.log').read_text()
    plain = tmp_path/'plain.log'; plain.write_text(fix)
    said = tmp_path/'said.log'; said.write_text(fix + "[2026-11-30 10:03:00] Tree speculative sampling kernel unavailable (likely AMD/HIP "
                                                      "build). Falling back to greedy verification.\n")
    codes = lambda p: [x.code for x in compare_deployment(p, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7).findings()]
    assert 'VERIFY_GREEDY' in codes(said) and 'VERIFY_GREEDY' not in codes(plain)

def test_vllm_on_cpu_samples_each_request():
    from eagle3_workbench.outputs import Observed
    from eagle3_workbench.engines import Engine
    from eagle3_workbench.knobs import verify_greedy
    assert verify_greedy(Observed(Engine.parse('vllm==0.32.0'), 'text', settings=dict(device='cpu'))) is None

def _pinned(path:str, *names):
    "Functions of the pinned wheel's `path`, compiled alone (nothing else of the file runs), and the file's text and their lines."
    import ast, glob, sys, zipfile
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from sglang_source import CACHE, PINNED
    whl = glob.glob(str(CACHE/f'sglang-{PINNED}-*.whl'))
    if not whl: pytest.skip(f"the pinned sglang=={PINNED} wheel is not in .ci/cache (tests/conftest.py downloads it; no network?)")
    text = zipfile.ZipFile(whl[0]).read(f'sglang/{path}').decode()
    fns = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in names}
    assert set(fns) == set(names), (path, names)
    return [fns[n] for n in names], text

def _compiled(fns, **ns):
    import __future__, ast
    exec(compile(ast.Module(fns, []), 'sglang', 'exec', flags=__future__.annotations.compiler_flag), ns)
    return ns

def _pinned_verify_predicate():
    "SGLang's own `_verify_uses_greedy`, compiled from the pinned wheel's eagle_utils.py (the one function, nothing else of the file runs)."
    (fn,), text = _pinned('srt/speculative/eagle_utils.py', '_verify_uses_greedy')
    return _compiled([fn])['_verify_uses_greedy'], (fn.lineno, fn.end_lineno), text

def _is_cpu(env:str|None)->bool:
    "SGLang 0.5.23's own `is_cpu()` (srt/utils/common.py, with the host checks it calls), under SGLANG_USE_CPU_ENGINE = `env` (None: unset)."
    import functools, os, platform, torch
    fns, _ = _pinned('srt/utils/common.py', 'is_host_cpu_x86', 'is_host_cpu_arm64', 'is_cpu')
    ns = _compiled(fns, os=os, platform=platform, torch=torch, lru_cache=functools.lru_cache)
    with pytest.MonkeyPatch.context() as mp:
        if env is None: mp.delenv('SGLANG_USE_CPU_ENGINE', raising=False)
        else: mp.setenv('SGLANG_USE_CPU_ENGINE', env)
        return ns['is_cpu']()

def _get_device_line(env:str|None)->str|None:
    "What SGLang 0.5.23's own `get_device()` logs when it picks the device itself (no --device), under SGLANG_USE_CPU_ENGINE = `env`; None: nothing."
    import functools, logging
    (fn,), _ = _pinned('srt/utils/common.py', 'get_device')
    said, log = [], logging.getLogger('sglang-get-device-under-test')
    log.addHandler(type('H', (logging.Handler,), dict(emit=lambda self, r: said.append(r.getMessage())))()); log.propagate = False
    def elsewhere(*a): raise LookupError("not the CPU branch")   # on this host the other branches would look for accelerators
    ns = _compiled([fn], lru_cache=functools.lru_cache, is_cpu=lambda: _is_cpu(env), cpu_has_amx_support=lambda: False, logger=log,
                   torch=type('T', (), dict(cuda=None))(), is_npu=elsewhere)
    try: assert ns['get_device']() == 'cpu'
    except (LookupError, AttributeError, TypeError): pass
    return said[0] if said else None

def test_the_row_is_what_sglang_0523s_own_predicate_decides():
    "For every device and both values of the switch, the 0.5.23 row names a sampled request's verify greedy exactly where SGLang's own "
    "`_verify_uses_greedy` (is_all_greedy False: a sampled batch) returns True, and on `--device cpu` it calls `is_cpu` as SGLang computes it "
    "from the environment: with SGLANG_USE_CPU_ENGINE unset it samples and the row gives no verdict, only a note; with it set it is argmax, "
    "which the row tells from get_device's line, never from the device."
    from eagle3_workbench.engine_rows import SGLANG, VERIFY_ROWS
    from eagle3_workbench.engines import Engine
    from eagle3_workbench.outputs import Observed
    from eagle3_workbench.knobs import verify_greedy, verify_note
    uses_greedy, (first, last), text = _pinned_verify_predicate()
    row, = [r for r in VERIFY_ROWS if r.engine == SGLANG and r.since == '0.5.23']
    assert f"eagle_utils.py:{first}-{last}" in row.source
    ours = lambda dev, rs, **more: verify_greedy(Observed(Engine.parse(SGLANG), 'settings', settings=dict(device=dev, version='0.5.23', rejection_sampling=rs, **more)))
    decided = {}
    for dev in ('cuda', 'hip', 'xpu', 'npu', 'musa'):   # an accelerator's server: the CPU engine's variable unset
        for rs in (False, True):
            theirs = uses_greedy(is_all_greedy=False, is_cpu=_is_cpu(None), is_hip=dev == 'hip', is_xpu=dev == 'xpu', use_rejection_sampling=rs)
            decided[dev, rs] = theirs
            assert (ours(dev, rs) is not None) == theirs, (dev, rs, theirs)
    assert not _is_cpu(None) and _is_cpu('1') and not _is_cpu('0')   # is_cpu() is the variable (this host is x86-64 or arm64), not --device
    for env in (None, '1'):   # --device cpu: SGLang's answer is the variable's
        for rs in (False, True):
            theirs = uses_greedy(is_all_greedy=False, is_cpu=_is_cpu(env), is_hip=False, is_xpu=False, use_rejection_sampling=rs)
            assert theirs == (env == '1')
            assert ours('cpu', rs) is None and 'cannot tell' in verify_note(Observed(Engine.parse(SGLANG), 's', settings=dict(device='cpu', version='0.5.23')))
            line = _get_device_line(env)   # what the log holds when --device was left to SGLang
            told = ours('cpu', rs, verify_logged=next((x for x in row.told_by if line and x in line), None))
            assert (told is not None) == theirs and (told is None or told['shown'] == 'log'), (env, rs, line)
    assert not decided['cuda', False] and decided['hip', False] != decided['hip', True] and decided['xpu', True]   # the cases that differ
    assert uses_greedy(is_all_greedy=True, is_cpu=False, is_hip=False, is_xpu=False, use_rejection_sampling=False)   # greedy requests: argmax everywhere
    assert 'speculative_use_rejection_sampling' in text.splitlines()[639]   # the call site the row cites (line 640) reads the switch
