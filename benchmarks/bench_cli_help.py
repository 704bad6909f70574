"""`eagle3-workbench --help`: answered before torch is imported, timed against a bare `python -c pass`."""
from __future__ import annotations
import shutil, subprocess, sys
from common import interleaved, med, spread, row, subprocess_env, tiny

TITLE = 'CLI help'
QUESTION = "How long does `eagle3-workbench --help` (and a subcommand's help) take, next to starting Python at all?"

def run(quick:bool=False)->dict:
    env = subprocess_env()
    exe = shutil.which('eagle3-workbench')
    cli = [exe] if exe else [sys.executable, '-m', 'eagle3_workbench.cli']
    call = lambda argv: (lambda: subprocess.run(argv, capture_output=True, env=env, check=True))
    t = interleaved({'python -c pass': call([sys.executable, '-c', 'pass']), '--help': call(cli + ['--help']),
                     'run --help': call(cli + ['run', '--help']), 'report --help': call(cli + ['report', '--help'])},
                    repeats=2 if tiny() else 5 if quick else 15)
    base = med(t['python -c pass'])
    rows = [row('python -c pass', base, 's', spread(t['python -c pass']), note='the floor: starting the interpreter')]
    for k in ('--help', 'run --help', 'report --help'):
        m = med(t[k])
        rows.append(row(f"eagle3-workbench {k}", m, 's', spread(t[k]), '< 1 s', m < 1,
                        f"{m / base:.1f}x python -c pass; {'the installed console script' if exe else 'via python -m'}"))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"each command in a fresh process, {2 if tiny() else 5 if quick else 15} interleaved repeats; idle or not, as the host is")
