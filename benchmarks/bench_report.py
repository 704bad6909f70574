"""The report end to end: `eagle3-workbench report --out X.html` from a cold process, when the package has a report runner."""
from __future__ import annotations
import subprocess, sys, tempfile, time
from pathlib import Path
from common import zoo, med, spread, row, unavailable, subprocess_env

TITLE = 'report end to end'
QUESTION = 'How long does the full HTML report take from the command line?'

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

def run(quick:bool=False)->dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)/'report.html'
        argv, how = report_command(out, quick)
        if argv is None:
            return dict(title=TITLE, question=QUESTION, setup='`eagle3-workbench report --out X.html` in a fresh process.',
                        rows=[unavailable('eagle3-workbench report --out X.html (cold)', how, '<= 90 s')])
        walls = []
        for _ in range(1):
            a = time.perf_counter()
            p = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), timeout=600)
            walls.append(time.perf_counter() - a)
            if p.returncode not in (0, 1) or not out.exists():
                raise RuntimeError(f"report failed (rc {p.returncode}, output written: {out.exists()}): {p.stderr[-800:]}")
        size = out.stat().st_size
    w = med(walls)
    cmd = 'eagle3-workbench ' + ' '.join('X.html' if x == str(out) else x for x in argv[3:])
    return dict(title=TITLE, question=QUESTION, setup=f"`{cmd}` in a fresh process (one run), wall time by the parent"
                                                      + (' (quick: reduced template parameters, not comparable)' if quick else '') + '.',
                rows=[row('eagle3-workbench report --out X.html (cold)', w, 's', spread(walls), '<= 90 s', w <= 90,
                          f"exit code {p.returncode}; {size:,} bytes of HTML")])
