"""The report and the tutorial end to end, as a user runs them, on an idle machine and with two other processes busy.

`eagle3-workbench report --out X.html` from a cold process, and the tutorial (`nbs/index.ipynb`) executed top to
bottom in a fresh kernel (`jupyter nbconvert --execute`, what Run All does without the browser). "Busy" is the
condition bench_threads measures: two other processes spinning on the cores for the whole run. The thread count is
the product's own choice (no OMP_NUM_THREADS passed down), as for a user.
"""
from __future__ import annotations
import subprocess, sys, tempfile, time
from pathlib import Path
from common import ROOT, zoo, row, unavailable, subprocess_env, busy

TITLE = 'report and tutorial end to end, idle and busy'
QUESTION = 'How long do the HTML report and the tutorial take, on an idle machine and with two other processes busy?'
TARGETS = {'report': ('<= 30 s', 30), 'tutorial': ('<= 60 s', 60)}   # idle; busy: at most twice that (two more processes on 2 cores)

def report_command(out:Path, quick:bool=False)->tuple:
    "(argv, how) for the package's report runner, or (None, why not)."
    try:
        from eagle3_workbench.cli import parser
        ap = parser()
        sub = next(a for a in ap._actions if getattr(a, 'choices', None) and isinstance(a.choices, dict))
        rp = sub.choices.get('report')
    except Exception as e:
        return None, f"not available yet (cannot read the CLI: {type(e).__name__}: {e})"
    if rp is None:
        return None, f"not available yet: eagle3-workbench has no 'report' command (commands: {', '.join(sub.choices)})"
    opts = {o for a in rp._actions for o in a.option_strings}
    argv = [sys.executable, '-c', 'import sys; from eagle3_workbench.cli import main; sys.exit(main())', 'report', '--out', str(out)]
    z = zoo()
    if not z.packaged:  # the miniature zoo: point the report at it when the command lets us
        if '--target' in opts: argv += ['--target', z.spec('tiny-dsv3')]
        if '--draft' in opts: argv += ['--draft', z.spec('tiny-dsv3-eagle3')]
        if '-p' in opts: argv += ['-p', 'prompts', str(z.path('prompts.jsonl'))]
    if quick and '-p' in opts:  # a smoke run: fewer prompts and tokens
        argv += ['-p', 'n_prompts', '2', '-p', 'max_new_tokens', '8', '-p', 'cycles', '1']
    return argv, 'eagle3-workbench report'

def tutorial_command(out:Path)->list:
    "Execute the tutorial in a fresh kernel, as Run All does."
    return [sys.executable, '-m', 'jupyter', 'nbconvert', '--to', 'notebook', '--execute', '--ExecutePreprocessor.timeout=900',
            str(ROOT/'nbs'/'index.ipynb'), '--output', str(out)]

def _env()->dict:
    return {k: v for k, v in subprocess_env().items() if k not in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')}   # the product chooses

def _timed(argv:list, made:Path)->float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=900, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode not in (0, 1) or not made.exists():
        raise RuntimeError(f"{' '.join(argv[3:6])}... failed (rc {p.returncode}, {made.name} written: {made.exists()}): {p.stderr[-800:]}")
    return dt

def run(quick:bool=False)->dict:
    rows, load = [], lambda: Path('/proc/loadavg').read_text().split()[0] if Path('/proc/loadavg').exists() else '?'
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)/'report.html'
        argv, how = report_command(out, quick)
        jobs = {'report': (argv, out)} if argv is not None else {}
        if not quick and zoo().packaged: jobs['tutorial'] = (tutorial_command(Path(tmp)/'tutorial.ipynb'), Path(tmp)/'tutorial.ipynb')
        if argv is None: rows.append(unavailable('eagle3-workbench report --out X.html (cold)', how, TARGETS['report'][0]))
        for cond in ('idle',) if quick else ('idle', 'busy'):
            for name, (cmd, made) in jobs.items():
                made.unlink(missing_ok=True)
                before = load()
                if cond == 'busy':
                    with busy(2): t = _timed(cmd, made)
                else: t = _timed(cmd, made)
                target, limit = TARGETS[name]
                if cond == 'busy': target, limit = f"<= {2 * limit} s with two busy processes", 2 * limit
                what = 'eagle3-workbench report --out X.html (cold)' if name == 'report' else 'tutorial nbs/index.ipynb, fresh kernel'
                rows.append(row(f"{what}, {cond}", t, 's', 'n=1', target, None if quick else t <= limit,
                                f"1-minute load average before: {before}" + (' (quick: reduced parameters, not comparable)' if quick and name == 'report' else '')))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup="Each command once per condition in a fresh process, wall time by the parent; busy: two other processes spinning "
                      "on the cores (`common.busy`), as bench_threads measures. The load average before each run says what else was running.")
