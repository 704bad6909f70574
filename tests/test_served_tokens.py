"""TARGET_OUTPUT_DIVERGES end to end: `compare --json` on SGLang /generate responses whose `output_ids` are the zoo
tiny-llama target's own greedy tokens, and on a copy with three requests planted off them and the acceptance of the
issue's bfloat16 deployment (tests/fixtures/observed/make_sglang_output_ids.py wrote both). Each command runs in a
process of its own, forked from an interpreter that imported torch once (`forked_cli.py`)."""
import json
from pathlib import Path
import pytest

FIX = Path(__file__).parent/'fixtures'/'observed'
CLEAN, PLANTED = FIX/'sglang_generate_output_ids.jsonl', FIX/'sglang_generate_output_ids_diverged.jsonl'
ARGS = ['--target', 'zoo:tiny-llama', '--n-prompts', 8, '--json']

def compare(forked_cli, tmp_path, path, *extra)->tuple:
    "(exit code, JSON) of `compare --observed PATH` on the tiny-llama pair and the first 8 zoo prompts."
    p = forked_cli.run(['compare', '--observed', path, *ARGS, *extra], tmp_path, 900)
    return p.returncode, json.loads(p.stdout)

def served(path)->list: return [json.loads(l)['output_ids'] for l in path.read_text().splitlines()]

def planted_positions()->list:
    "The 1-based new token where each planted request first leaves the clean one, read from the two files."
    return [next(j + 1 for j, (a, b) in enumerate(zip(c, p)) if a != b) for c, p in zip(served(CLEAN), served(PLANTED)) if c != p]

def test_the_clean_fixture_is_the_targets_greedy_decoding():
    "The clean responses' tokens are tiny-llama's greedy decoding of the zoo prompts, by transformers' own generate."
    import torch
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.prompts import read_prompts
    pair = load_pair('zoo:tiny-llama')
    for text, out in zip(read_prompts(None, 8), served(CLEAN)):
        ids = torch.tensor([pair.tokenizer(text, add_special_tokens=False)['input_ids']])
        got = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(out), do_sample=False, pad_token_id=0)
        assert got[0, ids.shape[1]:].tolist() == out
    assert planted_positions() == [1, 5, 12]

@pytest.mark.slow
def test_planted_divergence_leads_the_causes(forked_cli, tmp_path):
    rc, j = compare(forked_cli, tmp_path, PLANTED, '--temperature', 0)
    assert rc == 1 and j['verdict'] == 'below expectation' and j['signature'] == 'from position 1', j['verdict']
    first, f = j['causes'][0], j['findings'][0]
    assert (first['code'], first['status']) == ('TARGET_OUTPUT_DIVERGES', 'shown'), j['causes']
    assert (f['code'], f['severity']) == ('TARGET_OUTPUT_DIVERGES', 'error') and 'lossless' in f['message']
    pos = planted_positions()
    ev = j['expected']['facts']['served_tokens']
    assert (ev['verdict'], ev['compared'], ev['diverging'], ev['first_divergence']) == ('diverges', 8, len(pos), pos)
    assert ev['median_first_divergence'] == sorted(pos)[len(pos) // 2]
    dbe = next(x for x in j['findings'] if x['code'] == 'DEPLOYMENT_BELOW_EXPECTATION')
    assert dbe['evidence']['causes'][0]['code'] == 'TARGET_OUTPUT_DIVERGES'   # the shortfall's most specific cause
    assert [c['code'] for c in j['causes']].count('TARGET_OUTPUT_DIVERGES') == 1

@pytest.mark.slow
def test_assumed_temperature_still_leads_but_only_fits(forked_cli, tmp_path):
    "The issue's command, no --temperature: the responses do not say theirs, so the divergence fits and asks for it."
    rc, j = compare(forked_cli, tmp_path, PLANTED)
    assert rc == 1 and (j['causes'][0]['code'], j['causes'][0]['status']) == ('TARGET_OUTPUT_DIVERGES', 'fits'), j['causes']
    assert (j['findings'][0]['code'], j['findings'][0]['severity']) == ('TARGET_OUTPUT_DIVERGES', 'warning')
    assert '--temperature' in j['findings'][0]['message']

@pytest.mark.slow
def test_clean_outputs_are_a_positive_check_not_a_finding(forked_cli, tmp_path):
    rc, j = compare(forked_cli, tmp_path, CLEAN, '--temperature', 0)
    assert rc == 0 and j['verdict'] == 'as expected', j['verdict']
    assert 'TARGET_OUTPUT_DIVERGES' not in {f['code'] for f in j['findings']}
    ev = j['expected']['facts']['served_tokens']
    assert (ev['verdict'], ev['compared'], ev['diverging'], ev['tokens_compared']) == ('agrees', 8, 0, sum(map(len, served(CLEAN))))
