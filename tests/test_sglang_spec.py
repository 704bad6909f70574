"""SGLang 0.5.23's own EAGLE-3 runs on CPU, held against the workbench request by request.

`tests/fixtures/sglang-spec/` holds what a real SGLang server wrote while serving the zoo's tiny-llama pair with
speculative decoding (chain of 3, greedy, 8 zoo prompts x 32 tokens), correctly wired and with planted faults
(`scripts/sglang_spec_run.py` made them; the folder's README has the commands). The workbench runs the same prompts with
the same settings in-process, reading the draft config as SGLang 0.5.23 reads it.
"""
import json
from pathlib import Path
import pytest
from served_pair import SETTINGS, draft_copy, zoo_prompt_ids   # tests/, beside this file

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT/'tests'/'fixtures'/'sglang-spec'
SHIPPED = (2, 5, 7)   # the zoo draft's top-level ids; SGLang 0.5.23 reads only eagle_config's, so as shipped it feeds its default
# what scripts/sglang_spec_run.py wrote into the draft's config.json for each case (None: as shipped)
EDITS = {'correct': None, 'off_by_one_toplevel': ('top', [3, 6, 8]), 'off_by_one': ('nested', [2, 5, 7]), 'embedding': ('nested', [-1, 4, 6]),
         'fixed': ('nested', [1, 4, 6])}   # fixed: what `diagnose` recommended for the off_by_one copy (fixed/diagnose.json)
FED = {'correct': (2, 5, 7), 'off_by_one_toplevel': (2, 5, 7), 'off_by_one': (3, 6, 8), 'embedding': (0, 5, 7), 'fixed': (2, 5, 7)}   # SGLang 0.5.23's llama.py: id k = resid[k + 1]
CASES = [c for c in EDITS if (FIX/c/'responses.jsonl').exists()]

def responses(case:str)->list: return [json.loads(l) for l in (FIX/case/'responses.jsonl').read_text().splitlines() if l.strip()]

@pytest.fixture(scope='module')
def prompts(): return zoo_prompt_ids(8)

@pytest.fixture(scope='module')
def runs(prompts, tmp_path_factory):
    "Each case run in-process as SGLang 0.5.23 reads its config: (pair, RunReport)."
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import run_prompts
    out = {}
    for case in CASES:
        pair = load_pair('zoo:tiny-llama', draft_copy(tmp_path_factory.mktemp(case), EDITS[case]), engine='sglang==0.5.23')
        out[case] = pair, run_prompts(pair, prompts[:len(responses(case))], max_new_tokens=32, progress=False, **SETTINGS)
    return out

def per_request(rep)->list:
    "What SGLang's meta_info says of each request, computed from the in-process cycles."
    return [dict(spec_verify_ct=len(run), spec_num_correct_drafts=sum(s.verify.accepted for s in run),
                 spec_correct_drafts_histogram=[sum(s.verify.accepted == j for s in run) for j in range(SETTINGS['speculative_num_steps'] + 1)])
            for run in rep.runs]

def test_the_fixtures_are_what_the_script_says():
    assert CASES == list(EDITS), CASES   # every case the script serves
    for case in CASES:
        rs = responses(case)
        assert len(rs) in (4, 8) and all(r['meta_info']['completion_tokens'] == 32 and len(r['output_ids']) == 32 for r in rs), case
        info = json.loads((FIX/case/'server_info.json').read_text())
        assert (info['speculative_algorithm'], info['speculative_num_steps'], info['speculative_num_draft_tokens'], info['device']) == ('EAGLE3', 3, 4, 'cpu')

@pytest.mark.slow
def test_each_case_is_fed_what_sglang_reads(runs):
    for case in CASES: assert tuple(runs[case][0].wiring.resid_layers) == FED[case], case

@pytest.mark.slow
@pytest.mark.parametrize('case', CASES)
def test_each_wiring_is_the_engines_to_the_verify_step(runs, case):
    "Every request, correctly wired, one layer off or fed the embedding: SGLang's verify steps, accepted drafts and histogram, and its greedy tokens, exactly."
    _, rep = runs[case]
    rs = responses(case)
    for i, (mine, r) in enumerate(zip(per_request(rep), rs)):
        m = r['meta_info']
        assert mine == {k: m[k] for k in mine}, (case, i, mine, m)
        assert rep.outputs[i][:32] == r['output_ids'], (case, i)
    assert rep.lossless is True
    total = sum(len(run) for run in rep.runs)
    assert total == sum(r['meta_info']['spec_verify_ct'] for r in rs)
    served = sum(r['meta_info']['spec_num_correct_drafts'] + r['meta_info']['spec_verify_ct'] for r in rs) / total   # accepted + bonus per verify step
    assert abs(rep.summary['accept_length'] - served) < 1e-12

@pytest.mark.slow
def test_counting_after_the_prefill_token_would_run_more_verify_steps(runs, prompts):
    "SGLang counts the prefill's token toward max_new_tokens; counted from the token after it, a run whose tokens land on 32 runs one verify more."
    from eagle3_workbench.engine import Session
    more = {}
    for case in CASES:
        pair, rep = runs[case]
        rs = responses(case)
        for i, p in enumerate(prompts[:len(rs)]):
            s = Session(pair, **SETTINGS)
            s.stopping = s.stopping._replace(counts_prefill=False)   # the workbench's rule before it read the engines'
            lands = 1 + sum(c.verify.accept_length for c in rep.runs[i]) == 32   # the prefill's token and the cycles make exactly 32
            assert len(s.run(32, prompt=p)) == rs[i]['meta_info']['spec_verify_ct'] + lands, (case, i)
            more[case] = more.get(case, 0) + lands
    assert more.get('off_by_one', 0) >= 1 and more.get('embedding', 0) >= 1, more   # 72 and 53 verify steps served, 73 and 54 counted the other way

def compare_json(forked_cli, tmp_path, case:str, draft)->tuple:
    "(exit code, JSON) of `compare` on a case's responses, the expectation wired as SGLang 0.5.23 reads `draft`."
    n = len(responses(case))
    p = forked_cli.run(['compare', '--observed', str(FIX/case/'responses.jsonl'), '--target', 'zoo:tiny-llama', '--draft', str(draft),
                        '--engine', 'sglang==0.5.23', '--n-prompts', str(n), '--json'], tmp_path, 900)
    assert p.returncode in (0, 1, 3), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)

@pytest.mark.slow
@pytest.mark.parametrize('case', [c for c in ('correct', 'off_by_one') if c in CASES])
def test_compare_says_as_expected_with_the_engines_verify_steps(forked_cli, tmp_path, case):
    "The pair wired as the case's config reads: as expected, the same verify steps and accept length as SGLang counted."
    code, j = compare_json(forked_cli, tmp_path, case, draft_copy(tmp_path, EDITS[case]))
    rs = responses(case)
    assert (code, j['verdict']) == (0, 'as expected'), j['verdict']
    assert j['observed']['drafts'] == j['expected']['cycles'] == sum(r['meta_info']['spec_verify_ct'] for r in rs)
    assert abs(j['observed']['accept_length'] - j['expected']['accept_length']) < 1e-9
    assert tuple(j['expected']['resid_layers']) == FED[case]

@pytest.mark.slow
def test_compare_names_the_planted_embedding_against_the_shipped_pair(forked_cli, tmp_path):
    "The embedding-fed deployment against what the shipped pair accepts: below expectation."
    code, j = compare_json(forked_cli, tmp_path, 'embedding', draft_copy(tmp_path, None))
    assert (code, j['verdict']) == (1, 'below expectation'), j['verdict']
    assert j['observed']['accept_length'] < j['expected']['accept_length'] - 1

@pytest.mark.parametrize('case', CASES)
def test_the_log_read_is_the_responses_accept_length(case):
    "The server's decode lines, each weighed by the requests it covers, give the accept length its responses give (lines print 2 decimals)."
    from eagle3_workbench.outputs import read_observed
    rs = responses(case)
    served = sum(r['meta_info']['spec_num_correct_drafts'] + r['meta_info']['spec_verify_ct'] for r in rs) / sum(r['meta_info']['spec_verify_ct'] for r in rs)
    assert abs(read_observed(FIX/case/'server.log').accept_length - served) < 0.005, case

def test_a_device_cpu_server_is_not_told_it_verifies_by_argmax():
    "This server ran with --device cpu and without SGLANG_USE_CPU_ENGINE: SGLang 0.5.23's is_cpu() is false there, so no VERIFY_GREEDY; the report cannot tell."
    from eagle3_workbench.outputs import read_observed
    from eagle3_workbench.knobs import verify_greedy, verify_note
    o = read_observed(FIX/'correct'/'server_info.json')
    assert (o.release.key, o.settings['device']) == ('sglang==0.5.23', 'cpu')
    assert 'SGLANG_USE_CPU_ENGINE' not in (FIX/'correct'/'server.log').read_text()   # the environment is not in what it reports
    assert verify_greedy(o) is None and verify_note(o).startswith('cannot tell from what the server reports')

@pytest.mark.slow
def test_compare_on_the_embedding_fed_servers_log_puts_the_wiring_first(forked_cli, tmp_path):
    "SGLang 0.5.23's log (its server_args dict: algorithm, parallel layout, steps) rules out the other causes: below expectation, the wiring first."
    p = forked_cli.run(['compare', '--observed', str(FIX/'embedding'/'server.log'), '--target', 'zoo:tiny-llama', '--engine', 'sglang==0.5.23',
                        '--n-prompts', '4', '--json'], tmp_path, 900)
    assert p.returncode == 1, p.stderr[-2000:]
    j = json.loads(p.stdout)
    assert j['verdict'] == 'below expectation' and j['expected']['settings']['speculative_num_steps'] == 3   # read from the log, not assumed
    first, *rest = j['causes']
    assert (first['code'], first['status']) == ('AUX_LAYERS_MISMATCH', 'open'), j['causes']
    assert {c['code']: c['status'] for c in rest}['FC_SKIPPED'] == 'ruled out'
