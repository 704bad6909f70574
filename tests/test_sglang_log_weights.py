"""An SGLang server log's accept length is the engine's own ratio: each decode line is accepted tokens over the batch sizes
summed over its interval (SGLang 0.5.23 srt/managers/scheduler_components/metrics_reporter.py:543-555, 934, 947, 973), so
lines weigh by their `#running-req`. Planted: a run whose batch thins from 8 requests to its 2 slowest (the requests that
accept most finish first), read back as SGLang prints it: the weighted mean is the requests' own, the plain mean of lines
is not, and the thinning is no drift; a true drift (acceptance falling at a constant 8 requests over an hour) still is."""
import re
from datetime import datetime, timedelta
from pathlib import Path
import pytest, torch
from eagle3_workbench.outputs import read_observed, acceptance_trend
from eagle3_workbench.sglang.log import read_server_log, weighted_accept_len
from eagle3_workbench.observed import Expected, compare_observed

HEAD = ("[{t}] server_args=ServerArgs(model_path='/m/tiny-llama', speculative_algorithm='EAGLE3', speculative_num_steps=3, "
        "speculative_eagle_topk=1, speculative_num_draft_tokens=4, decode_log_interval={d}, tp_size=1, pp_size=1)")
LINE = ("[{t}] Decode batch, #running-req: {n}, #token: 600, token usage: 0.00, accept len: {a:.2f}, accept rate: 0.50, "
        "cpu graph: False, gen throughput (token/s): 1.50, #queue-req: 0")

def write_log(intervals, every=10.0, d=40)->str:
    "SGLang's log of a run: per interval, the accept lengths of the requests running then (each of them runs all `d` forwards"
    " of it, so the line's ratio of sums is their plain mean), one decode line `every` seconds."
    t0, out = datetime(2026, 12, 8, 0, 40, 0), []
    stamp = lambda i: (t0 + timedelta(seconds=every * i)).strftime('%Y-%m-%d %H:%M:%S')
    out.append(HEAD.format(t=stamp(0), d=d))
    for i, per_req in enumerate(intervals, 1):
        out.append(LINE.format(t=stamp(i), n=len(per_req), a=sum(per_req) / len(per_req)))   # accepted / (d x running), as metrics_reporter.py:973
    return '\n'.join(out) + '\n'

def thinning_run(seed=0):
    "8 requests: 4 accepting 2.6 (done after 3 intervals), 2 accepting 2.2 (6), 2 accepting 1.4 (14); noise 0.05 per request and interval."
    g = torch.Generator().manual_seed(seed)
    reqs = [(2.6, 3)] * 4 + [(2.2, 6)] * 2 + [(1.4, 14)] * 2
    return [[a + 0.05 * float(torch.randn(1, generator=g)) for a, k in reqs if k > j] for j in range(14)]

def test_the_logs_accept_length_weighs_lines_by_their_requests():
    run = thinning_run()
    text = write_log(run)
    rows = [r for r in read_server_log(text) if r['accept_len'] is not None]
    assert [r['running_req'] for r in rows] == [8] * 3 + [4] * 3 + [2] * 8
    printed = [r['accept_len'] for r in rows]
    weighted = sum(len(per) * a for per, a in zip(run, printed)) / sum(map(len, run))   # sum of running x accept len / sum of running
    plain = sum(printed) / len(printed)
    steps = [a for per in run for a in per]   # every request's every interval: what the requests' own counts average
    o = read_observed(text)
    assert o.accept_length == pytest.approx(weighted, abs=1e-9) == weighted_accept_len(rows)
    assert abs(o.accept_length - sum(steps) / len(steps)) < 0.005   # the lines print two decimals
    assert plain < o.accept_length - 0.15   # planted: the plain mean of the lines is pulled down by the 8 lines of 2 slow requests
    assert any('weighted by #running-req' in n for n in o.notes)

def test_a_batch_thinning_to_its_slowest_requests_is_no_drift():
    o = read_observed(write_log(thinning_run()))
    t = acceptance_trend(o)
    assert t.verdict == 'no drift', t.summary()
    # the same lines read as if every line weighed the same and stood alone: the fall would be called a drift
    flat = acceptance_trend(type(o)(o.engine, o.source, timeline=[dict(r, weight=1.0, batch=None) for r in o.timeline]))
    assert flat.verdict == 'drifting down' and flat.slope_per_hour < -10, flat.summary()

def test_acceptance_falling_at_constant_requests_is_still_a_drift():
    "Sixty lines over an hour, 8 requests running throughout, accept length falling 0.5 an hour: the drift is found and its interval holds it."
    g = torch.Generator().manual_seed(3)
    run = [[3.0 - 0.5 * (60 * i / 3600) + 0.05 * float(torch.randn(1, generator=g)) for _ in range(8)] for i in range(60)]
    t = acceptance_trend(read_observed(write_log(run, every=60)))
    assert t.verdict == 'drifting down' and t.slope_ci[0] <= -0.5 <= t.slope_ci[1], t.summary()
    steady = acceptance_trend(read_observed(write_log([[3.0 + 0.05 * float(torch.randn(1, generator=g)) for _ in range(8)] for _ in range(60)], every=60)))
    assert steady.verdict == 'no drift'

def _expected(accept_length:float)->Expected:
    "What the pair accepts in-process, written out: a chain of 3 whose accept length is `accept_length`, over 400 verify steps."
    per = [min(1.0, (accept_length - 1) / 3 * f) for f in (1.5, 1.0, 0.5)]
    band = lambda v: (v - 0.03, v + 0.03)
    return Expected(per_position=per, per_position_ci=dict(prompts=[band(p) for p in per], cycles=[band(p) for p in per]),
                    accept_length=accept_length, accept_length_ci=dict(prompts=band(accept_length), cycles=band(accept_length)),
                    cycles=400, prompts=8, settings=dict(speculative_num_steps=3, temperature=0.0))

def test_compare_reads_the_weighted_length_and_names_no_drift():
    "The run that accepts what the pair does in-process: compared as weighted, as expected and no ACCEPT_DRIFT; the plain mean of the lines would have been 0.2 short."
    run = thinning_run()
    steps, text = [a for per in run for a in per], write_log(run)
    exp = _expected(sum(steps) / len(steps))
    cmp = compare_observed(read_observed(text), exp)
    codes = [f.code for f in cmp.findings()]
    assert 'ACCEPT_DRIFT' not in codes and cmp.trend.verdict == 'no drift', cmp.trend.summary()
    assert cmp.verdict == 'as expected', (cmp.verdict, cmp.accept_length)
    assert cmp.accept_length['observed'] == pytest.approx(sum(steps) / len(steps), abs=0.005)
    bare = compare_observed(read_observed(re.sub(r'#running-req: \d+, ', '', text)), exp)   # the same lines, weighing the same
    assert bare.verdict == 'below expectation' and 'ACCEPT_DRIFT' in [f.code for f in bare.findings()]   # what equal weights made of it
