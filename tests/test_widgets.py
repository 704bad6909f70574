"The stepper driven by .click(): the session advances, the view follows and shows the selection, errors show in the UI."
import html, re
import pytest, torch
from eagle3_workbench.testing import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.loading import save_draft, load_pair
from eagle3_workbench.capture import live_hooks
from eagle3_workbench.points import phase_pair
from eagle3_workbench.widgets import stepper, timeline

@pytest.fixture
def st(tmp_path):
    save_tiny_target(tmp_path/'t', 'llama'); cfg = tiny_draft_config(); save_draft(random_draft(cfg), tmp_path/'d', cfg)
    return stepper(load_pair(str(tmp_path/'t'), str(tmp_path/'d')), prompt='5 17 23 42 7 9 11', speculative_num_steps=3)

@pytest.fixture(scope='module')
def zoo():
    return load_pair('zoo:tiny-dsv3')

def shown(st)->tuple:
    "(stage, phase, cycle) that the detail line under the figure is about."
    m = re.match(r'(\S+) \[(\S+), cycle (\d+)\]', st.view.detail_text)
    assert m, st.view.detail_text
    return m[1], m[2], int(m[3])

def test_buttons_advance_session_and_redraw(st):
    assert st.session.history == [] and 'no tokens yet' in st.view.strip.value
    st.buttons['Extend'].click()
    assert st.session.tokens[:7] == [5, 17, 23, 42, 7, 9, 11] and len(st.session.tokens) == 8
    assert 'extend: 7 prompt tokens' in st.status.value and st.view.strip.value.count('e3-tok') == 8
    fig_before = st.view.fig.to_dict()['data']
    assert st.view.figure.outputs[0]['output_type'] == 'display_data' and 'target.resid[2]' in st.view.stage.options
    assert st.view.stage.value == 'target.resid[2]' and shown(st) == ('target.resid[2]', 'extend', 0)
    st.buttons['Draft'].click()
    assert type(st.session.history[-1]).__name__ == 'DraftResult' and 'proposed 3 tokens' in st.status.value
    assert st.view.strip.value.count('e3-tok e3-pending') == 3                    # the proposals wait in the strip
    assert st.view.phase.value.startswith('draft[')                              # the view followed the draft
    st.buttons['Verify'].click()
    n = len(st.session.tokens)
    assert n > 8 and 'accept length' in st.status.value and st.view.strip.value.count('e3-tok e3-pending') == 0
    assert (st.view.phase.value, st.view.cycle.value) == ('verify', 0)           # and then the verify
    assert st.view.fig.to_dict()['data'] != fig_before and 'verify' in str(st.view.fig.layout.title.text)
    st.buttons['Step'].click()
    assert len(st.session.tokens) > n and st.session.cycle == 2 and st.view.cycle.value == 1
    st.run_n.value = 6; st.buttons['Run N'].click()
    assert len(st.session.tokens) >= n + 7 and 'ran' in st.status.value
    assert st.view.cycle.value == st.session.cycle - 1 and st.view.strip.value.count('class="e3-cycle"') == st.session.cycle
    assert live_hooks(st.pair.target) == 0 and live_hooks(st.pair.draft) == 0   # hooks only while an action runs
    st.buttons['Reset'].click()
    assert st.session.tokens == [] and st.capture.records == [] and 'no tokens yet' in st.view.strip.value

def test_detail_line_follows_the_selection(st):
    st.buttons['Extend'].click()
    for _ in range(3): st.buttons['Step'].click()
    assert [c for _, c in st.view.cycle.options] == [0, 1, 2]                    # every verify, not only the latest
    for cycle in (0, 2, 1):
        for stage in ('target.resid[4]', 'draft.hidden'):
            st.view.cycle.value, st.view.stage.value = cycle, stage
            s, ph, c = shown(st)
            assert (s, c) == (stage, cycle) and ph in phase_pair('verify'), st.view.detail_text
            entry = timeline(st.session)[('verify', cycle)]
            want = next(r for r in entry.captures if r.point == stage)                 # the record of that very phase
            assert f"norm_mean={want.stats['norm_mean']:.4g}" in st.view.detail_text
    st.view.phase.value = 'extend'
    assert shown(st) == ('draft.hidden', 'draft_extend', 0) and st.view.cycle.options == ((('0', 0)),)
    ks = [int(o[len('target.resid['):-1]) for o in st.view.stage.options if o.startswith('target.resid[')]
    assert ks == sorted(ks) and ks[-1] == st.pair.n_layers                        # resid[10] after resid[9]

def test_bad_settings_show_in_ui_and_keep_session(st):
    st.buttons['Extend'].click()
    before = (list(st.session.tokens), st.session.settings, st.session.wiring)
    st.steps.value = 0; st.apply.click()
    assert 'error' in st.status.value and 'speculative_num_steps=0' in st.status.value
    st.steps.value = 3; st.wiring.engine.value = 'resid'; st.wiring.ids.value = '2,3,99'; st.apply.click()
    assert 'out of range' in st.status.value
    st.wiring.ids.value = '2,x'; st.apply.click()
    assert "resid indices '2,x'" in st.status_text and '2,x' in html.unescape(st.wiring.preview.value)
    st.buttons['Draft'].click(); st.buttons['Draft'].click()
    assert 'call verify() first' in st.status.value
    assert (st.session.settings, st.session.wiring) == before[1:]
    st.buttons['Verify'].click()
    assert 'accept length' in st.status.value          # still usable
    st.wiring.ids.value = '0,2,4'; st.temperature.value = 0.5; st.apply.click()
    assert st.session.wiring == (0, 2, 4) and st.status_text.startswith('settings applied: wiring resid[0, 2, 4] (resid indices)')
    assert 'temperature 0.5' in st.status_text

def test_fc_input_match_names_the_embedding(zoo):
    "The founding case: the zoo draft trained on resid[2, 6, 9] fed resid[0, 2, 6]; full capture says chunk 0 is the embedding."
    st = stepper(zoo, prompt='def add(a, b):', speculative_num_steps=3)
    assert st.pair.wiring.resid_layers == (2, 6, 9) and st.wiring.engine.value == 'sglang-pr25454' and st.wiring.ids.value == '1,5,8'
    st.wiring.engine.value, st.wiring.release.value, st.wiring.ids.value = 'sglang', '0.5.23', '0,2,6'   # PR #25454: verbatim
    assert 'feeds <b>resid[0, 2, 6]</b>' in st.wiring.preview.value
    st.apply.click(); st.full.value = True
    st.buttons['Extend'].click()
    st.view.stage.value = 'draft.fc.in'
    lines = st.view.detail_text.splitlines()
    assert lines[0].startswith('draft.fc.in [draft_extend, cycle 0]')
    assert lines[2:] == ['chunk 0 = resid[0] (the embedding); the config reads resid[2]', 'chunk 1 = resid[2]; the config reads resid[6]',
                         'chunk 2 = resid[6]; the config reads resid[9]'], lines
    # the neighbours: a chunk fed a layer's output without its residual, or the final norm's output, is named as such
    from eagle3_workbench.capture import fc_input_sources
    e = st.session.history[0]
    recs = {r.point: r for r in e.captures if r.phase == 'extend'}
    fc = next(r for r in e.captures if r.point == 'draft.fc.in')
    mlp = next(p for p in recs if p.endswith('layers.5.mlp'))
    swapped = torch.cat([recs[mlp].tensor, recs['target.norm'].tensor, recs['target.resid[9]'].tensor], -1)
    import dataclasses
    got = fc_input_sources(dataclasses.replace(fc, tensor=swapped), list(recs.values()), 3, (2, 6, 9), zoo.n_layers)
    assert [str(g) for g in got] == ["chunk 0 = layer 5's output without its residual, wired resid[2]",
                                     "chunk 1 = the final norm's output, wired resid[6]", 'chunk 2 = resid[9], as wired']

def test_wiring_change_is_marked_where_it_happened(zoo):
    st = stepper(zoo, prompt='def add(a, b):', speculative_num_steps=3)
    st.buttons['Extend'].click(); st.buttons['Step'].click()
    st.wiring.engine.value, st.wiring.ids.value = 'resid', '0,2,6'; st.apply.click()
    st.buttons['Step'].click()
    assert [getattr(h, 'wiring', None) for h in st.session.history if hasattr(h, 'path')] == [(2, 6, 9), (0, 2, 6)]
    assert st.view.strip.value.count('class="e3-wiring"') == 1 and '⚑ resid[0, 2, 6]' in st.view.strip.value
    labels = [l for l, _ in st.view.cycle.options]
    assert labels == ['0', '1 (your wiring changed: resid[0, 2, 6])'], labels
    assert 'your wiring fed resid[0, 2, 6] (wiring changed here)' in st.view.fig.layout.title.text
    stages = lambda: [x for x in st.view.fig.data[-1].cells.values[0] if x.startswith('target.resid')]   # the figure's table
    assert stages() == ['target.resid[0]', 'target.resid[2]', 'target.resid[6]']
    st.view.cycle.value = 0                                                       # the earlier cycle keeps its own wiring
    assert 'fed resid[2, 6, 9]' in st.view.fig.layout.title.text and 'changed' not in st.view.fig.layout.title.text
    assert stages() == ['target.resid[2]', 'target.resid[6]', 'target.resid[9]']

def test_doctor_display_and_sweep_labels(zoo):
    "A real diagnosis of the founding case: the notebook display leads with the verdict and the edit; the sweep names resid layers."
    from eagle3_workbench.doctor import diagnose
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench import result_figures as rf
    d = diagnose(zoo, read_prompts(n=8), wiring=(0, 2, 6), accept=False)
    h = d._repr_html_()
    j = d.to_json()
    assert f'data-verdict="{j["verdict"]}"' in h and f'>{j["verdict"].upper()}<' in h
    e = j['recommended']['for_engine']
    assert html.escape(f'"eagle_config": {{"eagle_aux_hidden_state_layer_ids": {e["ids"]}}}') in h   # the line to paste
    assert h.index('e3-verdict') < h.index('e3-edit') < h.index('e3-findings')
    for f in j['findings']: assert html.escape(f['message']) in h
    fig = rf.sweep_figure(d.sweep[:12], metric='agreement')
    best = next(r for r in d.sweep if r.get('best'))
    assert f"best resid{best['resid_layers']}:" in fig.layout.title.text and 'configured configured' not in fig.layout.title.text
    assert all(y.startswith('resid[') for y in fig.data[0].y), fig.data[0].y
