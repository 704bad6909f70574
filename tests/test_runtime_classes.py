"""The runtime and precision failure classes, each planted the way the public threads describe it, each with a clean
counterpart that must stay clean: the algorithm flag, zero acceptance, drift over time and the pipeline split from what a
deployment prints (`compare`); ranks that disagree, aux states lost on a stage and the wrong tensor from a capture; a
target served in another precision than the training dump."""
import json
from datetime import datetime, timedelta
from pathlib import Path
import pytest, torch
from eagle3_workbench.engine import Session
from eagle3_workbench.loading import load_pair
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.outputs import Observed, read_observed, vllm_metrics_text, acceptance_trend
from eagle3_workbench.observed import expectation_from_runs, pair_facts, compare_observed, zero_acceptance
from eagle3_workbench.records import Record
from eagle3_workbench.dumps import read_dump
from eagle3_workbench.sglang.readers import read_capture
from eagle3_workbench.stages import pp_stage_findings, pp_layer_split
from eagle3_workbench.sglang.compare import (capture_findings, rank_findings,
                                             neighbour_tensors, wrong_tensor_from_capture, match_features, fc_in_samples)
from eagle3_workbench.cli import main, EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT

STEPS, N, PROMPTS = 4, 24, 8

@pytest.fixture(scope='module')
def pair(): return load_pair('zoo:tiny-dsv3')

@pytest.fixture(scope='module')
def runs(pair):
    "The zoo pair, unfaulted, on the first prompts: what a correct deployment runs."
    s = Session(pair, speculative_num_steps=STEPS)
    return [s.run(N, prompt=p) for p in read_prompts(n=PROMPTS)]

@pytest.fixture(scope='module')
def expected(pair, runs):
    return expectation_from_runs(runs, dict(speculative_num_steps=STEPS, speculative_eagle_topk=1, speculative_num_draft_tokens=STEPS + 1,
                                            temperature=0.0), resid_layers=[2, 6, 9], max_new_tokens=N, facts=pair_facts(pair))

def server_info(avg, algorithm='EAGLE3', **args)->str:
    return json.dumps({**dict(model_path='zoo:tiny-dsv3', speculative_algorithm=algorithm, speculative_num_steps=STEPS, speculative_eagle_topk=1,
                              speculative_num_draft_tokens=STEPS + 1, tp_size=1, pp_size=1, dp_size=1, disable_cuda_graph=False,
                              internal_states=[dict(avg_spec_accept_length=avg)]), **args})

def compare_command(path, *args, json_out=False):
    "`eagle3-workbench compare --observed PATH ...` in-process: (stdout, or stderr for an error; exit code)."
    import io, contextlib
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(['compare', '--observed', str(path), *map(str, args), *(['--json'] if json_out else [])])
    return (out.getvalue() or err.getvalue()).strip(), code

def codes(findings): return [f['code'] if isinstance(f, dict) else f.code for f in findings]

# ---- compare: the algorithm flag (sgl-project/sglang#21272) and zero acceptance ----

def test_server_info_with_eagle_for_an_eagle3_draft_names_the_skipped_fc(runs, tmp_path):
    "The issue's case, end to end: `compare` on an SGLang server info saying EAGLE, accept length 1.00, exits 1 naming the skipped fc first."
    f = tmp_path/'server_info.json'; f.write_text(server_info(1.0, 'EAGLE'))
    out, code = compare_command(f, '--n-prompts', PROMPTS, '--max-new-tokens', N, json_out=True)
    j = json.loads(out)
    assert code == EXIT_CHECK_FAILED, out
    assert j['causes'][0]['code'] == 'FC_SKIPPED' and j['causes'][0]['status'] == 'shown'
    assert {'FC_SKIPPED', 'ACCEPT_ZERO', 'DEPLOYMENT_BELOW_EXPECTATION'} <= set(codes(j['findings']))
    assert j['zero_acceptance']['causes'][0]['code'] == 'FC_SKIPPED'
    text, _ = compare_command(f, '--n-prompts', PROMPTS, '--max-new-tokens', N)
    assert 'fc skipped' in text and 'FC_SKIPPED' in text

def test_server_info_with_eagle3_and_the_pairs_own_average_is_clean(runs, tmp_path):
    lengths = [float(r.verify.accept_length) for run in runs for r in run]
    f = tmp_path/'server_info.json'; f.write_text(server_info(sum(lengths) / len(lengths)))
    out, code = compare_command(f, '--n-prompts', PROMPTS, '--max-new-tokens', N, json_out=True)
    j = json.loads(out)
    assert code == EXIT_OK and j['verdict'] == 'as expected' and j['findings'] == [] and j['zero_acceptance'] is None, out

def test_zero_acceptance_from_counts_ranks_what_the_evidence_leaves(expected):
    "vLLM counters with nothing accepted: the interval bounds acceptance by the Wilson formula; nothing states the algorithm, so the "
    "flag stays open; the checkpoint's own head and map accept in-process, so they are ruled out."
    drafts = 300
    obs = read_observed(vllm_metrics_text(Observed(None, 't', drafts=drafts, draft_tokens=drafts * STEPS, accepted=0, accepted_per_pos=[0] * STEPS)))
    cmp = compare_observed(obs, expected)
    z = cmp.zero
    assert z['counted'] == drafts and z['acceptance_upper'] == pytest.approx(1.96 ** 2 / (drafts + 1.96 ** 2), rel=1e-3)   # Wilson, k = 0
    assert [(c['code'], c['status']) for c in cmp.to_json()['zero_acceptance']['causes']] == [
        ('FC_SKIPPED', 'open'), ('AUX_LAYERS_MISMATCH', 'open'), (None, 'ruled out'), ('VOCAB_MAP_MISSING', 'ruled out')]
    assert 'ACCEPT_ZERO' in codes(cmp.findings()) and cmp.first_divergence == 1

def test_near_zero_is_not_zero(expected):
    obs = read_observed(vllm_metrics_text(Observed(None, 't', drafts=300, draft_tokens=1200, accepted=4, accepted_per_pos=[4, 0, 0, 0])))
    cmp = compare_observed(obs, expected)
    assert cmp.verdict == 'below expectation' and cmp.zero is None and 'ACCEPT_ZERO' not in codes(cmp.findings())

def test_a_missing_head_leads_the_zero_list_when_the_checkpoint_shows_it(expected):
    from dataclasses import replace
    e = replace(expected, facts=dict(expected.facts, lm_head='target', draft_vocab_given=True))
    z = zero_acceptance(read_observed(server_info(1.0)), e)   # EAGLE3: the flag is ruled out
    assert [(c.code, c.status) for c in z['causes']][:2] == [(None, 'shown'), ('AUX_LAYERS_MISMATCH', 'open')]
    assert next(c.status for c in z['causes'] if c.code == 'FC_SKIPPED') == 'ruled out'

# ---- compare: drift over time (vllm-project/vllm#41838) ----

def vllm_log(accepted_per_line, drafts=100, k=STEPS, every=120, restart_at=None)->str:
    "A vLLM server log: the banner and arguments, then one SpecDecoding line per value, `every` seconds apart."
    t0 = datetime(2026, 11, 30, 10, 0, 0)
    stamp = lambda i: (t0 + timedelta(seconds=every * i)).strftime('%m-%d %H:%M:%S')
    head = lambda i: [f"(APIServer pid=1) INFO {stamp(i)} [api_server.py:1885] vLLM API server version 0.11.0",
                      f"(APIServer pid=1) INFO {stamp(i)} [utils.py:328] non-default args: {{'model': '/m', 'speculative_config': "
                      f"{{'method': 'eagle3', 'num_speculative_tokens': {k}}}, 'pipeline_parallel_size': 1}}"]
    lines = head(0)
    for i, a in enumerate(accepted_per_line, 1):
        if i - 1 == restart_at: lines += head(i)
        per = [min(1.0, a / drafts / k * (k - j) * 2 / (k + 1)) for j in range(k)]   # rates that sum to a / drafts
        lines.append(f"(APIServer pid=1) INFO {stamp(i)} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: {1 + a / drafts:.2f}, "
                     f"Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 tokens/s, Accepted: {a} tokens, Drafted: {drafts * k} tokens, "
                     f"Per-position acceptance rate: {', '.join(f'{r:.3f}' for r in per)}, Avg Draft acceptance rate: 40.0%")
    return '\n'.join(lines) + '\n'

def planted_drift(seed):
    "Accepted tokens per line fall by 6 a line (100 verify steps a line, a line every 2 minutes: -0.06 x 30 = -1.8 accept length per "
    "hour), a restart after 24 lines brings them back; noise of 4 tokens a line."
    noise = (torch.randn(48, generator=torch.Generator().manual_seed(seed)) * 4).round().long().tolist()
    return acceptance_trend(read_observed(vllm_log([200 - 6 * (i % 24) + e for i, e in enumerate(noise)], restart_at=24)))

def test_drift_down_within_lifetimes_is_named_and_its_interval_covers_the_planted_slope():
    t = planted_drift(7)
    assert t.verdict == 'drifting down' and t.lifetimes == 2 and t.lines == 48 and t.slope_ci[1] < 0
    assert abs(t.resets[0] - 0.06 * 21) < 0.1   # lines 0-2 (index 1 on average) against lines 21-23 (index 22): 0.06 x 21
    # a 95% interval: over 40 noise draws it must hold the planted slope about 38 times (34 or fewer: p < 0.01)
    assert sum(t.slope_ci[0] <= -1.8 <= t.slope_ci[1] for t in map(planted_drift, range(40))) >= 35

def test_steady_log_shows_no_drift_and_a_short_one_is_not_enough():
    noise = (torch.randn(48, generator=torch.Generator().manual_seed(7)) * 4).round().long().tolist()
    steady = acceptance_trend(read_observed(vllm_log([170 + e for e in noise])))
    assert steady.verdict == 'no drift' and steady.slope_ci[0] <= 0 <= steady.slope_ci[1]
    assert acceptance_trend(read_observed(vllm_log([170, 160, 150]))).verdict == 'not enough evidence'

def test_drift_leads_the_causes_and_is_a_finding(expected):
    falling = [int((expected.accept_length - 1) * 100) - 8 * (i % 24) for i in range(48)]
    cmp = compare_observed(read_observed(vllm_log(falling, restart_at=24)), expected)
    assert 'ACCEPT_DRIFT' in codes(cmp.findings()) and cmp.trend.verdict == 'drifting down' and cmp.verdict == 'below expectation'
    assert (cmp.causes[0].code, cmp.causes[0].status) == ('ACCEPT_DRIFT', 'shown')   # the log states eagle3 and pp 1: nothing else is shown

# ---- the pipeline split (sgl-project/sglang#39644, vllm-project/vllm#45985) ----

def test_pipeline_split_loses_layers_on_earlier_stages():
    "61 layers on 4 stages: 15, 15, 15, 16 (SGLang's even split, the extra layer last); SpecForge's ids [1, 29, 57] read +1 are "
    "resid[2, 30, 58]: 2 is on stage 0, 30 on stage 2, only 58 on the last."
    assert pp_layer_split(61, 4) == [(0, 15), (15, 30), (30, 45), (45, 61)]
    f = pp_stage_findings([2, 30, 58], pp_layer_split(61, 4))
    assert [x.code for x in f] == ['AUX_PP_STAGE_DROPPED'] and f[0].evidence['lost'] == [2, 30] and f[0].evidence['stages'] == {2: 0, 30: 2}
    assert pp_stage_findings([2, 30, 58], pp_layer_split(61, 1)) == [] and pp_stage_findings([46, 50, 58], pp_layer_split(61, 4)) == []

def test_pipeline_from_server_settings_and_from_a_vllm_log(expected):
    staged = compare_observed(read_observed(server_info(1.4, pp_size=2)), expected)
    assert staged.causes[0].code == 'AUX_PP_STAGE_DROPPED' and 'AUX_PP_STAGE_DROPPED' in codes(staged.findings())
    flat = compare_observed(read_observed(server_info(1.4)), expected)
    assert 'AUX_PP_STAGE_DROPPED' not in codes(flat.findings())
    log = vllm_log([110] * 12).replace("'pipeline_parallel_size': 1", "'pipeline_parallel_size': 2")   # 2.1 per verify step: surely below the pair's 2.9
    assert read_observed(log).settings['pp_size'] == 2
    vcmp = compare_observed(read_observed(log), expected)   # vLLM does not drop them: it relays them, or (deepseek_v2.py) refuses to start
    assert 'AUX_PP_STAGE_DROPPED' not in codes(vcmp.findings())
    why = next(c for c in vcmp.causes if c.code == 'AUX_PP_STAGE_DROPPED')
    assert why.status == 'open' and 'does not support eagle3 with pipeline parallelism' in why.evidence, why

def test_bad_pp_size_in_an_output_is_one_line_exit_2(tmp_path):
    f = tmp_path/'server_info.json'; f.write_text(server_info(1.4, pp_size='two'))
    out, code = compare_command(f, '--n-prompts', 2, '--max-new-tokens', 4)
    assert code == EXIT_BAD_INPUT and str(f) in out and 'pp_size' in out and '\n' not in out, out

# ---- a capture: ranks that disagree, stages, the wrong tensor ----

def write_dump(base, tp, pp, layers, scale=1.0, seed=0):
    "One process folder of SGLang's debug tensor dump: the input norms of `layers` ([normed, resid]) of one prefill pass."
    torch.manual_seed(seed)
    d = Path(base)/f'TP{tp}_PP{pp}_Rank{pp + tp}_pid{100 + tp + 10 * pp}'; d.mkdir(parents=True)   # one of tp, pp is 0 here
    data = {f'model.layers.{i}.input_layernorm': [torch.randn(5, 8), torch.randn(5, 8) * (scale if i == layers[-1] else 1)] for i in layers}
    data.update({'model.forward_batch_info.positions': torch.arange(5), 'model.forward_batch_info.input_ids': torch.arange(5) + 3,
                 'model.forward_batch_info.seq_lens': torch.tensor([5])})
    torch.save(data, d/'Pass00000.pt')

def test_tensor_parallel_ranks_that_captured_other_states(tmp_path):
    "Rank 1's last layer is 1.5 times rank 0's: the largest element difference is 0.5 of rank 0's largest element."
    write_dump(tmp_path, 0, 0, [1, 2]); write_dump(tmp_path, 1, 0, [1, 2], scale=1.5)
    f = rank_findings(read_capture(tmp_path))
    assert [x.code for x in f] == ['AUX_RANK_DIVERGENCE'] and f[0].evidence['ranks'] == [1] and f[0].evidence['points'] == ['target.resid[2]']
    assert f[0].evidence['max_relative_difference'] == pytest.approx(0.5, rel=1e-5)

def test_agreeing_ranks_and_separate_stages_stay_clean(tmp_path):
    write_dump(tmp_path/'tp', 0, 0, [1, 2]); write_dump(tmp_path/'tp', 1, 0, [1, 2])
    assert rank_findings(read_capture(tmp_path/'tp')) == []
    write_dump(tmp_path/'pp', 0, 0, [0, 1, 2]); write_dump(tmp_path/'pp', 0, 1, [3, 4, 5], seed=1)
    cap = read_capture(tmp_path/'pp')
    assert cap.agree and rank_findings(cap) == []
    assert codes(capture_findings(cap, (2, 4, 5), 6)) == ['AUX_PP_STAGE_DROPPED'] and capture_findings(cap, (3, 4, 5), 6) == []

@pytest.fixture(scope='module')
def neighbours(pair):
    ids = pair.tokenizer(read_prompts(n=1)[0], add_special_tokens=False)['input_ids']
    return ids, neighbour_tensors(pair.target, ids)

def fc_record(t): return Record('draft.fc.in', 'draft_extend', 0, None, None, tuple(t.shape), 'float32', {}, tensor=t)

def test_wrong_tensor_from_the_neighbours_a_capture_holds(neighbours):
    "A capture that fed layer 5's MLP output where resid[6] belongs and holds that tensor (as the dump's down_proj) names it "
    "without a target; the chunk's own match is exact."
    ids, nb = neighbours
    fed = torch.cat([nb['resid[2]'], nb['mlp[5]'], nb['resid[9]']], -1)
    held = [Record(p, 'extend', 0, None, ids, tuple(t.shape), 'float32', {}, tensor=t)
            for p, t in (('target.resid[2]', nb['resid[2]']), ('target.resid[6]', nb['resid[6]']), ('target.resid[9]', nb['resid[9]']),
                         ('module:target:model.layers.5.mlp.down_proj', nb['mlp[5]']))]
    rows, fs, src = wrong_tensor_from_capture([fc_record(fed)] + held)
    assert src == 'the capture' and codes(fs) == ['AUX_WRONG_TENSOR']
    assert [(r['verdict'], r['best_neighbour']) for r in rows][1] == ('wrong tensor', 'mlp[5]') and rows[1]['neighbour_error'] < 1e-6

def test_wrong_tensor_recomputed_and_the_clean_wiring(pair, neighbours):
    ids, nb = neighbours
    prefill = Record('target.resid[2]', 'extend', 0, None, ids, tuple(nb['resid[2]'].shape), 'float32', {}, tensor=nb['resid[2]'])
    fed = torch.cat([nb['norm_in[2]'], nb['resid[6]'], nb['final_norm']], -1)   # the input norm's output, and hidden_states[N]
    rows, fs, src = wrong_tensor_from_capture([fc_record(fed), prefill], target=pair.target)
    assert codes(fs) == ['AUX_WRONG_TENSOR'] and [c['best_neighbour'] for c in fs[0].evidence['chunks']] == ['norm_in[2]', 'final_norm']
    clean = torch.cat([nb[f'resid[{k}]'] for k in (2, 6, 9)], -1)
    rows, fs, _ = wrong_tensor_from_capture([fc_record(clean), prefill], target=pair.target)
    assert fs == [] and [r['verdict'] for r in rows] == ['resid'] * 3

# ---- precision: the fc input against the training dump ----

def resid_features(model, tokenizer, prompts, layers=(2, 6, 9)):
    from eagle3_workbench.capture import Capture
    out = []
    for p in prompts:
        i = tokenizer(p, add_special_tokens=False)['input_ids']
        with torch.no_grad(), Capture(model, points=[f'target.resid[{",".join(map(str, layers))}]'], mode='full') as cap: model(torch.tensor([i]))
        out.append((i, torch.cat([r.tensor.reshape(len(i), -1) for r in cap.records], -1)))
    return out

def specforge_dump(folder, feats, dtype=torch.bfloat16):
    rows = Path(folder)/'rows_0-2000'; rows.mkdir(parents=True)
    for n, (i, a) in enumerate(feats):
        torch.save(dict(input_ids=torch.tensor(i), loss_mask=torch.ones(len(i)), aux_hidden_state=a[None].to(dtype)), rows/f'data_{n}.ckpt')
    samples, problems = read_dump(folder)
    assert not problems
    return samples

@pytest.fixture(scope='module')
def precision(pair, tmp_path_factory):
    import copy
    ps = read_prompts(n=6)
    fp8w = copy.deepcopy(pair.target)
    with torch.no_grad():
        for name, w in fp8w.named_parameters():
            if w.dim() == 2 and 'embed' not in name: w.copy_(w.to(torch.float8_e4m3fn).float())
    dump = specforge_dump(tmp_path_factory.mktemp('dump'), resid_features(pair.target, pair.tokenizer, ps))
    served = {name: [fc_record(a) for _, a in resid_features(m, pair.tokenizer, ps)] for name, m in (('fp8', fp8w), ('fp32', pair.target))}
    return dump, served, [i for i, _ in resid_features(pair.target, pair.tokenizer, ps)]

def test_fp8_weights_against_a_bf16_dump_are_named_with_the_ratio_and_interval(precision):
    dump, served, ids = precision
    samples = [s for r, i in zip(served['fp8'], ids) for s in fc_in_samples([r], ids=i)]
    m = match_features(dump, samples, settings=dict(quantization='fp8'))
    assert m.dtypes == ('bfloat16', 'float32') and m.tol == pytest.approx(2 * 2 ** -8) and m.samples == 6
    assert codes(m.findings) == ['TARGET_PRECISION_MISMATCH']
    # the norm ratio, written out: served / dump per token, pooled over every token of chunk 0
    x = torch.cat([d['aux'][:, :128] for d in dump]); y = torch.cat([s['aux'][:, :128] for s in samples])
    ratio = float((y.norm(dim=-1) / x.norm(dim=-1)).mean())
    row = m.rows[0]
    assert row['norm_ratio'] == pytest.approx(ratio, rel=1e-6) and row['norm_ratio_ci'][0] <= ratio <= row['norm_ratio_ci'][1]
    assert row['rel_error_ci'][0] > m.tol and 'quantization fp8' in m.findings[0].message

def test_the_same_target_in_float32_against_the_bf16_dump_stays_clean(precision):
    dump, served, ids = precision
    samples = [s for r, i in zip(served['fp32'], ids) for s in fc_in_samples([r], ids=i)]
    m = match_features(dump, samples)
    assert m.findings == [] and {r['verdict'] for r in m.rows} == {'same'}

# ---- positions: acceptance by context length against the draft's max_position_embeddings ----

def sgl_response(prompt_tokens, accepted, steps=20, k=4):
    "One SGLang /generate response whose meta_info counts `accepted` draft tokens over `steps` verify steps."
    return dict(meta_info=dict(prompt_tokens=prompt_tokens, completion_tokens=steps + accepted, spec_verify_ct=steps,
                               spec_accept_token_num=accepted, spec_draft_token_num=steps * k))

def test_acceptance_falling_beyond_the_drafts_positions_is_named(expected):
    "Requests that ran past the draft's 2,048 positions accept far less than the short ones: DRAFT_POSITIONS_SHORT with the "
    "difference and an interval that excludes 0; the same requests without the drop, or with too few long ones, stay clean."
    from dataclasses import replace
    exp = replace(expected, facts={**expected.facts, 'draft_positions': 2048})
    short = [(300 + 40 * i, 38 + i % 5) for i in range(12)]   # about 2.9 tokens per step
    long = [(2600 + 90 * i, 5 + i % 3) for i in range(10)]     # about 1.3
    obs = lambda rows: read_observed(json.dumps([sgl_response(p, a) for p, a in rows]))
    cmp = compare_observed(obs(short + long), exp)
    f, = [f for f in cmp.findings() if f.code == 'DRAFT_POSITIONS_SHORT']
    within = sum(a for _, a in short) / (20 * 12) + 1; beyond = sum(a for _, a in long) / (20 * 10) + 1   # pooled per verify step
    assert abs(f.evidence['within_accept'] - within) < 1e-3 and abs(f.evidence['beyond_accept'] - beyond) < 1e-3
    assert f.evidence['ci'][1] < 0 < f.evidence['ci'][1] - f.evidence['ci'][0] and '2048' in f.message and 'by context' in str(cmp)
    for clean in (short + [(p, a + 33) for p, a in long], short + long[:3]):
        assert 'DRAFT_POSITIONS_SHORT' not in {f.code for f in compare_observed(obs(clean), exp).findings()}
