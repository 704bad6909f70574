"""Run the eagle3-workbench benchmarks and write BENCHMARKS.md.

    python benchmarks/run.py [--quick] [--out BENCHMARKS.md] [--only NAME ...] [--json FILE] [--threads N]

Each benchmark is `benchmarks/bench_<name>.py` with `run(quick: bool) -> dict` returning
`{'title', 'question', 'setup', 'rows': [{metric, value, unit, spread, target, met, note}, ...]}`.
"""
from __future__ import annotations
import argparse, datetime, importlib, json, os, platform, subprocess, sys, time, traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, TINY_ENV, g, row  # noqa: E402

BENCHMARKS = ('load', 'capture', 'forward_hooks', 'cycle', 'scale', 'acceptance', 'first_figure', 'doctor', 'recording', 'report', 'cli_help', 'threads')

# ----------------------------------------------------------------------------------------------------------------------
def machine()->dict:
    "Cores, CPU model and RAM of this machine; versions of python, torch, transformers, the package (and nnsight)."
    cpu = '?'
    try:
        for l in Path('/proc/cpuinfo').read_text().splitlines():
            if l.startswith('model name'): cpu = l.split(':', 1)[1].strip(); break
    except OSError: cpu = platform.processor() or '?'
    ram = None
    try:
        for l in Path('/proc/meminfo').read_text().splitlines():
            if l.startswith('MemTotal'): ram = int(l.split()[1]) * 1024; break
    except OSError: pass
    import torch, transformers, eagle3_workbench
    v = dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
             eagle3_workbench=getattr(eagle3_workbench, '__version__', '?'))
    try:
        import nnsight; v['nnsight'] = getattr(nnsight, '__version__', '?')
    except Exception: v['nnsight'] = 'not installed'
    return dict(load=load_average(), cores=os.cpu_count(), cpu=cpu, ram_gib=round(ram / 2**30, 1) if ram else None, threads=torch.get_num_threads(),
                platform=platform.platform(), versions=v)

def host_speed()->str:
    "Seconds for a fixed pure-Python loop and a fixed fp32 matmul: the same code on a slower or busier host reads higher."
    import torch
    t0 = time.perf_counter(); s = 0
    for i in range(5_000_000): s += i
    loop = time.perf_counter() - t0
    a = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    a @ a
    t0 = time.perf_counter()
    for _ in range(10): a @ a
    mm = (time.perf_counter() - t0) / 10
    t0 = time.perf_counter()
    subprocess.run([sys.executable, '-c', 'import torch'], check=True)
    imp = time.perf_counter() - t0
    return f"Python loop of 5M additions {loop:.2f} s, fp32 1024^3 matmul {mm * 1e3:.1f} ms, `import torch` in a new interpreter {imp:.2f} s"

def load_average()->str:
    "The 1-minute load average (other processes competing for the cores skew timings)."
    try: return Path('/proc/loadavg').read_text().split()[0]
    except OSError: return '?'

def measured(r:dict)->str:
    if r['value'] is None: return 'n/a'
    s = g(r['value']) + (f" {r['unit']}" if r['unit'] and r['unit'] != 'x' else ('x' if r['unit'] == 'x' else ''))
    return s + (f" ({r['spread']})" if r['spread'] else '')

def met_text(m)->str: return {True: 'yes', False: '**no**', None: ''}[m]

def cell(s)->str: return str(s).replace('|', '\\|').replace('\n', ' ')

def table(rows:list)->str:
    L = ['| metric | measured | target | met | note |', '|---|---|---|---|---|']
    L += [f"| {cell(r['metric'])} | {cell(measured(r))} | {cell(r['target'])} | {met_text(r['met'])} | {cell(r['note'])} |" for r in rows]
    return '\n'.join(L)

def console(name:str, res:dict)->str:
    "A plain-text table for the terminal."
    rows = [(r['metric'], measured(r), r['target'], {True: 'yes', False: 'NO', None: ''}[r['met']]) for r in res['rows']]
    w = [max(len(x[i]) for x in rows + [('metric', 'measured', 'target', 'met')]) for i in range(4)]
    w[1] = min(w[1], 60)
    out = [f"== {name}: {res.get('title', name)} ({res.get('seconds', 0):.1f} s)",
           '  '.join(h.ljust(w[i]) for i, h in enumerate(('metric', 'measured', 'target', 'met')))]
    out += ['  '.join(str(c)[:w[i]].ljust(w[i]) for i, c in enumerate(x)).rstrip() for x in rows]
    return '\n'.join(out)

def markdown(results:dict, info:dict, args, total:float)->str:
    from common import zoo
    v = info['versions']
    missed = [(n, r) for n, res in results.items() for r in res['rows'] if r['met'] is False]
    L = ['# Benchmarks', '',
         f"Written by `python benchmarks/run.py{' --quick' if args.quick else ''}"
         f"{' --only ' + ' '.join(args.only) if args.only else ''}{f' --threads {args.threads}' if args.threads else ''}` on {info['date']}"
         f"{' (quick mode: fewer repeats and smaller inputs; numbers are indicative only)' if args.quick else ''}.", '',
         f"- machine: {info['cores']} cores, {info['cpu']}, {info['ram_gib']} GiB RAM; torch threads {info['threads']}; {info['platform']}",
         f"- versions: python {v['python']}, torch {v['torch']}, transformers {v['transformers']}, eagle3-workbench {v['eagle3_workbench']}, "
         f"nnsight {v['nnsight']}",
         f"- zoo: {zoo().label}",
         f"- load average (1 min) at start / end: {info['load']} / {info['load_end']} (above 0 means other processes shared the cores)",
         f"- host speed at start / end: {info['speed']} / {info['speed_end']} (compare runs on this before comparing absolute times)",
         f"- total wall time: {total:.0f} s", '',
         'Each timing is the median over repeats with its spread (interquartile range, min-max range, number of repeats). '
         'Ratios are measured side by side in one run: the variants are interleaved in every repeat (order rotated) and the '
         'ratio is taken per repeat, then the median. `n/a` rows could not be measured; the note says why.', '']
    L += ['## Targets missed', '']
    L += [f"- {n}: {r['metric']}: {measured(r)} against {r['target']}. {r['note']}" for n, r in missed] or ['- none']
    L.append('')
    for name, res in results.items():
        L += [f"## {res.get('title', name)} (`{name}`, {res.get('seconds', 0):.0f} s)", '']
        if res.get('question'): L += [res['question'], '']
        if res.get('setup'): L += [f"Setup: {res['setup']}", '']
        L += [table(res['rows']), '']
    return '\n'.join(L)

# ----------------------------------------------------------------------------------------------------------------------
def main(argv=None)->int:
    ap = argparse.ArgumentParser(description='Run the eagle3-workbench benchmarks and write a markdown table.')
    ap.add_argument('--quick', action='store_true', help='fewer repeats and smaller inputs (about 2 minutes)')
    ap.add_argument('--tiny', action='store_true', help="the smallest sizes and no busy processes: proves every benchmark runs "
                                                        "and prints its table (the test suite's check); the numbers mean nothing")
    ap.add_argument('--out', default=str(ROOT/'BENCHMARKS.md'), help='markdown file to write (default: BENCHMARKS.md at the repo root)')
    ap.add_argument('--only', nargs='+', metavar='NAME', choices=BENCHMARKS, help=f"run only these: {', '.join(BENCHMARKS)}")
    ap.add_argument('--json', help='also write the results as JSON to this file')
    ap.add_argument('--threads', type=int, default=None,
                    help='torch threads (default: one per core; 1 with --quick, where a second thread on a shared machine '
                         'can make the run many times slower)')
    args = ap.parse_args(argv)
    if args.tiny: args.quick = True; os.environ[TINY_ENV] = '1'   # read by `common.tiny()`
    # a benchmark measures cold work: passes and scores kept by a test session or the shell ($EAGLE3_RECORDING_CACHE) would
    # make it warm; --tiny only proves the benchmarks run, and keeps the suite's
    else: os.environ.pop('EAGLE3_RECORDING_CACHE', None)
    import torch
    torch.set_num_threads(args.threads or (1 if args.quick else os.cpu_count() or 1))
    os.environ.setdefault('TQDM_DISABLE', '1')
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    except Exception: pass
    info = machine() | dict(date=datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z'), speed=host_speed())
    print(f"machine: {info['cores']} cores, {info['cpu']}, {info['ram_gib']} GiB; {info['versions']}; {info['speed']}", flush=True)
    results, errors, t_all = {}, [], time.perf_counter()
    for name in args.only or BENCHMARKS:
        t0 = time.perf_counter()
        try:
            res = importlib.import_module(f"bench_{name}").run(quick=args.quick)
        except Exception as e:
            traceback.print_exc()
            errors.append(name)
            res = dict(title=name, rows=[row(f"{name}: benchmark failed", None, note=f"{type(e).__name__}: {str(e)[:400]}")])
        res['seconds'] = time.perf_counter() - t0
        results[name] = res
        print(console(name, res), flush=True)
    total = time.perf_counter() - t_all
    info['load_end'], info['speed_end'] = load_average(), host_speed() if not args.tiny else 'not measured again (--tiny)'
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(results, info, args, total) + '\n')
    print(f"wrote {out} ({total:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=info, quick=args.quick, seconds=total, errors=errors,
                                                   benchmarks=results), indent=1, default=str))
    return 1 if errors else 0

if __name__ == '__main__':
    sys.exit(main())
