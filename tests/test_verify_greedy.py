"""A verify that falls back to greedy (VERIFY_GREEDY): SGLang releases whose verify commits the target's argmax for every
request on a device without the sampling kernels (`engine_rows.VERIFY_ROWS`, read from each release's
`srt/speculative/eagle_info.py` / `eagle_utils.py`). Requests at a temperature then get the greedy outputs, and the
deployment's accept length is the greedy pair's. Planted: an SGLang 0.5.23 server on `--device cpu` serving sampled
requests, whose acceptance is what the pair accepts greedily; clean: the same on CUDA, and vLLM, which rejection-samples
each request at its own temperature on every platform (v1/sample/rejection_sampler.py:451-483). The 0.5.23 row is held
against SGLang's own predicate, `_verify_uses_greedy`, compiled from the pinned wheel (tests/sglang_source.py)."""
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

def test_sampled_requests_verified_by_argmax_on_cpu_are_named(greedy, tmp_path):
    f = _server_info(tmp_path, greedy, device='cpu', version='0.5.23', speculative_use_rejection_sampling=False)
    cmp = compare_deployment(f, n_prompts=PROMPTS, max_new_tokens=N, temperature=0.7)
    vg = [x for x in cmp.findings() if x.code == 'VERIFY_GREEDY']
    assert len(vg) == 1 and vg[0].severity == 'error' and "device 'cpu'" in vg[0].message and 'eagle_utils.py:485-500' in vg[0].message
    assert vg[0].evidence['temperature'] == 0.7
    assert cmp.expected.settings['temperature'] == 0.0   # the expectation is what this deployment computes: greedy verification
    assert cmp.expected.accept_length == pytest.approx(greedy, abs=1e-9)   # the same runs as the pair's own greedy Session above
    assert cmp.verdict != 'below expectation'   # the greedy deployment accepts what the greedy pair does
    assert 'VERIFY_GREEDY' in str(cmp)

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

def _pinned_verify_predicate():
    "SGLang's own `_verify_uses_greedy`, compiled from the pinned wheel's eagle_utils.py (the one function, nothing else of the file runs)."
    import ast, glob, sys, zipfile
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from sglang_source import CACHE, PINNED
    whl = glob.glob(str(CACHE/f'sglang-{PINNED}-*.whl'))
    if not whl: pytest.skip(f"the pinned sglang=={PINNED} wheel is not in .ci/cache (tests/conftest.py downloads it; no network?)")
    text = zipfile.ZipFile(whl[0]).read('sglang/srt/speculative/eagle_utils.py').decode()
    fn, = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == '_verify_uses_greedy']
    ns = {}
    exec(compile(ast.Module([fn], []), 'eagle_utils.py', 'exec'), ns)   # a pure predicate of five booleans
    return ns['_verify_uses_greedy'], (fn.lineno, fn.end_lineno), text

def test_the_row_is_what_sglang_0523s_own_predicate_decides():
    "For every device and both values of the switch, the 0.5.23 row names a sampled request's verify greedy exactly where"
    " SGLang's own `_verify_uses_greedy` (called with is_all_greedy False: a sampled batch) returns True; the row cites its lines."
    from eagle3_workbench.engine_rows import SGLANG, VERIFY_ROWS
    from eagle3_workbench.engines import Engine
    from eagle3_workbench.outputs import Observed
    from eagle3_workbench.knobs import verify_greedy
    uses_greedy, (first, last), text = _pinned_verify_predicate()
    row, = [r for r in VERIFY_ROWS if r.engine == SGLANG and r.since == '0.5.23']
    assert f"eagle_utils.py:{first}-{last}" in row.source
    decided = {}
    for dev in ('cpu', 'cuda', 'hip', 'xpu', 'npu', 'musa'):
        for rs in (False, True):
            theirs = uses_greedy(is_all_greedy=False, is_cpu=dev == 'cpu', is_hip=dev == 'hip', is_xpu=dev == 'xpu', use_rejection_sampling=rs)
            ours = verify_greedy(Observed(Engine.parse(SGLANG), 'settings', settings=dict(device=dev, version='0.5.23', rejection_sampling=rs)))
            decided[dev, rs] = theirs
            assert (ours is not None) == theirs, (dev, rs, theirs, ours)
    assert decided['cpu', True] and not decided['cuda', False] and decided['hip', False] != decided['hip', True]   # the cases that differ
    assert uses_greedy(is_all_greedy=True, is_cpu=False, is_hip=False, is_xpu=False, use_rejection_sampling=False)   # greedy requests: argmax everywhere
    assert 'speculative_use_rejection_sampling' in text.splitlines()[639]   # the call site the row cites (line 640) reads the switch
