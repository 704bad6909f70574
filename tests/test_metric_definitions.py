"""Compare's metric definitions: every reader states what its engine's numbers meant, the readers' conversion is checked
against the engine's own printed mean in the same output, and a number from elsewhere is converted before it is
compared: the mis-read definition gives a false 'below expectation', the converted one does not."""
import re
from pathlib import Path
import pytest
from eagle3_workbench.outputs import read_observed
from eagle3_workbench.observed import Expected, compare_observed
from eagle3_workbench.metrics import Definition, READ_DEFINITIONS, definition_of, reported

OBS = Path(__file__).parent/'fixtures'/'observed'
FILES = ['sglang_generate.jsonl', 'sglang_generate_batch.json', 'sglang_generate_v04.json', 'sglang_server.log', 'sglang_server_info.json',
         'vllm_chat_detailed.jsonl', 'vllm_completion_summary.json', 'vllm_metrics_after.prom', 'vllm_server.log']

@pytest.mark.parametrize('name', FILES)
def test_every_reader_states_its_definition(name):
    o = read_observed(OBS/name)
    d = definition_of(o)
    assert d in READ_DEFINITIONS.values() and d.printed
    assert o.accept_length is not None and o.accept_length >= 1   # the common definition counts the bonus token: never below 1

def test_the_vllm_log_reader_meets_the_engines_own_mean():
    "Each SpecDecoding line prints its mean (bonus counted) beside the counts: the reader's accept length of that line alone equals it."
    lines = [l for l in (OBS/'vllm_server.log').read_text().splitlines() if 'SpecDecoding metrics' in l]
    for line in lines:
        o = read_observed(line + '\n')
        printed = float(re.search(r'Mean acceptance length: ([0-9.]+)', line)[1])
        assert abs(o.accept_length - printed) < 0.005, (o.accept_length, printed)
        rate = float(re.search(r'Avg Draft acceptance rate: ([0-9.]+)%', line)[1]) / 100   # per drafted token: a third definition
        assert abs(o.accepted / o.draft_tokens - rate) < 0.0005
        assert abs(sum(o.per_position) - (o.accept_length - 1)) < 0.01   # unconditional rates sum to the accepted tokens per step

def test_the_later_metrics_scrape_minus_the_earlier_is_a_window():
    o = read_observed(OBS/'vllm_metrics_after.prom', before=OBS/'vllm_metrics_before.prom')
    assert definition_of(o).span == 'between scrapes' and definition_of(read_observed(OBS/'vllm_metrics_after.prom')).span == 'since start'

@pytest.fixture
def case():
    "The vLLM log's deployment, and an expectation written from its own counts (the pair accepting what the deployment does)."
    o = read_observed(OBS/'vllm_server.log')
    pp, L = o.per_position, o.accept_length
    ci = [(p - 0.03, p + 0.03) for p in pp]
    e = Expected(list(pp), dict(prompts=ci, cycles=ci), L, dict(prompts=(L - 0.05, L + 0.05), cycles=(L - 0.05, L + 0.05)), 600, 10,
                 dict(speculative_num_steps=len(pp), speculative_eagle_topk=1))
    return o, e

def test_the_read_output_is_as_expected(case):
    o, e = case
    assert compare_observed(o, e).verdict == 'as expected'

def test_a_mean_without_the_bonus_read_as_an_accept_length(case):
    "accepted / drafts (bonus excluded) typed as an accept length: a false 'below expectation'; said as such, converted: as expected."
    o, e = case
    per_step = o.accepted / o.drafts
    wrong = reported(Definition(True, None, 'as given', 'accepted tokens per step, read as an accept length'), o.drafts, accept_length=per_step)
    right = reported(Definition(False, None, 'as given', 'accepted tokens per step'), o.drafts, accept_length=per_step)
    assert compare_observed(wrong, e).verdict == 'below expectation'
    assert compare_observed(right, e).verdict == 'as expected' and abs(right.accept_length - o.accept_length) < 0.01

def test_per_position_rates_in_the_other_definition(case):
    "Rates of all steps multiplied out as if conditional: a false 'below' from position 2; conditional rates said as such: as expected."
    o, e = case
    pp = o.per_position
    wrong = reported(Definition(None, 'conditional', 'as given', 'per-position rates, taken as conditional'), o.drafts, per_position=pp)
    cmp = compare_observed(wrong, e)
    assert cmp.verdict == 'below expectation' and cmp.first_divergence == 2
    cond = [pp[0]] + [b / a for a, b in zip(pp, pp[1:])]   # each of the steps that reached the position before
    right = reported(Definition(None, 'conditional', 'as given', 'per-position rates given the previous position'), o.drafts, per_position=cond)
    assert compare_observed(right, e).verdict == 'as expected'
    unc = reported(Definition(None, 'unconditional', 'as given', 'per-position rates of all steps'), o.drafts, per_position=pp)
    assert compare_observed(unc, e).verdict == 'as expected'
