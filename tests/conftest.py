"""pytest's configuration for the suite: threads, the shared target-pass cache, the test order, the forked CLI. The builders
the tests use (tiny targets and drafts, planted faults) are the package's testing kit, `eagle3_workbench.testing`."""
import os
from pathlib import Path
# The models here are tiny: one thread per process is several times faster than two fighting over 2 cores
# (measured: a 32-token speculative run took 4.4 s with 1 thread, 28.9 s with 2 while another process ran).
# Subprocesses (nbdev_test, papermill kernels, the CLI) inherit the variable.
os.environ.setdefault('OMP_NUM_THREADS', '1')
# The commands the tests run (eagle3-workbench, nbdev_test, jupyter) are the ones installed beside this interpreter, also
# when pytest is started as `.venv/bin/python -m pytest` without activating the environment.
import sys
os.environ['PATH'] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get('PATH', '')])
import pytest, torch
torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))

FIXTURES = Path(__file__).parent/'fixtures'

def pytest_configure(config):
    "One target pass per zoo target and prompt set for the whole run: tests, notebooks and CLI subprocesses share a cache folder."
    import atexit, shutil, tempfile
    if not os.environ.get('EAGLE3_RECORDING_CACHE'):
        d = tempfile.mkdtemp(prefix='e3w-passes-')
        os.environ['EAGLE3_RECORDING_CACHE'] = d   # scores.CACHE_ENV; subprocesses inherit it
        atexit.register(shutil.rmtree, d, True)
    fetch_sglang_source()

def fetch_sglang_source():
    "SGLang's three debugging files for tests/test_sglang_source.py: the pinned wheel's, downloaded once into .ci/cache when no other source is given."
    import sglang_source as s
    src, why = s.sglang_source(), ''
    if src is None: src, why = s.fetch_pinned()
    if src is None: os.environ[s.UNAVAILABLE_ENV] = why          # xdist's workers, started later, inherit it and skip saying why
    else: os.environ.setdefault('EAGLE3_SGLANG_SRC', str(src))   # also for the benchmarks the suite runs as subprocesses

# The environment of a command a test runs as a user would: one thread, no model hub.
CLI_ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1'}

@pytest.fixture(scope='session')
def forked_cli():
    "`python -m eagle3_workbench.cli ARGS` in a process of its own, forked from one interpreter per test process that imported torch once (tests/forked_cli.py)."
    from forked_cli import ForkedCLI
    c = ForkedCLI(CLI_ENV)
    yield c
    c.close()

# The files that take longest, longest first (seconds on the 2-core machine, summed from `--durations=0` of a whole run;
# the numbers only order them). Under `--dist loadfile` each worker takes whole files in collection order, so the
# longest start first and the short ones fill in behind them; in xdist's default order (most tests first) the four
# browser tests came last and one worker ran them alone for the last minutes.
LONGEST_FIRST = ('test_notebooks.py', 'test_doctor.py', 'test_browser.py', 'test_browser_recording.py', 'test_bad_inputs.py', 'test_benchmarks.py',
                 'test_recording.py', 'test_architectures.py', 'test_engine.py', 'test_widgets.py', 'test_failure_classes.py', 'test_cli_json.py',
                 'test_zoo_deep.py', 'test_sglang_spec.py', 'test_doors.py', 'test_served_tokens.py', 'test_vllm_spec.py')

def pytest_collection_modifyitems(config, items):
    "Longest files first, each file's tests in their own order (a stable sort)."
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))

@pytest.fixture
def llama_dir(tmp_path):
    from eagle3_workbench.testing import save_tiny_target
    return save_tiny_target(tmp_path/'target', 'llama')
