"""The doors a user walks in by: `import eagle3_workbench as e3` (its names, each its module's own object, imported when
first used; the import itself light), and the command line's cheapest answers (`zoo path`) without torch."""
import subprocess, sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

def fresh(code:str)->str:
    "stdout of `code` run in a fresh interpreter (nothing imported before it)."
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=ROOT).stdout

def test_top_level_names_are_the_modules_objects():
    "Every name the front door offers is the very object its module defines (written out here, not read from the table)."
    import eagle3_workbench as e3
    from eagle3_workbench import loading, recording, doctor, widgets, engine, observed, wiring, reports, engines, capture
    expected = dict(load_pair=loading.load_pair, recorded_pair=recording.recorded_pair, open_recording=recording.open_recording,
                    record=recording.record, diagnose=doctor.diagnose, stepper=widgets.stepper, run=engine.run_prompts,
                    compare=observed.compare_deployment, wiring=wiring, wiring_table=wiring.wiring_table, report=reports.run_report,
                    Engine=engines.Engine, Capture=capture.Capture)
    for name, obj in expected.items(): assert getattr(e3, name) is obj, name
    assert set(expected) == set(e3.ENTRY_POINTS) and set(expected) <= set(dir(e3))
    assert not hasattr(e3, 'no_such_name')

def test_import_is_light():
    "A fresh `import eagle3_workbench` imports no torch or transformers and takes under 0.3 s (best of three: a busy machine stalls one)."
    probe = ("import sys, time; t = time.perf_counter(); import eagle3_workbench; dt = time.perf_counter() - t; "
             "print(dt, 'torch' in sys.modules, 'transformers' in sys.modules)")
    runs = [fresh(probe).split() for _ in range(3)]
    assert all(r[1:] == ['False', 'False'] for r in runs), runs
    assert min(float(r[0]) for r in runs) < 0.3, runs

def test_names_import_their_module_when_used():
    "The engine registry needs no torch; the loader does, and is imported only when `e3.load_pair` is asked for."
    out = fresh("import sys; import eagle3_workbench as e3; e3.Engine; a = 'torch' in sys.modules; "
                "b = 'eagle3_workbench.loading' in sys.modules; e3.load_pair; "
                "print(a, b, 'torch' in sys.modules, 'eagle3_workbench.loading' in sys.modules)")
    assert out.split() == ['False', 'False', 'True', 'True'], out

def test_zoo_path_imports_no_torch():
    "`eagle3-workbench zoo path` prints the zoo's folder without importing torch or transformers, well within seconds."
    import time
    from eagle3_workbench.target import zoo_root
    out = fresh("import sys; from eagle3_workbench.cli import main; rc = main(['zoo', 'path']); "
                "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)").splitlines()
    assert out[0] == str(zoo_root()) and out[1].split() == ['0', 'False', 'False'], out
    t = time.perf_counter()
    cli = subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', 'zoo', 'path'], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0 and cli.stdout.strip() == str(zoo_root()) and time.perf_counter() - t < 5, cli
