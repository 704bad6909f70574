"""What a user sees: the tutorial run in JupyterLab in a real (headless) Chromium, the stepper clicked there, and the
HTML report opened with the network cut off. Plus the report command's failure modes (bad input, time limit)."""
import json, os, re, shutil, subprocess, time
from pathlib import Path
import pytest
from browser_util import jupyterlab, chromium, artifacts_dir, browser_missing, cli

ROOT = Path(__file__).parent.parent
TUTORIAL = ROOT/'nbs'/'index.ipynb'
RUN_TIMEOUT = float(os.environ.get('E3_BROWSER_TIMEOUT', 900))   # seconds for Run All in the browser (a shared 2-core CPU is slow)

@pytest.fixture
def browser_ok():
    why = browser_missing()
    if why and not os.environ.get('CI'): pytest.skip(why)   # in CI a missing browser is a failure, not a skip
    assert why is None, why

def until(fn, timeout, what, every=0.5):
    "Poll fn() until it returns something truthy; fail naming `what` after `timeout` seconds."
    t0 = time.time()
    while True:
        v = fn()
        if v: return v
        if time.time() - t0 > timeout: pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)

def _loopback_only(page, blocked):
    "Abort every request that is not to the local server (there is no network, and the test must not need one)."
    def route(r):
        if re.match(r'https?://(127\.0\.0\.1|localhost)[:/]', r.request.url): r.continue_()
        else: blocked.append(r.request.url); r.abort()
    page.route('**/*', route)

# the notebook's state as the page shows it: kernel status and every code cell's prompt ("[3]:", "[*]:", "[ ]:")
NB_STATE = """() => {
  const app = window.jupyterapp, w = app && app.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim());
  return {app: !!app, kernel: k ? k.status : null, prompts};
}"""
# error outputs: tracebacks anywhere in an output area
NB_ERRORS = """() => [...document.querySelectorAll('.jp-OutputArea-output')]
  .map(e => e.innerText).filter(t => t.includes('Traceback (most recent call last)'))
  .map(t => t.length > 3000 ? t.slice(0, 800) + ' [...] ' + t.slice(-2200) : t)"""
# what a plotly figure shows: its title and the data of every trace
FIG_SIG = """el => JSON.stringify({title: (el.querySelector('.gtitle') || {}).textContent || null,
  traces: (el.data || []).map(t => [t.type, t.name, Array.from(t.x || []), Array.from(t.y || []), t.cells ? t.cells.values : null])})"""

@pytest.mark.slow
def test_tutorial_runs_in_jupyterlab_and_stepper_steps(tmp_path, browser_ok):
    root = tmp_path/'nbs'; root.mkdir()
    shutil.copy(TUTORIAL, root/TUTORIAL.name)
    art = artifacts_dir(tmp_path)
    with jupyterlab(root, tmp_path/'jupyter') as url, chromium() as (page, problems):
        blocked = []
        _loopback_only(page, blocked)
        try:
            page.goto(f'{url}/lab/tree/{TUTORIAL.name}', wait_until='domcontentloaded', timeout=120_000)
            until(lambda: (s := page.evaluate(NB_STATE))['kernel'] == 'idle' and s['prompts'], 180, 'the notebook to open with an idle kernel')
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            t0 = time.time()
            def finished():
                s = page.evaluate(NB_STATE)
                if s['kernel'] != 'idle' or any('*' in p for p in s['prompts']): return None
                if all(re.fullmatch(r'\[\d+\]:', p) for p in s['prompts']): return s
                return s if page.evaluate(NB_ERRORS) else None   # run-all stops at an error: the rest stay "[ ]:"
            s = until(finished, RUN_TIMEOUT, 'Run All Cells to finish (kernel idle, every cell numbered)', every=1)
            print(f"run all: {time.time() - t0:.0f} s, prompts {s['prompts']}")
            faults = []   # everything wrong that the page shows, reported together
            errors = page.evaluate(NB_ERRORS)
            if errors: faults.append('the tutorial shows error output:\n' + '\n---\n'.join(errors))
            if not re.fullmatch(r'\[\d+\]:', s['prompts'][-1]):   # Run All stopped early: nothing further to check
                pytest.fail('\n\n'.join(faults + [f"the last cell has no execution count: {s['prompts']}"]))

            # the stepper: the one output area holding a "Step" button
            step_btn = page.get_by_role('button', name='Step', exact=True)
            stepper = page.locator('.jp-OutputArea-output').filter(has=step_btn)
            until(lambda: stepper.count() == 1 and stepper.locator('.e3-tok').count() > 0, 60,
                  'the stepper widget (one output with a Step button) and its token strip')
            status, figure = stepper.locator('.widget-html-content').first, stepper.locator('.js-plotly-plot')
            if status.inner_text().strip().lower().startswith('error'): faults.append(f"stepper status shows an error: {status.inner_text()}")
            # the verify phase is what a Step advances: show it, then step
            stepper.locator('.widget-dropdown').filter(has_text='phase').locator('select').select_option('verify')
            sig = lambda: figure.evaluate(FIG_SIG) if figure.count() == 1 else None
            t1 = time.time()
            while time.time() - t1 < 20 and 'verify' not in (sig() or ''): time.sleep(0.5)
            n_before, fig_before, status_before = stepper.locator('.e3-tok').count(), sig(), status.inner_text()
            stepper.scroll_into_view_if_needed()
            page.screenshot(path=str(art/'tutorial_stepper_before_step.png'))
            step_btn.click()
            until(lambda: status.inner_text() != status_before, 120, f'the stepper status to change after Step (was {status_before!r})')
            t1 = time.time()
            while time.time() - t1 < 30 and (stepper.locator('.e3-tok').count() <= n_before or sig() in (None, fig_before)): time.sleep(0.5)
            n_after, status_after, fig_after = stepper.locator('.e3-tok').count(), status.inner_text(), sig()
            shot = art/'tutorial_stepper_after_step.png'
            stepper.scroll_into_view_if_needed(); page.screenshot(path=str(shot))
            print(f"tokens {n_before} -> {n_after}; status {status_before!r} -> {status_after!r}; screenshot: {shot}")
            if not re.search(r'cycle \d+: accepted \d+', status_after): faults.append(f"after Step the status reads {status_after!r}")
            if n_after <= n_before: faults.append(f"Step did not add tokens to the strip ({n_before} -> {n_after})")
            if fig_after is None: faults.append("after Step the stepper shows no pipeline figure (its figure panel is empty)")
            elif 'verify' not in fig_after: faults.append(f"the stepper's figure does not show the selected verify phase: {fig_after[:200]}")
            elif fig_after == fig_before: faults.append(f"the stepper's pipeline figure did not change after Step (status now {status_after!r})")
            if blocked: faults.append(f"the page tried to reach the network: {blocked[:5]}")
            assert not faults, '\n\n'.join(faults)
        finally:
            page.screenshot(path=str(art/'tutorial_final.png'))
            print(f"screenshots in {art}; browser problems: {problems[:10]}")

def _report_kernels(cwd:Path)->list:
    "Pids of live kernels started for a report written to `cwd` (papermill runs the kernel there)."
    out = []
    for p in Path('/proc').iterdir():
        if not p.name.isdigit(): continue
        try:
            if b'ipykernel' in (p/'cmdline').read_bytes() and Path(os.readlink(p/'cwd')) == cwd.resolve(): out.append(int(p.name))
        except OSError: pass
    return out

@pytest.mark.slow
def test_report_html_renders_offline(tmp_path, browser_ok):
    out = tmp_path/'report.html'
    t0 = time.time()
    r = subprocess.run(cli() + ['report', '--out', str(out)], capture_output=True, text=True, timeout=900)
    print(f"report: exit {r.returncode} in {time.time() - t0:.0f} s")
    assert r.returncode == 0, f"report failed:\n{r.stderr[-3000:]}"
    cells = re.findall(r'^report: cell (\d+)/(\d+) \(\d+ s\): \S', r.stderr, re.M)
    assert cells and cells[-1][0] == cells[-1][1], f"the terminal should show every cell's progress:\n{r.stderr[-2000:]}"
    assert not _errors(r.stderr), r.stderr[-2000:]
    assert out.exists() and out.with_suffix('.ipynb').exists()
    art = artifacts_dir(tmp_path)
    with chromium() as (page, problems):
        blocked = []
        def route(rt):
            if rt.request.url.startswith(('http:', 'https:')): blocked.append(rt.request.url); rt.abort()
            else: rt.continue_()
        page.route('**/*', route)
        page.goto(out.as_uri(), wait_until='load', timeout=120_000)
        plots = page.locator('.js-plotly-plot')
        until(lambda: plots.count() >= 5 and page.locator('.js-plotly-plot .main-svg').count() >= plots.count(), 60,
              'at least 5 plotly figures with an SVG')
        page.wait_for_timeout(1000)
        shot = art/'report.png'
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}; {plots.count()} figures; {len(blocked)} network requests blocked")
        sizes = plots.evaluate_all("els => els.map(e => { const r = e.getBoundingClientRect(); return [r.width, r.height, "
                                   "e.querySelectorAll('.main-svg').length, e.querySelectorAll('.trace, .table').length]; })")
        for i, (w, h, svgs, traces) in enumerate(sizes):
            assert w > 100 and h > 100 and svgs >= 1 and traces >= 1, f"figure {i} not drawn: {w}x{h}, {svgs} svg, {traces} traces"
        nb = json.loads(out.with_suffix('.ipynb').read_text())
        n_figs = sum('application/vnd.plotly.v1+json' in o.get('data', {}) for c in nb['cells'] for o in c.get('outputs', []))
        # what a person reads: numbers rounded, the acceptance section explains why its accept length is not the doctor's
        printed = '\n'.join(''.join(o.get('text', '')) for c in nb['cells'] for o in c.get('outputs', []) if o.get('output_type') == 'stream')
        long_floats = re.findall(r'[^ ]*\d\.\d{7,}[^ ]*', printed)
        assert not long_floats, f"unrounded numbers in the report: {long_floats[:5]}"
        assert re.search(r'accept length: +\d\.\d\d  \(95% CI', printed) and 'per-position acceptance: 1:' in printed, printed[-2000:]
        md = '\n'.join(''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'markdown')
        assert re.search(r"doctor's\s+accept lengths above come from a smaller run", md), 'the two accept lengths are not explained'
        assert len(sizes) == n_figs, f"the page shows {len(sizes)} figures, the executed notebook has {n_figs}"
        assert not page.locator('.jp-OutputArea-output').filter(has_text='Traceback (most recent call last)').count()
        faults = []
        if errors := [p for p in problems if p.startswith('pageerror')]: faults.append(f"script errors in the report page: {errors}")
        bars = page.locator('.jp-OutputArea-output').filter(has_text=re.compile(r'\d+%\|'))
        if bars.count(): faults.append(f"the report shows progress bars: {[t[:80] for t in bars.all_inner_texts()]}")
        if blocked: faults.append(f"the report is not self-contained: offline it fails to load {sorted(set(blocked))}")
        assert not faults, '\n'.join(faults)

def test_report_bad_target_fails_in_one_line(tmp_path):
    out = tmp_path/'r.html'
    r = subprocess.run(cli() + ['report', '--target', '/nonexistent', '--out', str(out), '--timeout', '300'],
                       capture_output=True, text=True, timeout=420)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, f"bad input must exit 2, got {r.returncode}:\n{r.stderr[-3000:]}"
    assert len(lines) == 1 and '/nonexistent' in lines[0], f"expected one error line naming the path, got:\n{r.stderr[-3000:]}"
    assert list(tmp_path.iterdir()) == [], 'a bad input is refused before anything is written'
    assert not _report_kernels(tmp_path)

def _errors(stderr:str)->list:
    "The error lines of a report run (its progress lines, 'report: cell i/n ...', are not errors)."
    return [l for l in stderr.strip().splitlines() if not l.startswith('report: ')]

@pytest.mark.slow
def test_report_timeout_is_bounded(tmp_path):
    out = tmp_path/'t.html'
    t0 = time.time()
    r = subprocess.run(cli() + ['report', '-p', 'cycles', '100000', '--out', str(out), '--timeout', '20'],
                       capture_output=True, text=True, timeout=180)
    wall = time.time() - t0
    lines = _errors(r.stderr)
    assert r.returncode == 1 and wall < 60, f"exit {r.returncode} after {wall:.0f} s"
    assert len(lines) == 1 and re.search(r'\b20 ?s\b', lines[0]), f"expected one line naming the 20 s limit, got:\n{r.stderr[-3000:]}"
    assert re.search(r'^report: cell \d+/\d+ \(\d+ s\): ', r.stderr, re.M), f"no progress lines:\n{r.stderr[-2000:]}"
    assert out.with_suffix('.ipynb').exists() and not out.exists()
    # the kernel must not outlive the report (it would keep stepping 100000 cycles)
    until(lambda: not _report_kernels(tmp_path), 15, 'the report kernel to exit after the timeout')
