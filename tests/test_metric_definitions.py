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

# ------------------------------------------------------------------------------------------------------------------
# the same pair on two releases of one engine
import torch
from dataclasses import replace
from eagle3_workbench.engines import Engine, version_tuple
from eagle3_workbench.engine_rows import SGLANG, VLLM, ENGINE_FACTS
from eagle3_workbench.outputs import observed_from_requests
from eagle3_workbench.metrics import release_change, rows_between

def _runs(seed=0, n=30, steps=16):
    g = torch.Generator().manual_seed(seed)
    return [[float(1 + a) for a in torch.binomial(torch.full((steps,), 3.0), torch.full((steps,), 0.5), generator=g).tolist()] for _ in range(n)]

def _obs(groups, version, engine=SGLANG):
    reqs = [dict(drafts=len(gr), accepted=sum(gr) - len(gr), group=gr, hist=None) for gr in groups]
    return observed_from_requests(Engine.named(engine), f'{engine} {version}', reqs, settings=dict(version=version))

def test_a_release_that_costs_acceptance_is_named_with_the_rows_between():
    "One request in two lost a token on half its verify steps after the upgrade: regressed, paired, the change the pooled difference."
    before = _runs()
    after = [[max(1.0, v - (j % 2)) for j, v in enumerate(gr)] if i % 2 else gr for i, gr in enumerate(before)]
    r = release_change(_obs(before, '0.5.12'), _obs(after, '0.5.22'), 'llama')
    pooled = lambda gs: sum(map(sum, gs)) / sum(map(len, gs))
    assert r.paired and r.verdict == 'regressed' and abs(r.change[0] - (pooled(after) - pooled(before))) < 1e-9
    f, = r.findings()
    assert f.code == 'RELEASE_REGRESSION' and 'SGLang 0.5.22 than on SGLang 0.5.12' in f.message
    want = {(x.since, x.source) for x in ENGINE_FACTS if x.engine == SGLANG and x.family in ('any', 'llama') and (0, 5, 12) < version_tuple(x.since) <= (0, 5, 22)}
    assert want and want <= {(row[0], row[3]) for row in r.rows}   # the llama.py capture change of 0.5.22 among them

def test_the_same_outputs_on_two_releases_show_no_change():
    runs = _runs(1)
    r = release_change(_obs(runs, '0.5.12'), _obs(runs, '0.5.17'))
    assert (r.verdict, r.change[0], r.findings()) == ('no change shown', 0.0, [])

def test_other_requests_are_compared_unpaired():
    r = release_change(_obs(_runs(2), '0.5.12'), _obs(_runs(3, n=25), '0.5.17'))
    assert not r.paired and r.verdict == 'no change shown'   # the same sampling law on both sides

def test_release_change_needs_releases_of_one_engine():
    with pytest.raises(ValueError, match='are different engines'): release_change(_obs(_runs(), '0.5.12'), _obs(_runs(), '0.32.0', VLLM))
    with pytest.raises(ValueError, match='no engine release'): release_change(replace(_obs(_runs(), '0.5.12'), release=None, settings={}), _obs(_runs(), '0.5.17'))
    assert rows_between(SGLANG, '0.5.17', '0.5.17') == []
