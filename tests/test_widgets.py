"The stepper driven by .click(): the session advances, the panels change, errors show in the UI."
import pytest, torch
from conftest import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.loading import save_draft, load_pair
from eagle3_workbench.capture import live_hooks
from eagle3_workbench.widgets import stepper

@pytest.fixture
def st(tmp_path):
    save_tiny_target(tmp_path/'t', 'llama'); cfg = tiny_draft_config(); save_draft(random_draft(cfg), tmp_path/'d', cfg)
    return stepper(load_pair(str(tmp_path/'t'), str(tmp_path/'d')), prompt='5 17 23 42 7 9 11', speculative_num_steps=3)

def outputs(w): return [o for o in w.outputs]

def test_buttons_advance_session_and_redraw(st):
    assert st.session.history == [] and 'no tokens yet' in st.strip.value
    st.buttons['Extend'].click()
    assert st.session.tokens[:7] == [5, 17, 23, 42, 7, 9, 11] and len(st.session.tokens) == 8
    assert 'extend: 7 prompt tokens' in st.status.value and st.strip.value.count('e3-tok') == 8
    fig_before = st.fig.to_dict()['data']
    assert outputs(st.figure)[0]['output_type'] == 'display_data' and 'target.resid[2]' in st.layer.options
    assert st.layer.value == 'target.resid[2]' and outputs(st.stage)[0]['text'].startswith('target.resid[2] [extend')
    st.buttons['Draft'].click()
    assert type(st.session.history[-1]).__name__ == 'DraftResult' and 'proposed 3 tokens' in st.status.value
    st.buttons['Verify'].click()
    n = len(st.session.tokens)
    assert n > 8 and 'accept length' in st.status.value
    st.phase.value = 'verify'                      # the figure now shows the verify phase
    assert st.fig.to_dict()['data'] != fig_before and 'verify' in str(st.fig.layout.title.text)
    st.buttons['Step'].click()
    assert len(st.session.tokens) > n and st.session.cycle == 2
    st.run_n.value = 6; st.buttons['Run N'].click()
    assert len(st.session.tokens) >= n + 7 and 'ran' in st.status.value
    assert live_hooks(st.pair.target) == 0 and live_hooks(st.pair.draft) == 0   # hooks only while an action runs
    st.buttons['Reset'].click()
    assert st.session.tokens == [] and st.capture.records == []

def test_bad_settings_show_in_ui_and_keep_session(st):
    st.buttons['Extend'].click()
    before = (list(st.session.tokens), st.session.settings, st.session.wiring)
    st.steps.value = 0; st.apply.click()
    assert 'error' in st.status.value and 'speculative_num_steps=0' in st.status.value
    st.steps.value = 3; st.wiring.value = '2,3,99'; st.apply.click()
    assert 'out of range' in st.status.value
    st.buttons['Draft'].click(); st.buttons['Draft'].click()
    assert 'call verify() first' in st.status.value
    assert (st.session.settings, st.session.wiring) == before[1:]
    st.buttons['Verify'].click()
    assert 'accept length' in st.status.value          # still usable
    st.wiring.value = '0,2,4'; st.apply.click()
    assert st.session.wiring == (0, 2, 4) and 'settings applied' in st.status.value
