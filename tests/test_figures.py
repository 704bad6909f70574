"Figures draw the numbers in the records: trace and artist data checked against values computed here, independently."
import math
from collections import Counter
import matplotlib
matplotlib.use('Agg')
import numpy as np
import pytest, torch
from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.records import Record, tensor_stats
from eagle3_workbench.capture import Capture
from eagle3_workbench.engine import ExtendResult, DraftResult, VerifyResult, StepResult, Session, summarize
from eagle3_workbench.figures import (COLORS, pipeline_figure, presence_figure, presence_table, expected_presence,
    distribution_figure, layer_profile_figure, setup_offline_plotly, to_html)
from eagle3_workbench.result_figures import (acceptance_figure, token_strip, token_strip_html, similarity_figure,
    sweep_figure)

H = 8   # target hidden size of the synthetic records

def rec(point, phase, t, cycle=0, positions=None, full=True):
    "A Record as Capture makes it, optionally without its tensor (stats mode)."
    pos = list(range(t.shape[-2])) if positions is None else positions
    return Record(point, phase, cycle, pos, [0] * len(pos), tuple(t.shape), 'float32', tensor_stats(t), t.clone() if full else None)

def norms(t): return torch.linalg.vector_norm(t.reshape(-1, t.shape[-1]).double(), dim=-1).tolist()

def traces(fig): return {t.get('name'): t for t in fig.to_dict()['data']}

def lines(ax): return {l.get_label(): l for l in ax.get_lines()}

@pytest.fixture
def pipe():
    "Synthetic extend + draft_extend records: resid[0..4], fc.in = cat(resid[1], resid[2], resid[3]), draft stages."
    g = torch.Generator().manual_seed(0)
    T = 5
    resid = {k: torch.randn(1, T, H, generator=g) * (k + 1) for k in range(5)}
    recs = [rec(f'target.resid[{k}]', 'extend', resid[k]) for k in range(5)]
    recs.append(rec('draft.fc.in', 'draft_extend', torch.cat([resid[1], resid[2], resid[3]], -1)))
    for p in ('draft.fc.out', 'draft.hidden_norm', 'draft.input_layernorm', 'draft.attn', 'draft.hidden', 'draft.logits'):
        recs.append(rec(p, 'draft_extend', torch.randn(1, T, H, generator=g)))
    return recs, resid

# --- pipeline ---------------------------------------------------------------------------------------------------

def test_pipeline_plotly_traces_are_the_records_norms(pipe):
    recs, resid = pipe
    fig = pipeline_figure(recs, wiring=(1, 2, 3))
    tr = traces(fig)
    order = [n for n, t in tr.items() if t['type'] == 'scatter']
    assert order == ['target.resid[1]', 'target.resid[2]', 'target.resid[3]', 'draft.fc.in[0]', 'draft.fc.in[1]', 'draft.fc.in[2]',
                     'draft.fc.out', 'draft.hidden_norm', 'draft.input_layernorm', 'draft.attn', 'draft.hidden', 'draft.logits']
    for k in (1, 2, 3): np.testing.assert_allclose(tr[f'target.resid[{k}]']['y'], norms(resid[k]), rtol=1e-6)
    for i, k in enumerate((1, 2, 3)): np.testing.assert_allclose(tr[f'draft.fc.in[{i}]']['y'], norms(resid[k]), rtol=1e-6)
    logits = next(r for r in recs if r.point == 'draft.logits')
    np.testing.assert_allclose(tr['draft.logits']['y'], norms(logits.tensor), rtol=1e-6)
    assert tr['draft.logits']['x'] == list(range(5))
    table = next(t for t in fig.to_dict()['data'] if t['type'] == 'table')
    cols = dict(zip(table['header']['values'], table['cells']['values']))
    assert cols['stage'][:4] == ['target.resid[1]', 'target.resid[2]', 'target.resid[3]', 'draft.fc.in[0]']
    assert cols['norm_mean'][0] == f"{np.mean(norms(resid[1])):.4g}"
    assert cols['absmax'][2] == f"{resid[3].abs().max().item():.4g}"
    assert cols['note'][3:6] == ['= target.resid[1]', '= target.resid[2]', '= target.resid[3]']

def test_pipeline_flags_a_chunk_that_is_not_the_wired_layer(pipe):
    recs, _ = pipe
    table = next(t for t in pipeline_figure(recs, wiring=(0, 2, 3)).to_dict()['data'] if t['type'] == 'table')
    notes = dict(zip(table['cells']['values'][0], table['cells']['values'][-1]))
    assert notes['draft.fc.in[0]'] == '= target.resid[1]; NOT the wired target.resid[0]'
    assert notes['draft.fc.in[1]'] == '= target.resid[2]'

def test_pipeline_stats_mode_training_reference_and_uncaptured_layer(pipe):
    recs, resid = pipe
    stats = [Record.from_dict(r.to_dict()) for r in recs]      # as read back from JSON: no tensors
    fig = pipeline_figure(stats, wiring=(1, 2, 9), training={'draft.hidden': 3.5, 'draft.fc.in': 7.0})
    tr = traces(fig)
    assert 'draft.fc.in' in tr and 'draft.fc.in[0]' not in tr
    np.testing.assert_allclose(tr['draft.fc.in']['y'], norms(torch.cat([resid[1], resid[2], resid[3]], -1)), rtol=1e-6)
    assert tr['draft.hidden (training)']['y'] == [3.5, 3.5] and tr['draft.hidden (training)']['line']['dash'] == 'dash'
    assert tr['draft.fc.in (training)']['x'] == [0, 4]
    table = next(t for t in fig.to_dict()['data'] if t['type'] == 'table')
    cols = dict(zip(table['header']['values'], table['cells']['values']))
    i = cols['stage'].index('target.resid[9]')
    assert cols['note'][i] == 'not captured' and table['cells']['fill']['color'][0][i] != 'white'
    assert 'training' in cols and cols['training'][cols['stage'].index('draft.hidden')] == '3.5'

def test_pipeline_matplotlib_lines(pipe):
    recs, resid = pipe
    fig = pipeline_figure(recs, wiring=(1, 2, 3), training={'draft.attn': 2.0}, backend='matplotlib')
    ls = lines(fig.axes[0])
    np.testing.assert_allclose(ls['target.resid[2]'].get_ydata(), norms(resid[2]), rtol=1e-6)
    np.testing.assert_allclose(ls['draft.fc.in[2]'].get_ydata(), norms(resid[3]), rtol=1e-6)
    assert list(ls['draft.attn (training)'].get_ydata()) == [2.0, 2.0] and ls['draft.attn (training)'].get_linestyle() == '--'
    assert fig.axes[0].get_yscale() == 'log'

def test_pipeline_verify_pairs_with_draft_extend_after_verify_and_picks_the_cycle(pipe):
    recs, _ = pipe
    g = torch.Generator().manual_seed(1)
    more = []
    for c in (1, 2):
        more.append(rec('target.resid[1]', 'verify', torch.randn(1, 4, H, generator=g), cycle=c, positions=[5, 6, 7, 8]))
        more.append(rec('draft.hidden', 'draft_extend_after_verify', torch.randn(1, 2, H, generator=g), cycle=c, positions=[5, 6]))
    tr = traces(pipeline_figure(recs + more, phase='verify', wiring=(1,)))
    assert tr['target.resid[1]']['x'] == [5, 6, 7, 8] and tr['draft.hidden']['x'] == [5, 6]
    np.testing.assert_allclose(tr['draft.hidden']['y'], norms(more[1].tensor), rtol=1e-6)   # earliest cycle: 1
    tr = traces(pipeline_figure(recs + more, phase='verify', cycle=2, wiring=(1,)))
    np.testing.assert_allclose(tr['draft.hidden']['y'], norms(more[3].tensor), rtol=1e-6)
    with pytest.raises(ValueError, match='phases present'): pipeline_figure(recs, phase='verify')
    with pytest.raises(ValueError, match="backend"): pipeline_figure(recs, backend='bokeh')

# --- presence ---------------------------------------------------------------------------------------------------

def cycle_records(steps=3, drop=()):
    "Records of one extend + one cycle, firing where they should; (point, phase) pairs in `drop` are left out."
    t = torch.zeros(1, 2, H)
    phases = dict(target=['extend', 'verify'], fc=['draft_extend', 'draft_extend_after_verify'],
                  draft=['draft_extend'] + [f'draft[{i}]' for i in range(steps - 1)] + ['draft_extend_after_verify'])
    points = dict(target=['target.resid[2]', 'target.logits'], fc=['draft.fc.in'], draft=['draft.hidden', 'draft.logits'])
    return [rec(p, ph, t, full=False) for kind in points for p in points[kind] for ph in phases[kind] if (p, ph) not in drop]

def test_presence_counts_and_missing():
    recs = cycle_records(drop={('target.resid[2]', 'verify')})
    recs.append(rec('draft.fc.in', 'draft[1]', torch.zeros(1, 1, 3 * H), full=False))   # fc must not run in draft steps
    recs.append(rec('draft.hidden', 'draft[0]', torch.zeros(1, 1, H), full=False))      # twice in draft[0]: fine
    exp = expected_presence(['target.resid[2]', 'target.logits', 'draft.fc.in', 'draft.hidden', 'draft.logits'], 3)
    t = presence_table(recs, exp)
    assert t['phases'] == ['extend', 'draft_extend', 'draft[0]', 'draft[1]', 'verify', 'draft_extend_after_verify']
    assert t['points'] == ['target.resid[2]', 'target.logits', 'draft.fc.in', 'draft.hidden', 'draft.logits']
    n = Counter((r.point, r.phase) for r in recs)
    want = [[n[p, ph] for ph in t['phases']] for p in t['points']]
    assert t['counts'] == want and t['counts'][3][2] == 2
    assert t['missing'] == [('target.resid[2]', 'verify')] and t['unexpected'] == [('draft.fc.in', 'draft[1]')]
    fig = presence_figure(recs, exp)
    data = fig.to_dict()['data']
    assert data[0]['type'] == 'heatmap' and data[0]['z'] == want and data[0]['y'] == t['points'] and data[0]['x'] == t['phases']
    tr = traces(fig)
    assert tr['missing']['z'][0][4] == 1 and tr['missing']['colorscale'][0][1] == COLORS['missing']
    assert tr['unexpected']['z'][2][3] == 1
    cells = {(y, x): s for x, y, s in zip(data[-1]['x'], data[-1]['y'], data[-1]['text'])}
    assert cells['target.resid[2]', 'verify'] == 'MISSING' and cells['draft.fc.in', 'draft[1]'] == '1 UNEXPECTED'
    assert cells['draft.hidden', 'draft[0]'] == '2' and list(cells.values()).count('MISSING') == 1
    assert '1 missing, 1 unexpected' in fig.layout.title.text

def test_presence_expected_point_never_captured_and_matplotlib():
    recs = cycle_records()
    exp = expected_presence(['target.resid[2]', 'target.logits', 'draft.fc.in', 'draft.hidden', 'draft.logits', 'draft.attn'], 3)
    t = presence_table(recs, exp)
    assert t['missing'] == [('draft.attn', ph) for ph in ['draft_extend', 'draft[0]', 'draft[1]', 'draft_extend_after_verify']]
    fig = presence_figure(recs, exp, backend='matplotlib')
    ax = fig.axes[0]
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), np.array(t['counts']))
    assert [x.get_text() for x in ax.texts].count('MISSING') == 4
    assert sum(1 for p in ax.patches if matplotlib.colors.to_hex(p.get_facecolor()) == COLORS['missing']) == 4
    assert presence_table(recs)['status'][0][0] == 'fired'    # no expectation: no verdict

def test_expected_presence_rules():
    e = expected_presence(['target.embed', 'target.resid[0]', 'draft.fc.out', 'draft.embed', 'module:draft:fc', 'module:target:model.norm'], 4)
    steps = {'draft[0]', 'draft[1]', 'draft[2]'}
    assert e['target.resid[0]'] == e['module:target:model.norm'] == {'extend', 'verify'}
    assert e['draft.fc.out'] == e['module:draft:fc'] == {'draft_extend', 'draft_extend_after_verify'}
    assert e['draft.embed'] == {'draft_extend', 'draft_extend_after_verify'} | steps
    assert e['target.embed'] == {'extend', 'verify', 'draft_extend', 'draft_extend_after_verify'} | steps
    assert expected_presence(['draft.hidden'], 1, verify=False) == {'draft.hidden': {'draft_extend'}}
    with pytest.raises(ValueError): expected_presence(['fc.in'], 3)

# --- distributions ------------------------------------------------------------------------------------------------

def test_distribution_values_and_chunks(pipe):
    recs, resid = pipe
    fig = distribution_figure(recs, points=['target.resid[1]', 'draft.fc.in', 'draft.hidden'])
    tr = traces(fig)
    assert list(tr) == ['target.resid[1]', 'draft.fc.in[0]', 'draft.fc.in[1]', 'draft.fc.in[2]', 'draft.hidden']
    assert all(t['type'] == 'violin' for t in tr.values())
    np.testing.assert_allclose(tr['draft.fc.in[2]']['y'], resid[3].flatten().tolist(), rtol=1e-6)
    np.testing.assert_allclose(tr['target.resid[1]']['y'], resid[1].flatten().tolist(), rtol=1e-6)
    assert len(traces(distribution_figure(recs, points='draft.fc.in', max_values=7))['draft.fc.in[0]']['y']) == 7

def test_distribution_stats_mode_pools_records():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(1, 6, H, generator=g), torch.randn(1, 4, H, generator=g) * 3 + 1
    recs = [rec('draft.hidden', 'draft[0]', a, full=False), rec('draft.hidden', 'draft[1]', b, full=False),
            rec('draft.attn', 'draft[0]', a, full=False)]
    fig = distribution_figure(recs, phase='draft[*]')
    box = traces(fig)['draft.hidden']
    both = torch.cat([a.flatten(), b.flatten()]).double()
    assert box['type'] == 'box'
    np.testing.assert_allclose([box['mean'][0], box['sd'][0], box['lowerfence'][0], box['upperfence'][0]],
                               [both.mean().item(), both.std().item(), both.min().item(), both.max().item()], rtol=1e-5)
    np.testing.assert_allclose(box['q1'][0], both.mean().item() - both.std().item(), rtol=1e-5)
    assert 'statistics only' in fig.layout.title.text
    fig = distribution_figure(recs, points='draft.attn', backend='matplotlib')
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ['draft.attn']
    caps = sorted(y for l in ax.get_lines() for y in l.get_ydata())
    np.testing.assert_allclose([caps[0], caps[-1]], [a.min().item(), a.max().item()], rtol=1e-6)
    with pytest.raises(ValueError, match='no records'): distribution_figure(recs, points='target.*')

# --- layer profile ------------------------------------------------------------------------------------------------

def test_layer_profile(pipe):
    recs, resid = pipe
    fig = layer_profile_figure(recs, n_layers=4, wired=(1, 2, 3), trained=(0, 2, 3), recommended=(2, 2, 7))
    tr = traces(fig)
    assert tr['norm_mean']['x'] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(tr['norm_mean']['y'], [np.mean(norms(resid[k])) for k in range(5)], rtol=1e-6)
    assert tr['wired']['x'] == [1, 2, 3] and tr['trained']['x'] == [0, 2, 3]
    np.testing.assert_allclose(tr['trained']['y'], [np.mean(norms(resid[k])) for k in (0, 2, 3)], rtol=1e-6)
    assert tr['recommended']['y'][2] == 0.0 and 'not captured' in tr['recommended']['hovertext'][2]
    assert len({tr[n]['marker']['symbol'] for n in ('wired', 'trained', 'recommended')}) == 3
    ls = lines(layer_profile_figure(recs, wired=(1, 2, 3), backend='matplotlib').axes[0])
    np.testing.assert_allclose(ls['norm_mean'].get_ydata(), [np.mean(norms(resid[k])) for k in range(5)], rtol=1e-6)
    assert list(ls['wired'].get_xdata()) == [1, 2, 3]

# --- acceptance ---------------------------------------------------------------------------------------------------

def step(cycle, accepted, depth=3):
    toks = list(range(10, 10 + depth))
    d = DraftResult(cycle, toks, list(range(-1, depth - 1)), list(range(1, depth + 1)), [0.5] * depth,
                    [[(t, 0.5), (t + 1, 0.2), (t + 2, 0.1)] for t in toks], {})
    v = VerifyResult(cycle, 1, toks, [0.4] * depth, toks[:accepted] + [90], accepted, toks[:accepted], 90, list(range(accepted)), {})
    return StepResult(d, v)

def test_acceptance_plotly():
    runs = [[step(0, 3), step(1, 1), step(2, 0)], [step(0, 2), step(1, 2, depth=2)]]
    fig = acceptance_figure(runs, num_steps=3)
    tr = traces(fig)
    assert tr['prompt 0']['y'] == [4, 2, 1] and tr['prompt 1']['y'] == [3, 3] and tr['prompt 0']['x'] == [0, 1, 2]
    np.testing.assert_allclose(tr['per-position acceptance']['y'], summarize(runs, 3)['per_position_acceptance'])
    np.testing.assert_allclose(tr['per-position acceptance']['y'], [4 / 5, 3 / 5, 1 / 5])
    z = tr['accepted']['z']
    assert z == [[1.0, 1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, None]]   # last: never proposed
    assert tr['accepted']['x'] == ['0:0', '0:1', '0:2', '1:0', '1:1']
    np.testing.assert_allclose(tr['mean accept length']['y'], [13 / 5] * 2)
    assert traces(acceptance_figure(runs[0]))['prompt 0']['y'] == [4, 2, 1]        # one prompt: a list of StepResults

def test_acceptance_matplotlib():
    runs = [[step(0, 3), step(1, 1)], [step(0, 0, depth=1)]]
    fig = acceptance_figure(runs, num_steps=3, backend='matplotlib')
    np.testing.assert_allclose([p.get_height() for p in fig.axes[1].patches], [2 / 3, 1 / 3, 1 / 3])
    img = fig.axes[2].images[0].get_array()
    np.testing.assert_array_equal(img.filled(-1), [[1, 1, 0], [1, 0, -1], [1, 0, -1]])
    with pytest.raises(ValueError, match='no cycles'): acceptance_figure([[]])

# --- token strip --------------------------------------------------------------------------------------------------

class Tok:
    def decode(self, ids): return ''.join(chr(64 + i) for i in ids)

def history():
    e = ExtendResult(0, [1, 2, 3], 4, {})
    d0 = DraftResult(0, [5, 6, 7], [-1, 0, 1], [1, 2, 3], [0.9, 0.6, 0.3], [[(5, 0.9), (8, 0.05), (9, 0.01)],
                     [(6, 0.6), (10, 0.2), (11, 0.1)], [(7, 0.3), (12, 0.3), (13, 0.2)]], {})
    v0 = VerifyResult(0, 4, [5, 6, 7], [0.8, 0.1, 0.05], [5, 14], 1, [5], 14, [0], {})
    d1 = DraftResult(1, [15, 16], [-1, 0], [1, 2], [0.7, 0.7], [[(15, 0.7)], [(16, 0.7)]], {})
    v1 = VerifyResult(1, 14, [15, 16], [0.9, 0.9], [15, 16, 17], 2, [15, 16], 17, [0, 1], {})
    return [e, d0, v0, d1, v1]

def test_token_strip_plotly():
    fig = token_strip(history(), Tok())
    tr = traces(fig)
    assert tr['prompt']['customdata'] == [1, 2, 3] and tr['prompt']['marker']['color'] == COLORS['prompt']
    assert tr['accepted']['customdata'] == [5, 15, 16] and tr['accepted']['marker']['color'] == COLORS['accepted']
    assert tr['rejected']['customdata'] == [6] and tr['rejected']['marker']['color'] == COLORS['rejected']
    assert tr['bonus']['customdata'] == [4, 14, 17] and tr['bonus']['marker']['color'] == COLORS['bonus']
    assert tr['prompt']['text'] == ['A', 'B', 'C']
    order = sorted((x, n, c) for n, t in tr.items() for x, c in zip(t['x'], t['customdata']))
    assert [c for _, _, c in order] == [1, 2, 3, 4, 5, 6, 14, 15, 16, 17]     # rejected sits before the bonus
    hv = tr['rejected']['hovertext'][0]
    assert "'F' (id 6)" in hv and 'cycle 0' in hv and 'draft p = 0.6' in hv and 'target p = 0.1' in hv
    assert "draft's top 3: 'F' 0.6, 'J' 0.2, 'K' 0.1" in hv and "target chose 'N'" in hv
    assert 'draft p = 0.9' in tr['accepted']['hovertext'][0] and 'target p = 0.8' in tr['accepted']['hovertext'][0]
    assert traces(token_strip(history()))['prompt']['text'] == ['1', '2', '3']     # no tokenizer: ids

def test_token_strip_html_and_matplotlib():
    h = token_strip_html(history(), Tok())
    assert h.count('class="e3-tok e3-accepted"') == 3 and h.count('e3-tok e3-rejected') == 1 and h.count('e3-tok e3-bonus') == 3
    rejected = h[h.index('e3-tok e3-rejected'):].split('>')[0]   # outlined in red and struck through: a one-character token stays readable
    assert f'color:{COLORS["rejected"]}' in rejected and 'background:white' in rejected and 'line-through' in rejected
    assert "target chose &#x27;N&#x27;" in h and h.count('class="e3-cycle"') == 2     # the two verified cycles start at a mark
    fig = token_strip(history(), Tok(), backend='matplotlib')
    faces = [matplotlib.colors.to_hex(p.get_facecolor()) for p in fig.axes[0].patches]
    assert faces == [COLORS[k] for k in ['prompt'] * 3 + ['bonus', 'accepted', 'rejected', 'bonus', 'accepted', 'accepted', 'bonus']]
    assert [t.get_text() for t in fig.axes[0].texts][:4] == ['A', 'B', 'C', 'D']

# --- similarity, sweep, html --------------------------------------------------------------------------------------

def test_similarity_figure():
    m = [[0.1, 0.9, 0.2], [0.3, float('nan'), 0.95], [0.99, 0.2, 0.1]]
    fig = similarity_figure(m, ['c0', 'c1', 'c2'], [2, 3, 4])
    data = fig.to_dict()['data']
    assert data[0]['z'] == [[0.1, 0.9, 0.2], [0.3, None, 0.95], [0.99, 0.2, 0.1]] and data[0]['x'] == ['2', '3', '4']
    assert (data[1]['x'], data[1]['y']) == (['3', '4', '2'], ['c0', 'c1', 'c2'])
    fig = similarity_figure(torch.tensor(m), ['c0', 'c1', 'c2'], [2, 3, 4], backend='matplotlib')
    ax = fig.axes[0]
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array(), dtype=float), np.array(m))
    assert list(ax.lines[0].get_xdata()) == [1, 2, 0] and list(ax.lines[0].get_ydata()) == [0, 1, 2]
    with pytest.raises(ValueError, match='does not match'): similarity_figure(m, ['c0'], [2, 3, 4])

def test_sweep_figure():
    rows = [dict(label='a', accept_length=1.5, ci=[1.2, 1.7], configured=True), dict(label='b', accept_length=2.5, best=True),
            dict(label='c', accept_length=1.0, ci=[0.9, 1.05])]
    bar = sweep_figure(rows).to_dict()['data'][0]
    assert bar['x'] == [1.5, 2.5, 1.0] and bar['y'] == ['a · configured', 'b · best', 'c'] and bar['orientation'] == 'h'
    np.testing.assert_allclose(bar['error_x']['array'], [0.2, 0.0, 0.05]); np.testing.assert_allclose(bar['error_x']['arrayminus'], [0.3, 0.0, 0.1])
    assert bar['marker']['color'] == [COLORS['configured'], COLORS['best'], COLORS['other']]
    ax = sweep_figure(rows, backend='matplotlib').axes[0]
    assert [p.get_width() for p in ax.patches] == [1.5, 2.5, 1.0]
    assert [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches] == [COLORS['configured'], COLORS['best'], COLORS['other']]

def test_to_html_and_offline_setup():
    rows = [dict(label='wiring-x', accept_length=2.0)]
    small, big = to_html(sweep_figure(rows), include_plotlyjs=False), to_html(sweep_figure(rows))
    assert small.startswith('<div') and 'wiring-x' in small and len(big) > len(small) + 1_000_000
    assert 'src="https://cdn' not in big
    img = to_html(sweep_figure(rows, backend='matplotlib'))
    assert img.startswith('<img alt="Accept length per wiring"') and 'data:image/png;base64,iVBOR' in img
    with pytest.raises(TypeError): to_html('not a figure')
    assert setup_offline_plotly() is None                      # not inside IPython: nothing to set up

# --- a real session ------------------------------------------------------------------------------------------------

def test_real_session_with_capture(tmp_path):
    from eagle3_workbench.loading import save_draft, load_pair
    save_tiny_target(tmp_path/'t')
    cfg = tiny_draft_config()
    save_draft(random_draft(cfg), tmp_path/'d', cfg)
    pair = load_pair(str(tmp_path/'t'), str(tmp_path/'d'))
    with Capture(pair.target, pair.draft, points=['target.resid[*]', 'draft.*'], mode='full') as cap:
        s = Session(pair, capture=cap, speculative_num_steps=3)
        s.extend(list(range(3, 11))); s.step(); s.step()
    t = presence_table(cap, expected_presence(cap.points, 3))
    assert t['missing'] == [] and t['unexpected'] == []
    z = presence_figure(cap, expected_presence(cap.points, 3)).to_dict()['data'][0]['z']
    n = Counter((r.point, r.phase) for r in cap.records)
    assert z == [[n[p, ph] for ph in t['phases']] for p in t['points']]
    fig = pipeline_figure(cap, wiring=s.wiring)
    tr = traces(fig)
    for i, k in enumerate(s.wiring):
        want = torch.linalg.vector_norm(cap.select(f'target.resid[{k}]', phase='extend')[0].tensor[0], dim=-1).tolist()
        np.testing.assert_allclose(tr[f'draft.fc.in[{i}]']['y'], want, rtol=1e-5)
    table = next(t for t in fig.to_dict()['data'] if t['type'] == 'table')
    assert [n for n in table['cells']['values'][-1] if n.startswith('=')] == [f'= target.resid[{k}]' for k in s.wiring]
    acc = traces(acceptance_figure(s))
    assert acc['prompt 0']['y'] == [h.accept_length for h in s.history if isinstance(h, VerifyResult)]
    strip = traces(token_strip(s))
    assert strip['prompt']['customdata'] == list(range(3, 11))
    emitted = [c for n in ('accepted', 'bonus') for c in strip[n]['customdata']]
    assert sorted(emitted) == sorted(s.tokens[8:])
    lp = traces(layer_profile_figure(cap, n_layers=pair.n_layers, wired=s.wiring))
    np.testing.assert_allclose(lp['norm_mean']['y'], [cap.select(f'target.resid[{k}]', phase='extend')[0].stats['norm_mean']
                                                      for k in range(pair.n_layers + 1)])
