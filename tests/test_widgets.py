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
    assert 'resid[99] does not exist' in st.status.value and 'Error' not in st.status_text
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
    assert st.pair.wiring.resid_layers == (2, 6, 9) and (st.wiring.engine.value, st.wiring.release.value, st.wiring.ids.value) == ('sglang', '0.5.23', '1,5,8')
    st.wiring.engine.value, st.wiring.release.value, st.wiring.ids.value = 'sglang', '0.5.23', '0,2,6'   # PR #25454: verbatim
    assert 'feeds <b>resid[0, 2, 6]</b>' in st.wiring.preview.value
    st.apply.click(); st.full.value = True
    st.buttons['Extend'].click()
    st.view.stage.value = 'draft.fc.in'
    lines = st.view.detail_text.splitlines()
    assert lines[0].startswith('draft.fc.in [draft_extend, cycle 0]')
    assert lines[2:] == [c + '; trained on: unknown (ask the doctor)' for c in ('chunk 0 = resid[0] (the embedding); the config reads resid[2]',
                         'chunk 1 = resid[2]; the config reads resid[6]', 'chunk 2 = resid[6]; the config reads resid[9]')], lines
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
    best = next(r for r in d.sweep if r.get('best'))   # the sweep's best is the doctor's recommendation: one statement
    assert best['resid_layers'] == j['recommended']['resid_layers'] and best['recommended']
    assert f"recommended resid{best['resid_layers']}:" in fig.layout.title.text and 'configured configured' not in fig.layout.title.text
    assert all(y.startswith('resid[') for y in fig.data[0].y), fig.data[0].y

# --- the stepper and the doctor tell one story (issue 50: items 1, 6, 7) ---
DEEP_REC, DEEP_DRAFT = 'tests/fixtures/recordings/sglang-deep-dsv3', 'zoo:deep-dsv3-eagle3'

@pytest.fixture(scope='module')
def deep():
    from eagle3_workbench.recording import recorded_pair
    from pathlib import Path
    return recorded_pair(str(Path(__file__).parent.parent/DEEP_REC), draft=DEEP_DRAFT)

def _trained_in_report(d)->tuple:
    "The layers the doctor's mismatch finding names, read from its message ('... but trained on resid[3, 31, 59] ...')."
    f = next(f for f in d.findings if f.code == 'AUX_LAYERS_MISMATCH')
    return tuple(int(x) for x in re.search(r'trained on resid\[([\d, ]+)\]', f.message)[1].split(', '))

def test_deep_stepper_says_trained_on_unknown_then_agrees_with_the_doctor(deep):
    "61 layers, fed resid[2, 30, 58] as the config reads: before the doctor is asked nothing sounds fine; after, trained-on is the report's."
    from eagle3_workbench.doctor import diagnose
    st = stepper(deep, speculative_num_steps=3)
    st.full.value = True
    st.buttons['Extend'].click(); st.buttons['Step'].click(); st.view.stage.value = 'draft.fc.in'
    chunks = st.view.detail_text.splitlines()[2:]
    assert chunks == [f'chunk {i} = resid[{k}], as the config reads; trained on: unknown (ask the doctor)' for i, k in enumerate((2, 30, 58))], chunks
    assert 'trained on: unknown (ask the doctor)' in html.unescape(st.view.head.value) and 'not known' in st.note_text
    d = diagnose(deep, progress=False)                                   # the report's answer, asked independently
    trained = _trained_in_report(d)
    assert d.verdict == 'miswired' and trained == (3, 31, 59)
    st.buttons['Ask the doctor'].click()
    assert st.trained.resid == trained and 'MISWIRED' in st.status_text and '#1a7f37' not in st.status.value, st.status_text   # a fault: not green
    head = re.sub(r'<[^>]+>', '', html.unescape(st.view.head.value))
    assert head.startswith(f'trained on: resid{list(trained)} (the doctor: MISWIRED)') and 'the config reads resid[2, 30, 58] as SGLang 0.5.23 reads it' in head
    assert 'fed resid[2, 30, 58] (not what it was trained on)' in head and 'pr25454' not in head
    st.view.cycle.value = 0; st.view.stage.value = 'draft.fc.in'
    chunks = st.view.detail_text.splitlines()[2:]
    assert chunks == [f'chunk {i} = resid[{k}], as the config reads; trained on resid[{t}]' for i, (k, t) in enumerate(zip((2, 30, 58), trained))], chunks

def test_deep_stepper_opens_on_the_prompt_that_shows_the_fault(deep):
    "Given the doctor's answer, the recorded prompt opened on is the one whose accept length gains most as trained, stepped here."
    from eagle3_workbench.doctor import diagnose
    from eagle3_workbench.engine import Session
    from eagle3_workbench.scores import recorded_prompts
    d = diagnose(deep, progress=False)
    st = stepper(deep, speculative_num_steps=3, diagnosis=d)
    mean = lambda p, w: (lambda rs: sum(r.verify.accept_length for r in rs) / len(rs))(Session(deep, wiring=w, speculative_num_steps=3).run(10**6, prompt=p))
    gains = [mean(p, _trained_in_report(d)) - mean(p, (2, 30, 58)) for p in recorded_prompts(deep.target)]
    assert gains[0] == 0 and max(gains) > 0                               # prompt 1 hides the fault; another shows it
    assert st.picker.box.value == gains.index(max(gains)) and st.prompt.value == st.picker.text()
    assert st.note_text.startswith(f'recorded prompt {gains.index(max(gains)) + 1} shows the difference most'), st.note_text

def test_sglang_056_founding_ids_refused_in_the_previews_words(zoo):
    "ids -1,1,5 on SGLang 0.5.6: the preview says why (resid[0] crashes that release), Apply refuses with that sentence, nothing in bold."
    from eagle3_workbench.engines import Engine
    st = stepper(zoo, prompt='def add(a, b):', speculative_num_steps=3)
    assert [l for l, _ in st.wiring.engine.options][:3] == ['resid indices', 'SGLang', 'vLLM'] and (st.wiring.engine.value, st.wiring.release.value) == ('sglang', '0.5.23')
    st.wiring.engine.value, st.wiring.release.value, st.wiring.ids.value = 'sglang', '0.5.6', '-1,1,5'
    why = Engine.parse('sglang==0.5.6').reach(0, zoo.n_layers, zoo.model_type)
    said = why.why.removeprefix('SGLang 0.5.6: ')                           # the row's sentence, the release named once
    assert why.how == 'crash' and said.startswith('resid[0] crashes the engine (') and '<b>' not in st.wiring.preview.value
    assert html.unescape(st.wiring.preview.value).endswith(f'SGLang 0.5.6 reads ids [-1, 1, 5] as resid[0, 2, 6], and {said}</span>')
    st.apply.click()
    assert st.status_text == f"not applied: SGLang 0.5.6 reads ids [-1, 1, 5] as resid[0, 2, 6], and {said}" and 'Error' not in st.status_text
    assert st.session.wiring == (2, 6, 9)
    st.wiring.ids.value = '2,6,9'; st.apply.click()                          # what the preview shows is what Apply feeds
    assert st.session.wiring == st.wiring.resolve()[0] == (3, 7, 10) and 'feeds <b>resid[3, 7, 10]</b>' in st.wiring.preview.value

def test_module_stages_sort_in_layer_order(zoo):
    st = stepper(zoo, prompt='def add(a, b):', speculative_num_steps=3)
    st.buttons['Extend'].click()
    mods = [o for o in st.view.stage.options if o.startswith('module:target:')]
    assert [int(re.search(r'layers\.(\d+)\.', o)[1]) for o in mods] == list(range(zoo.n_layers))

def test_verify_before_draft_and_a_used_up_recording_say_what_to_do(zoo):
    from eagle3_workbench.recording import record, recorded_pair
    st = stepper(recorded_pair(record(zoo, ['def add(a, b):'], max_new_tokens=8, steps=3)), speculative_num_steps=3)
    st.buttons['Extend'].click()
    assert st.buttons['Verify'].disabled
    st.buttons['Verify'].click()
    assert st.status_text == 'nothing to verify: press Draft first (or Step, which drafts and verifies)'
    st.run_n.value = 4096; st.buttons['Run N'].click(); st.buttons['Run N'].click()
    assert st.status_text.startswith('ran no cycle: the recording holds no more tokens for this prompt') and 'record --max-new-tokens' in st.status_text
    assert '#1a7f37' not in st.status.value                                # not green
    st.wiring.engine.value, st.wiring.ids.value = 'resid', '0,2,6'; st.apply.click()
    assert 'the next verify feeds resid[0, 2, 6]' in html.unescape(st.view.head.value)
