"Every chapter in nbs/ is also a test: run each notebook top to bottom as nbdev_test does."
import subprocess, sys
from pathlib import Path
import pytest

NBS = sorted((Path(__file__).parent.parent/'nbs').glob('[0-9]*.ipynb'))

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook_runs(nb):
    r = subprocess.run(['nbdev_test', '--path', str(nb), '--do_print'], capture_output=True, text=True,
                       cwd=nb.parent.parent, timeout=900)
    assert r.returncode == 0, f"{nb.name} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
