"""A target no notebook can load, in a real (headless) Chromium: the stepper opened in JupyterLab on the 61-layer
recording SGLang made (tests/fixtures/recordings/sglang-deep-dsv3), with the target's weights nowhere to be read, stepped
extend / draft / verify, its target and draft stages shown and the fc-chunk match naming a planted miswiring; and the
report made from the same recording, whose figures offer no upload button (nor does any figure in the notebook)."""
import json, re, shutil, subprocess, time
from pathlib import Path
import pytest
from browser_util import jupyterlab, chromium, artifacts_dir, cli
from test_browser import browser_ok, until, _loopback_only, _file_only, NB_STATE, NB_ERRORS  # noqa: F401  (browser_ok: a fixture)

ROOT = Path(__file__).parent.parent
FIXTURE = ROOT/'tests'/'fixtures'/'recordings'/'sglang-deep-dsv3'
DRAFT = ROOT/'eagle3_workbench'/'zoo_data'/'deep-dsv3-eagle3'
# what plotly.js 4 puts in a figure's mode bar for an upload ('Share chart...', showSendToCloud) and its logo link (displaylogo)
UPLOADS = """() => ({plots: document.querySelectorAll('.js-plotly-plot').length,
  buttons: [...document.querySelectorAll('.modebar-btn')].map(e => e.getAttribute('data-title') || '')
            .filter(t => /share|cloud|chart studio|plotly/i.test(t)),
  links: [...document.querySelectorAll('.modebar a[href], a.modebar-btn--logo')].map(e => e.href),
  context: [...document.querySelectorAll('.js-plotly-plot')].map(e => e._context ? [e._context.showSendToCloud, e._context.displaylogo] : null)})"""

def _recording_only(tmp_path)->tuple:
    "The recording and the draft copied where the target's folder does not exist: nothing can load the target's weights."
    rec, draft = tmp_path/'rec', tmp_path/'draft'
    shutil.copytree(FIXTURE, rec); shutil.copytree(DRAFT, draft)
    m = json.loads((rec/'manifest.json').read_text())
    m['target']['path'] = str(tmp_path/'moved-away'/'deep-dsv3')   # as a user whose target lives on another machine
    (rec/'manifest.json').write_text(json.dumps(m, indent=1))
    return rec, draft

def _no_uploads(page)->list:
    "Faults: any figure on the page offering an upload or a link out."
    u = page.evaluate(UPLOADS)
    return ([f"a figure offers an upload or a link out: {u['buttons'] + u['links']}"] if u['buttons'] or u['links'] else []) + \
           ([f"a figure runs with showSendToCloud / displaylogo on: {u['context']}"] if any(c != [False, False] for c in u['context']) else [])

def test_plotly_default_has_the_upload_button(tmp_path, browser_ok):
    "The counterpart: the same check finds plotly's own default button, so a clean page means the config took."
    import plotly.graph_objects as go
    page_file = tmp_path/'plain.html'
    page_file.write_text(go.Figure(go.Bar(y=[1, 2])).to_html(include_plotlyjs=True, full_html=True))
    with chromium() as (page, _):
        page.goto(page_file.as_uri(), wait_until='load')
        until(lambda: page.locator('.js-plotly-plot .main-svg').count(), 30, 'the plain figure to draw')
        u = page.evaluate(UPLOADS)
    # plotly.js 4 (plotly 7.1's bundle) by default: the upload button and the logo linking to plotly.com
    assert u['buttons'][0] == 'Share chart...' and u['buttons'][1].startswith('Produced with Plotly.js'), u
    assert u['links'] == ['https://plotly.com/'] and u['context'] == [[True, True]], u

NOTEBOOK = """from pathlib import Path
from eagle3_workbench.recording import recorded_pair
from eagle3_workbench.widgets import stepper
pair = recorded_pair({rec!r}, draft={draft!r})
assert not Path(pair.target.target['path']).exists()   # the target's weights are not on this machine
st = stepper(pair, speculative_num_steps=3)
st.full.value = True
st"""

@pytest.mark.slow
def test_stepper_on_the_engine_recording_in_jupyterlab(tmp_path, browser_ok):
    rec, draft = _recording_only(tmp_path)
    nbdir = tmp_path/'nbs'; nbdir.mkdir()
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK.format(rec=str(rec), draft=str(draft)))])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3 (ipykernel)', 'language': 'python'}
    nbformat.write(nb, nbdir/'deep.ipynb')
    art, t0 = artifacts_dir(tmp_path), time.time()
    with jupyterlab(nbdir, tmp_path/'jupyter') as url, chromium() as (page, problems):
        blocked, faults = [], []
        _loopback_only(page, blocked)
        try:
            page.goto(f'{url}/lab/tree/deep.ipynb', wait_until='domcontentloaded', timeout=60_000)
            until(lambda: (s := page.evaluate(NB_STATE))['kernel'] == 'idle' and s['prompts'], 60, 'the notebook to open with an idle kernel')
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            step_btn = page.get_by_role('button', name='Step', exact=True)
            stepper = page.locator('.jp-OutputArea-output').filter(has=step_btn)
            until(lambda: stepper.count() == 1 or page.evaluate(NB_ERRORS), 90, 'the stepper widget (an output with a Step button)')
            assert not page.evaluate(NB_ERRORS), page.evaluate(NB_ERRORS)
            status, detail = stepper.locator('.e3-status'), stepper.locator('.e3-detail')
            label = lambda kind, name: stepper.locator(f'.widget-{kind}').filter(has=page.locator('label', has_text=re.compile(f'^{name}$')))
            select = lambda name: label('dropdown', name).locator('select')
            def click(name, expect):
                before = status.inner_text()
                stepper.get_by_role('button', name=name, exact=True).click()
                until(lambda: status.inner_text() != before and re.search(expect, status.inner_text()), 30,
                      f"the status after {name} to match {expect!r} (was {before!r}, now {status.inner_text()!r})")
            # the recorded prompts are offered by text (the recording kept its tokenizer); the first is in the prompt box
            picker = label('dropdown', r'recorded prompt \(of 12\)').locator('select')
            if picker.count() != 1 or picker.locator('option').count() != 12: faults.append('no picker of the 12 recorded prompts')
            click('Extend', r'^extend: 44 prompt tokens, next token ')
            # a target stage served from the recording: resid[30] of the extend, every prompt token, hidden 64
            select('stage').select_option('target.resid[30]')
            until(lambda: detail.inner_text().startswith('target.resid[30] [extend, cycle 0] shape=(1, 44, 64)'), 20,
                  f"the target stage resid[30] in the detail line (got {detail.inner_text()!r})")
            click('Draft', r'^draft: proposed 3 tokens, waiting for verify')
            if not stepper.locator('.e3-tok.e3-pending').count(): faults.append('after Draft the strip shows no pending proposals')
            select('stage').select_option('draft.hidden')   # a draft stage, run live
            until(lambda: re.match(r'draft\.hidden \[draft\[\d\], cycle 0\] shape=\(1, 1, 64\)', detail.inner_text()), 20,
                  f"the draft stage in the detail line (got {detail.inner_text()!r})")
            click('Verify', r'^verify: accepted \d of 3')
            select('stage').select_option('draft.fc.in')
            until(lambda: 'chunk 0 = resid[2], as the config reads; trained on: unknown (ask the doctor)' in detail.inner_text(), 20,
                  f"the fc-chunk match as configured, trained on not yet known (got {detail.inner_text()!r})")
            head = stepper.locator('.e3-wiring-head')
            if 'trained on: unknown (ask the doctor)' not in head.inner_text(): faults.append(f"the strip's header before the doctor: {head.inner_text()!r}")
            # the doctor asked from the page: trained on what the report says, next to what the config reads and what was fed
            want = _doctor_trained(rec, draft)
            click('Ask the doctor', rf'^the doctor \(.*\): MISWIRED; trained on: resid{re.escape(str(list(want)))}')
            said = f"trained on: resid{list(want)} (the doctor: MISWIRED) · the config reads resid[2, 30, 58] as SGLang 0.5.23 reads it · fed resid[2, 30, 58] (not what it was trained on)"
            until(lambda: head.inner_text().strip() == said, 20, f"the strip's header after the doctor (got {head.inner_text()!r})")
            select('stage').select_option('draft.hidden'); select('stage').select_option('draft.fc.in')
            until(lambda: [l for l in detail.inner_text().splitlines() if l.startswith('chunk ')] ==
                  [f'chunk {i} = resid[{k}], as the config reads; trained on resid[{t}]' for i, (k, t) in enumerate(zip((2, 30, 58), want))], 20,
                  f"the chunk lines with trained-on next to fed (got {detail.inner_text()!r})")
            note = stepper.locator('.e3-prompt-note').inner_text()
            if not re.match(r'recorded prompt \d+ shows the difference most: accept length [\d.]+ fed resid\[2, 30, 58\] vs [\d.]+ as trained', note):
                faults.append(f"the note under the picker names no prompt that shows the fault: {note!r}")
            stepper.scroll_into_view_if_needed(); page.screenshot(path=str(art/'recording_stepper_trained.png'))
            # the founding fault planted: the embedding fed in chunk 0; the match names it against what the config reads
            select('engine').select_option(RESID_LABEL)
            label('text', 'resid').locator('input').fill('0,2,30')
            click('Apply settings', r'^settings applied: wiring resid\[0, 2, 30\]')
            click('Step', r'^cycle 1: accepted \d')
            select('stage').select_option('draft.fc.in')
            until(lambda: f'chunk 0 = resid[0] (the embedding); the config reads resid[2]; trained on resid[{want[0]}]' in detail.inner_text(), 20,
                  f"the fc-chunk match naming the embedding (got {detail.inner_text()!r})")
            if 'fed resid[0, 2, 30] (resid[2, 30, 58] before the first ⚑)' not in stepper.locator('.e3-strip').inner_text():   # what is fed now
                faults.append(f"the token strip's header after the change: {stepper.locator('.e3-strip').inner_text()[:300]!r}")
            if not head.inner_text().strip().endswith('fed resid[0, 2, 30] (not what it was trained on)'): faults.append(f"the header after the change: {head.inner_text()!r}")
            faults += _no_uploads(page)
            if blocked: faults.append(f"the page tried to reach the network: {blocked[:5]}")
            stepper.scroll_into_view_if_needed(); page.screenshot(path=str(art/'recording_stepper.png'))
            print(f"stepper on the 61-layer recording: {time.time() - t0:.0f} s; status {status.inner_text()!r}")
            assert not faults, '\n'.join(faults)
        finally:
            page.screenshot(path=str(art/'recording_stepper_final.png'))

RESID_LABEL = 'resid indices'

def _doctor_trained(rec, draft)->tuple:
    "What the doctor's report on the same recording and draft says the draft was trained on (its mismatch finding), asked in this process."
    from eagle3_workbench.recording import recorded_pair
    from eagle3_workbench.doctor import diagnose
    d = diagnose(recorded_pair(str(rec), draft=str(draft)), progress=False)
    f = next(f for f in d.findings if f.code == 'AUX_LAYERS_MISMATCH')
    return tuple(int(x) for x in re.search(r'trained on resid\[([\d, ]+)\]', f.message)[1].split(', '))

@pytest.mark.slow
def test_report_from_the_engine_recording(tmp_path, browser_ok):
    rec, draft = _recording_only(tmp_path)
    out, t0 = tmp_path/'report.html', time.time()
    r = subprocess.run(cli() + ['report', '--recording', str(rec), '--draft', str(draft), '--out', str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"report --recording failed:\n{r.stderr[-3000:]}"
    nb = json.loads(out.with_suffix('.ipynb').read_text())
    printed = '\n'.join(''.join(o.get('text', '')) for c in nb['cells'] for o in c.get('outputs', []) if o.get('output_type') == 'stream')
    assert '[deepseek_v3, 61 layers]' in printed, printed[:2000]
    with chromium() as (page, problems):
        blocked = _file_only(page)
        page.goto(out.as_uri(), wait_until='load', timeout=60_000)
        plots = page.locator('.js-plotly-plot')
        until(lambda: plots.count() >= 5 and page.locator('.js-plotly-plot .main-svg').count() >= plots.count(), 60, 'the report figures')
        plots.first.hover()
        faults = _no_uploads(page)
        verdict = page.locator('.e3-diagnosis .e3-verdict')
        if [t.strip() for t in verdict.all_inner_texts()][:1] != ['MISWIRED']:   # the founding case: trained on resid[3, 31, 59]
            faults.append(f"the report from the recording reads {verdict.all_inner_texts()}, not MISWIRED")
        if blocked: faults.append(f"the report is not self-contained: {sorted(set(blocked))[:5]}")
        page.screenshot(path=str(artifacts_dir(tmp_path)/'recording_report.png'))
    print(f"report from the recording: {time.time() - t0:.0f} s")
    assert not faults, '\n'.join(faults)
