"Scenarios for observed vs expected acceptance: engine formats checked against their own tooling, the compare command end to end."
import json
from pathlib import Path
import pytest
from eagle3_workbench.outputs import Observed, read_observed, read_vllm_metrics, vllm_metrics_text
from eagle3_workbench.observed import observed_from_runs
from eagle3_workbench.cli import main, EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_NOT_ENOUGH_EVIDENCE

FIX = Path(__file__).parent/'fixtures'/'observed'
STEPS, N, PROMPTS = 4, 24, 8

# ---- formats: what each fixture is read as (the dispatcher's table) ----

@pytest.mark.parametrize('name,engine,kind,drafts', [
    ('vllm_metrics_after.prom', 'vllm', 'vLLM /metrics', 650),
    ('vllm_chat_detailed.jsonl', 'vllm', 'vLLM per-request metrics', 18),
    ('vllm_completion_summary.json', 'vllm', 'vLLM per-request metrics', 43),
    ('vllm_server.log', 'vllm', 'vLLM log', 550),
    ('sglang_generate.jsonl', 'sglang', 'SGLang meta_info', 22),
    ('sglang_generate_batch.json', 'sglang', 'SGLang meta_info', 22),
    ('sglang_generate_v04.json', 'sglang', 'SGLang meta_info', 11),
    ('sglang_server_info.json', 'sglang', 'SGLang server info', None),
    ('sglang_server.log', 'sglang', 'SGLang server log', None)])
def test_each_fixture_is_read_by_its_reader(name, engine, kind, drafts):
    o = read_observed(FIX/name)
    assert (o.engine.key, o.drafts) == (engine, drafts) and kind in o.source, o.source
    assert 1.0 <= o.accept_length <= 4.0
    json.dumps(o.to_json(), allow_nan=False)

def test_vllm_counters_as_prometheus_client_writes_them():
    "The same counts written by prometheus_client (vLLM's own exporter, with `_created` samples) read as ours do; ours parse with its parser."
    pc = pytest.importorskip('prometheus_client')
    from prometheus_client.parser import text_string_to_metric_families
    obs = Observed(None, 't', drafts=37, draft_tokens=111, accepted=50, accepted_per_pos=[25, 15, 10])
    reg, lab = pc.CollectorRegistry(), ['model_name', 'engine']
    for key, name, doc in (('drafts', 'vllm:spec_decode_num_drafts', 'Number of spec decoding drafts.'),
                           ('draft_tokens', 'vllm:spec_decode_num_draft_tokens', 'Number of draft tokens.'),
                           ('accepted', 'vllm:spec_decode_num_accepted_tokens', 'Number of accepted tokens.')):
        pc.Counter(name, doc, lab, registry=reg).labels('m', '0').inc(getattr(obs, key))
    pos = pc.Counter('vllm:spec_decode_num_accepted_tokens_per_pos', 'Accepted tokens per draft position.', lab + ['position'], registry=reg)
    for j, a in enumerate(obs.accepted_per_pos): pos.labels('m', '0', str(j)).inc(a)
    theirs = read_vllm_metrics(pc.generate_latest(reg).decode())
    ours = read_vllm_metrics(vllm_metrics_text(obs, 'm'))
    for o in (theirs, ours): assert (o.drafts, o.draft_tokens, o.accepted, o.accepted_per_pos) == (37, 111, 50, [25, 15, 10])
    fams = {f.name: f for f in text_string_to_metric_families(vllm_metrics_text(obs, 'm'))}
    assert fams['vllm:spec_decode_num_drafts'].type == 'counter'
    assert [s.labels['position'] for s in fams['vllm:spec_decode_num_accepted_tokens_per_pos'].samples] == ['0', '1', '2']

# ---- the command, end to end, on files in the engines' formats ----

@pytest.fixture(scope='module')
def runs():
    "The zoo pair, unfaulted, on the first prompts: the cycles a correct deployment would run."
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    from eagle3_workbench.prompts import read_prompts
    s = Session(load_pair('zoo:tiny-dsv3'), speculative_num_steps=STEPS)
    return [s.run(N, prompt=p) for p in read_prompts(n=PROMPTS)]

def _sglang_meta(run, steps=STEPS)->dict:
    "One /generate response as SGLang main writes it (spec_decoding_meta.py); its histogram grows only to the longest acceptance."
    hist = [sum(r.verify.accepted == j for r in run) for j in range(steps + 1)]
    while hist and not hist[-1]: hist.pop()
    v, acc = len(run), sum(r.verify.accepted for r in run)
    return dict(text='', meta_info=dict(id='x', finish_reason=dict(type='length', length=N), prompt_tokens=12, completion_tokens=1 + v + acc,
                                        cached_tokens=0, e2e_latency=0.1, spec_accept_rate=acc / (v * steps), spec_accept_length=(1 + v + acc) / v,
                                        spec_accepted_drafts=acc, spec_proposed_drafts=v * steps, spec_verify_ct=v, spec_accept_histogram=hist))

def compare_command(path, *args, json_out=False):
    "`eagle3-workbench compare --observed PATH ...`, run in-process: (what it printed, on stdout or for an error on stderr, exit code)."
    import io, contextlib
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try: code = main(['compare', '--observed', str(path), *map(str, args), *(['--json'] if json_out else [])])
        except SystemExit as e: code = e.code   # argparse's own refusal
    return (out.getvalue() if out.getvalue() else err.getvalue()).strip(), code

def _compare(path, json_out=False):
    return compare_command(path, '--n-prompts', PROMPTS, '--max-new-tokens', N, json_out=json_out)

def test_sglang_responses_of_a_correct_deployment_are_as_expected(runs, tmp_path):
    f = tmp_path/'responses.jsonl'
    f.write_text(''.join(json.dumps(_sglang_meta(r)) + '\n' for r in runs))
    out, code = _compare(f, json_out=True)
    j = json.loads(out)
    assert code == EXIT_OK, out
    assert (j['verdict'], j['first_divergence'], j['causes']) == ('as expected', None, [])
    assert j['expected']['settings']['speculative_num_steps'] == STEPS          # from spec_proposed_drafts / spec_verify_ct
    assert [p['position'] for p in j['positions']] == [1, 2, 3, 4] and all(p['difference'] == 0 for p in j['positions'])

def test_server_info_average_below_expectation(runs, tmp_path):
    "Acceptance cut after position 2, seen only through /get_server_info's average: below, position unknown."
    lengths = [min(r.verify.accepted, 2) + 1 for run in runs for r in run]
    info = dict(model_path='zoo:tiny-dsv3', speculative_algorithm='EAGLE3', speculative_num_steps=STEPS, speculative_eagle_topk=1,
                speculative_num_draft_tokens=STEPS + 1, internal_states=[dict(avg_spec_accept_length=sum(lengths) / len(lengths))],
                version='0.5.6')
    f = tmp_path/'server_info.json'; f.write_text(json.dumps(info))
    out, code = _compare(f)
    assert code == EXIT_CHECK_FAILED, out
    assert 'BELOW EXPECTATION' in out and 'reports an average only' in out and 'no interval' in out

def test_few_verify_steps_are_not_enough_evidence():
    out, code = _compare(FIX/'vllm_chat_detailed.jsonl', json_out=True)   # 18 verify steps in two requests
    assert code == EXIT_NOT_ENOUGH_EVIDENCE and json.loads(out)['verdict'] == 'not enough evidence'

@pytest.mark.parametrize('content,expected', [
    (None, 'no such file'),
    ('hello\n', 'not a format'),
    ('INFO 01-05 09:00:10 SpecDecoding metrics: Draft acceptance rate: 0.500, Mean acceptance length: 2.00\n', 'with per-position rates'),
    ('# a scrape\nvllm:generation_tokens_total{engine="0"} 5.0\nvllm:spec_decode_num_draftsX 1\n', 'no vllm:spec_decode_* counters'),
    ('{"choices": [], "metrics": {"speculative_decoding": {"num_spec_steps": 3}}}', "no 'num_draft_tokens'"),
    ('[{"text": "x", "meta_info": {"completion_tokens": 3}}]', 'no meta_info with spec_verify_ct'),
    ('{"internal_states": [{}], "speculative_algorithm": "EAGLE3"}', 'avg_spec_accept_length'),
    ('{"id": 1}\n{"id": 2\n', ':2: not JSON')])
def test_bad_observed_files_exit_2_naming_file_and_key(tmp_path, content, expected):
    f = tmp_path/'observed.txt'
    if content is not None: f.write_text(content)
    out, code = compare_command(f)
    assert code == EXIT_BAD_INPUT and out.startswith('eagle3-workbench compare: error: ') and expected in out and '\n' not in out, out
    if content is not None and 'no such file' not in expected: assert str(f) in out

def test_swapped_scrapes_and_bad_settings_exit_2():
    out, code = compare_command(FIX/'vllm_metrics_before.prom', '--before', FIX/'vllm_metrics_after.prom', json_out=True)
    assert code == EXIT_BAD_INPUT and 'restarted' in json.loads(out)['error']
    out, code = compare_command(FIX/'vllm_metrics_after.prom', '--steps', 0)      # refused before any model loads
    assert code == EXIT_BAD_INPUT and '--steps' in out and 'must be >= 1' in out
    out, code = compare_command(FIX/'vllm_metrics_after.prom', '--topk', 2000)  # needs the draft's vocabulary: after the load
    assert code == EXIT_BAD_INPUT and '--topk (speculative_eagle_topk)=2000: expected 1 .. draft vocabulary size 1024' in out
    out, code = compare_command(FIX/'sglang_server.log', '--before', FIX/'vllm_metrics_before.prom')
    assert code == EXIT_BAD_INPUT and 'only applies to vLLM /metrics' in out
