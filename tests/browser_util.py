"Helpers for the real-browser tests: a throwaway JupyterLab server on loopback, headless Chromium, the CLI."
import contextlib, json, os, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path

CHROMIUM = os.environ.get('E3_CHROMIUM', '/usr/bin/chromium')
CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
                 '--disable-sync', '--no-first-run', '--disable-quic']

def free_port()->int:
    "A TCP port on 127.0.0.1 that nothing listens on right now."
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

def browser_missing()->str|None:
    "Why the browser tests cannot run here, or None."
    try: import playwright.sync_api  # noqa: F401
    except ImportError: return 'playwright is not installed (pip install playwright)'
    if not os.access(CHROMIUM, os.X_OK): return f'no Chromium at {CHROMIUM} (apt-get install chromium)'
    return None

def cli()->list:
    "The `eagle3-workbench` command (the console script when installed, else the same entry point via python)."
    exe = shutil.which('eagle3-workbench')
    return [exe] if exe else [sys.executable, '-c', 'import sys; from eagle3_workbench.cli import main; sys.exit(main())']

def _write_json(p:Path, d:dict):
    p.parent.mkdir(parents=True, exist_ok=True); p.write_text(json.dumps(d))

@contextlib.contextmanager
def jupyterlab(root, home, timeout:float=90, args=()):
    "Run JupyterLab on a free loopback port over `root`, with no token (and any further command-line `args`); yield its base URL; always stop it."
    home = Path(home); port = free_port()
    settings = home/'lab-settings'
    # every cell in the DOM (no virtual scrolling), and no news/update checks (there is no network)
    _write_json(settings/'@jupyterlab/notebook-extension/tracker.jupyterlab-settings', {'windowingMode': 'none'})
    _write_json(settings/'@jupyterlab/apputils-extension/notification.jupyterlab-settings', {'fetchNews': 'false', 'checkForUpdates': False})
    env = {**os.environ, 'JUPYTER_CONFIG_DIR': str(home/'config'), 'JUPYTER_RUNTIME_DIR': str(home/'runtime'),
           'JUPYTERLAB_SETTINGS_DIR': str(settings), 'JUPYTERLAB_WORKSPACES_DIR': str(home/'workspaces')}
    cmd = [sys.executable, '-m', 'jupyterlab', '--no-browser', '--ServerApp.ip=127.0.0.1', f'--ServerApp.port={port}',
           '--ServerApp.port_retries=0', "--ServerApp.token=", "--ServerApp.password=", '--ServerApp.disable_check_xsrf=True',
           f'--ServerApp.root_dir={root}', '--LabApp.expose_app_in_browser=True', '--LabApp.news_url=None',
           '--LabApp.extension_manager=readonly', '--ServerApp.allow_root=True', *args]
    log = open(home/'jupyterlab.log', 'w')
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        t0 = time.time()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f'JupyterLab exited with {proc.returncode}:\n' + (home/'jupyterlab.log').read_text()[-3000:])
            try:
                with urllib.request.urlopen(f'{url}/api/status', timeout=2) as r:
                    if r.status == 200: break
            except OSError: pass
            if time.time() - t0 > timeout:
                raise RuntimeError(f'JupyterLab did not answer on {url} within {timeout} s:\n' + (home/'jupyterlab.log').read_text()[-3000:])
            time.sleep(0.5)
        yield url
    finally:
        # the server and its kernels share the session started above: stop the whole group
        with contextlib.suppress(ProcessLookupError): os.killpg(proc.pid, 15)
        try: proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError): os.killpg(proc.pid, 9)
            proc.wait(5)
        log.close()

@contextlib.contextmanager
def chromium(viewport=(1400, 1000)):
    "A headless Chromium page (Debian's browser driven by Playwright); yields (page, problems) where problems collects console errors."
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = b.new_page(viewport=dict(width=viewport[0], height=viewport[1]))
            problems = []
            page.on('console', lambda m: problems.append(f'console.{m.type}: {m.text}') if m.type == 'error' else None)
            page.on('pageerror', lambda e: problems.append(f'pageerror: {e}'))
            page.on('requestfailed', lambda r: problems.append(f'requestfailed: {r.url} ({r.failure})'))
            yield page, problems
        finally: b.close()

def artifacts_dir(tmp_path)->Path:
    "Where screenshots go: $E3_ARTIFACTS when set, else the test's tmp_path."
    d = Path(os.environ.get('E3_ARTIFACTS') or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d
