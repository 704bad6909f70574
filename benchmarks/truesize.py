"""The doctor at the founding case's true size, from a recording on disk: a 61-layer, 7168-wide target's resid[0..61]
written through the recording writer, a real-width random-init draft (the public SpecForge DeepSeek-V3 EAGLE-3 draft's
config: MLP 40960, 56 heads, 8 KV heads, 32,000-token draft vocabulary), and a true answer with close competitors.

The states are a random walk over layers (resid[k+1] = resid[k] + a step, so neighbouring layers correlate as a residual
stream's do); the target's logits at each position are the draft's own logits fed a planted wiring, sharpened, plus
noise, and its greedy token their argmax. So the planted wiring fits best and its neighbours nearly tie. The doctor
(`diagnose`, accept lengths off: the recording holds no continuation) runs in a fresh process from the folders on disk;
today's search (every candidate on every prompt, float32) is timed on the same recording on a few wirings and
extrapolated to the wirings the search explores; with `--compare-today` the search before racing (a coordinate search
screened on a quarter of the prompts, its finalists on all) runs whole, `diagnose` in a fresh process of its own on the same
recording, in the doctor's precision, and is measured as the doctor is. The precision is bfloat16 where a matmul of a
draft step's shape (256 tokens, three 7168-wide states in) runs at least as fast in it as in float32 on this host
(`matmul_rates`), else float32: a CPU without bfloat16 units computes it about 200 times slower, which a 16-row probe
shows first.

    python benchmarks/truesize.py [--tiny | --width 2048 --layers 61] [--threads 2] [--compute float32|bfloat16] [--copy]
                                  [--keep FOLDER] [--no-today] [--compare-today] [--out benchmarks/results/truesize.json]

`--tiny` runs the same steps at width 64 and 24 layers (what the suite checks), `--width`/`--layers` at a size between
(the draft's widths scaled from the real config); `bench_recording` reads the stored true-size result into BENCHMARKS.md.
In float32 the draft stays in its checkpoint's bfloat16 and is widened a slice at a time (`draft.linear_widened`);
`--copy` measures the float32 copy of every weight instead. `--compute` forces the precision (float32 on a host that has
bfloat16 units: the path of one that has none); the result records the CPU flags seen (`cpu_flags`).
"""
from __future__ import annotations
import argparse, json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIG = ROOT/'tests'/'fixtures'/'draft-configs'/'specforge-deepseek-v3-671b-eagle3.json'
TARGET_VOCAB = 40_000   # the target's vocabulary here (the real one is 129,280): the embedding lookup costs the same, the memory less
PROMPTS, TOKENS = 32, 17   # 32 prompts of 16 scored positions: 512 >= the doctor's minimum evidence (8 prompts, 500 tokens)
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16, draft_vocab_size=500)
RESULT = HERE/'results'/'truesize.json'

def planted(n:int)->tuple: return (5, n // 2 + 3, n - 6)   # off the configured default resid[2, N//2, N-3] in every chunk

def draft_config(tiny:bool, width:int|None=None, layers:int=61)->tuple: # (config.json dict, target layers N)
    "The real draft config (its ids feed the engines' default resid[2, N//2, N-3] at N = 61), scaled down with --tiny or to `width`."
    cfg = json.loads(CONFIG.read_text())
    cfg.update(vocab_size=TARGET_VOCAB, max_position_embeddings=4096)
    if width and not tiny:   # heads of 128 as the real one's, its MLP ratio (40960 / 7168), its 8 KV heads at most
        h = max(1, width // 128)
        cfg.update(hidden_size=width, intermediate_size=128 * round(width * 40960 / 7168 / 128), num_attention_heads=h, num_key_value_heads=min(8, h), head_dim=128)
    if not tiny:
        if layers != 61: cfg.update(eagle_config=dict(cfg['eagle_config'], eagle_aux_hidden_state_layer_ids=[1, layers // 2 - 1, layers - 4]))
        return cfg, layers
    n = 24
    cfg.update(TINY, vocab_size=600, eagle_config=dict(cfg['eagle_config'], eagle_aux_hidden_state_layer_ids=[1, n // 2 - 1, n - 4]))
    return cfg, n

def make_draft(cfg:dict, seed:int=0):
    "A random-init draft in bfloat16 (built in it: a float32 copy at this width would take 7 GiB), with its own embedding and a sorted vocabulary map."
    import torch
    from eagle3_workbench.draft import Eagle3Draft, DraftConfig
    torch.manual_seed(seed)
    was = torch.get_default_dtype(); torch.set_default_dtype(torch.bfloat16)
    try:
        d = Eagle3Draft(DraftConfig.from_dict(cfg)).eval()
        if d.embed_tokens is None: d.embed_tokens = torch.nn.Embedding(cfg['vocab_size'], cfg['hidden_size'])
    finally: torch.set_default_dtype(was)
    with torch.no_grad():
        for n, p in d.named_parameters(): p.normal_(std=0.02) if p.dim() > 1 else p.fill_(1.0)
        keep = torch.randperm(cfg['vocab_size'])[:cfg['draft_vocab_size']].sort().values
        d.d2t.copy_(keep - torch.arange(len(keep))); d.t2d.zero_(); d.t2d[keep] = True
    return d

def write_recording(folder:Path, draft, n_layers:int, wiring:tuple, prompts:int=PROMPTS, tokens:int=TOKENS, seed:int=0,
                    step:float=0.25, sharpen:float=3.0, noise:float=1.0)->dict:
    "The synthetic recording through `RecordingWriter`: random-walk states, logits of the draft fed `wiring`, sharpened, plus noise."
    import torch, torch.nn.functional as F
    from eagle3_workbench.recording import RecordingWriter, new_manifest, new_request
    from eagle3_workbench.draft import DraftCache
    g, c = torch.Generator().manual_seed(seed), draft.config
    H, V, layers = c.target_hidden_size, c.vocab_size, tuple(range(n_layers + 1))
    vocab_ids = draft.to_target_ids(torch.arange(c.draft_vocab_size)).tolist()
    tcfg = dict(model_type='deepseek_v3', architectures=['DeepseekV3ForCausalLM'], num_hidden_layers=n_layers, hidden_size=H, vocab_size=V)
    ids = [torch.randint(0, V, (tokens,), generator=g).tolist() for _ in range(prompts)]
    req = new_request(ids, [], 0, 'vocab', vocab_ids, layers, torch.bfloat16, dict(prompts='synthetic: benchmarks/truesize.py'))
    w = RecordingWriter(folder, new_manifest(tcfg, req, layers, torch.bfloat16, 'vocab', vocab_ids))
    seqs = []
    with torch.no_grad():
        for t in ids:
            x = torch.tensor(t)
            r = [torch.randn(tokens, H, generator=g)]
            for _ in range(n_layers): r.append(r[-1] + step * torch.randn(tokens, H, generator=g))
            feats = torch.cat([r[k] for k in wiring], -1)[None].to(torch.bfloat16)
            mask = torch.full((tokens, tokens), float('-inf')).triu(1)
            z = draft.compute_logits(draft.layer(draft.project(feats), F.pad(x[1:], (0, 1))[None], torch.arange(tokens)[None], DraftCache(), mask))[0].float()
            z = (z - z.mean(-1, keepdim=True)) / z.std(-1, keepdim=True)
            logits = torch.randn(tokens, len(vocab_ids), generator=g)   # row j: the target's prediction at j; row t + 1 is what the draft at t predicts
            logits[1:] = sharpen * z[:-1] + noise * torch.randn(tokens - 1, len(vocab_ids), generator=g)
            greedy = draft.to_target_ids(logits.argmax(-1))
            seqs.append(dict(tokens=x, greedy=greedy, logits=logits, prompt_tokens=tokens, kind='prompt',
                             resid={k: r[k].to(torch.bfloat16) for k in layers}))
    w.add(seqs); w.finish({'embed_tokens': draft.embed_tokens.weight.detach()})   # the target's embedding: here the draft's own
    return dict(bytes=sum(f.stat().st_size for f in folder.rglob('*') if f.is_file()), tokens=prompts * tokens)

CHILD = r'''
import json, os, resource, sys, threading, time
import torch
def rss():   # resident MiB now: anonymous (the process's own) and file-backed (mapped recording and weight files, reclaimable)
    d = {k: int(v.split()[0]) / 1024 for k, _, v in (l.partition(':') for l in open('/proc/self/status')) if k in ('RssAnon', 'RssFile')}
    return d.get('RssAnon', 0.0), d.get('RssFile', 0.0)
PEAK = [0.0, 0.0, 0.0]   # the highest anonymous, file-backed and total resident memory seen, sampled every 20 ms
def sample():
    while True:
        a, f = rss(); PEAK[:] = max(PEAK[0], a), max(PEAK[1], f), max(PEAK[2], a + f); time.sleep(0.02)
if os.path.exists('/proc/self/status'): threading.Thread(target=sample, daemon=True).start()
from eagle3_workbench.threads import apply_threads
apply_threads(None, THREADS)
from eagle3_workbench.recording import recorded_pair
from eagle3_workbench.stats import race_blocks
import eagle3_workbench.search as search
search.RACE_FROM_WIDTH = RACEWIDTH   # 64: the tiny stand-in races as the true size does; NEVER: the search before racing
t0, c0 = time.perf_counter(), time.process_time()
pair = recorded_pair(REC, DRAFT, dtype=getattr(torch, DTYPE), device=DEVICE, storage=None if STORAGE is None else getattr(torch, STORAGE))
out = dict(load=time.perf_counter() - t0)
def io():
    try: return {k: int(v) for k, v in (l.split(': ') for l in open('/proc/self/io').read().splitlines())}
    except OSError: return {}
if MODE == 'doctor':
    from eagle3_workbench.doctor import diagnose
    d = diagnose(pair, accept=False)
    t = search._TABLES[-1][1]
    fits = {}
    for w in WIRINGS:   # each wiring's per-prompt fit from the race's blocks where it was scored on every one, else scored now
        subs = getattr(t, '_subs', {})
        bl = [subs.get(tuple(b)) for b in race_blocks(len(t.seqs))]
        fits[str(list(w))] = (torch.cat([s.rows[tuple(w)][0] for s in bl]) if all(s is not None and tuple(w) in s.rows for s in bl)
                              else t.score(tuple(w))[0]).tolist()
    scored = sum(len(s.rows) * float(s.positions.sum()) for s in getattr(t, '_subs', {}).values()) + len(t.rows) * float(t.positions.sum())
    out.update(token_wirings=scored, verdict=d.verdict, codes=d.codes, recommended=d.recommended.get('resid_layers'), search=d.search, seconds=d.seconds, fits=fits)
else:   # today's search: every candidate on every prompt; the time of one wiring once the table is made, in float32 and bfloat16
    table = search.AgreementTable(pair.target, pair.draft, list(range(len(pair.target.sequences))))
    per, fits = {}, {}
    for w in WIRINGS:
        a = time.perf_counter(); fits[str(list(w))] = table.score(tuple(w))[0].tolist(); per[str(list(w))] = time.perf_counter() - a
    out.update(per_wiring=per, fits=fits, tokens=int(table.positions.sum()))
out.update(wall=time.perf_counter() - t0, cpu=time.process_time() - c0, peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           peak_anon_mib=PEAK[0], peak_file_mib=PEAK[1],
           io=io(), threads=torch.get_num_threads(), gpu_peak_gib=torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None)
print('RESULT ' + json.dumps(out))
'''

NEVER = 10**9   # a race width no target reaches: the doctor's search before racing (screened, not raced)

def child(mode:str, rec:Path, draft:Path, dtype:str, wirings:list, threads:int, device:str='cpu', race_width:int=64,
          storage:str|None=None)->dict:   # the draft's weights' precision (None: `dtype`)
    "Run the doctor (or today's per-wiring scoring) in a fresh process on the folders; its measurements. `race_width=NEVER`: the doctor not raced."
    code = (CHILD.replace('THREADS', str(threads)).replace('REC', repr(str(rec))).replace('DRAFT', repr(str(draft)))
            .replace('RACEWIDTH', str(race_width)).replace('STORAGE', repr(storage)).replace('DTYPE', repr(dtype)).replace('DEVICE', repr(device)).replace('MODE', repr(mode)).replace('WIRINGS', repr([list(w) for w in wirings])))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.pop('EAGLE3_RECORDING_CACHE', None)
    p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    if p.returncode: raise RuntimeError(f"{mode} ({dtype}) failed: {p.stderr[-3000:]}")
    return json.loads(next(l for l in p.stdout.splitlines() if l.startswith('RESULT '))[7:])

def _rates(m:int, k:int, n:int)->dict:
    import torch
    out = {}
    for name in ('bfloat16', 'float32'):
        a, b = torch.randn(m, k, dtype=getattr(torch, name)), torch.randn(k, n, dtype=getattr(torch, name))
        a @ b; t0 = time.perf_counter(); a @ b
        out[name] = 2 * m * k * n / max(time.perf_counter() - t0, 1e-9) / 1e9
    return out

def matmul_rates(threads:int, m:int=16, k:int=7168, n:int=1024, rows:int=256)->dict:
    "GFLOP/s of a [rows, k] x [k, n] matmul in bfloat16 and in float32 on this host (a draft step's input width and a block's tokens)."
    "A first probe on `m` rows tells a host without bfloat16 units (tens of times slower there) in a second, and decides;"
    " elsewhere the rates are measured again on `rows` rows, since at few rows bfloat16 can trail float32 where a block's worth leads it."
    import torch
    was = torch.get_num_threads(); torch.set_num_threads(threads)
    try:
        out = _rates(m, k, n)
        return out if out['bfloat16'] * 4 < out['float32'] or rows <= m else _rates(rows, k, n)
    finally: torch.set_num_threads(was)

def compute_dtype(rates:dict, device:str)->str:
    "bfloat16 where it is at least as fast as float32 (a GPU; a CPU with bfloat16 matmul units), else float32."
    return 'bfloat16' if device != 'cpu' or rates['bfloat16'] >= rates['float32'] else 'float32'

def cpu_flags(names=('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile', 'avx512_vnni', 'fma'))->list:
    "Which of `names` /proc/cpuinfo's first `flags` line lists (bfloat16 matmul units: avx512_bf16, amx_bf16); [] where there is none."
    try: line = next(l for l in open('/proc/cpuinfo') if l.startswith('flags'))
    except (OSError, StopIteration): return []
    have = set(line.split(':', 1)[1].split())
    return [n for n in names if n in have]

def measure(tiny:bool, threads:int=2, keep:Path|None=None, device:str='cpu', today:bool=True, whole:bool=False,
            dtype:str|None=None, # the doctor's precision; None: the faster on this host (`compute_dtype`)
            copy:bool=False, # in float32: a float32 copy of every weight (the path before the widened slices)
            width:int|None=None, layers:int=61)->dict:   # a size between --tiny and the true one
    "Build the draft and the recording on disk, diagnose them in a fresh process, and time today's search's wirings beside it."
    from eagle3_workbench.loading import save_draft
    from eagle3_workbench.conventions import default_resid_layers
    load0 = os.getloadavg()[0]
    cfg, n = draft_config(tiny, width, layers)
    tmp = Path(tempfile.mkdtemp(prefix='truesize-')) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        t0, plant = time.perf_counter(), planted(n)
        if (tmp/'built.json').is_file(): made, build = json.loads((tmp/'built.json').read_text())   # kept from an earlier run: the same seeds
        else:
            d = make_draft(cfg)
            save_draft(d, tmp/'draft', cfg)
            made = write_recording(tmp/'rec', d, n, plant)
            del d
            build = time.perf_counter() - t0
            (tmp/'built.json').write_text(json.dumps([made, build]))
        conf = default_resid_layers(n)
        near = (plant[0] + 1,) + plant[1:]
        rates = matmul_rates(threads, k=cfg['hidden_size'] * 3); prec = dtype or compute_dtype(rates, device)   # on a CPU without bfloat16 units it is ~200x slower
        storage = 'bfloat16' if prec == 'float32' and device == 'cpu' and not copy else None   # stored as saved, widened by slices
        new = child('doctor', tmp/'rec', tmp/'draft', prec, [plant, conf, near], threads, device, storage=storage)
        old = child('today', tmp/'rec', tmp/'draft', 'float32', [conf, plant, near], threads) if today else None   # the first wiring includes the table's making
        load1 = os.getloadavg()[0]
        unraced = child('doctor', tmp/'rec', tmp/'draft', prec, [plant, conf, near], threads, device, race_width=NEVER, storage=storage) if whole else None
        return dict(tiny=tiny, layers=n, hidden=cfg['hidden_size'], intermediate=cfg['intermediate_size'], draft_vocab=cfg['draft_vocab_size'],
                    target_vocab=cfg['vocab_size'], planted=list(plant), configured=list(conf), neighbour=list(near), recording=made,
                    build_seconds=build, matmul_gflops=rates, dtype=prec, storage=storage or prec, cpu_flags=cpu_flags(), new=new, today=old, today_whole=unraced, load_before=load0, load_before_whole=load1, load_after=os.getloadavg()[0], threads=threads,
                    cores=os.cpu_count(), device=device, when=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))
    finally:
        if keep is None: shutil.rmtree(tmp, ignore_errors=True)

def summary(r:dict)->dict:
    "The numbers BENCHMARKS.md states: the doctor's wall and CPU time, peak memory, bytes read, the verdict, and today's search extrapolated."
    import math
    new, old = r['new'], r['today']
    explored = new['search']['candidates']
    base = dict(found=new['recommended'] == r['planted'], verdict=new['verdict'], wall=new['wall'], cpu=new['cpu'], rss_gib=new['peak_rss_mib'] / 1024, anon_gib=new.get('peak_anon_mib', math.nan) / 1024,
                read_gib=new['io'].get('rchar', math.nan) / 2**30, explored=explored, scored_in_full=new['search']['scored_in_full'])
    if r.get('today_whole'):   # today's search run whole (measured): same recording, same run, its own fresh process
        u = r['today_whole']
        base.update(whole_found=u['recommended'] == r['planted'], whole_verdict=u['verdict'], whole_wall=u['wall'], whole_cpu=u['cpu'],
                    whole_rss_gib=u['peak_rss_mib'] / 1024, whole_anon_gib=u.get('peak_anon_mib', math.nan) / 1024,
                    whole_read_gib=u['io'].get('rchar', math.nan) / 2**30, whole_explored=u['search']['candidates'],
                    whole_scored_in_full=u['search']['scored_in_full'], whole_token_wirings=u['token_wirings'], token_wirings=new['token_wirings'])
    if old is None: return base
    per = sorted(old['per_wiring'][str(w)] for w in (r['planted'], r['neighbour']))[0]   # wirings scored once the table was made (the first wiring made it)
    from eagle3_workbench.search import screen_prompts, FINALISTS
    m = new['search']['prompts']
    screen = len(screen_prompts(m) or range(m)) / m   # today's search explores on MIN_PROMPTS of the prompts from SCREEN_FROM on
    today = per * (explored * screen + (FINALISTS + 1) * (screen < 1))   # its finalists and the configured seed on every prompt; the search alone
    f32, b16 = (torch_t(old['fits'][str(r['planted'])]), torch_t(new['fits'][str(r['planted'])]))
    rel = max(abs(a - b) / max(abs(a), 1e-9) for a, b in zip(f32, b16))
    gap = lambda fits: sum(fits[str(r['planted'])]) - sum(fits[str(r['neighbour'])])
    return dict(base, today_per_wiring=per, today_extrapolated=today, today_cpu_extrapolated=today * old['cpu'] / old['wall'], new_threads=new['threads'], bf16_max_rel=rel, gap_f32=gap(old['fits']), gap_b16=gap(new['fits']))

def torch_t(x): return [float(v) for v in x]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--tiny', action='store_true'); ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--keep', default=None, help='build the draft and recording in this folder and keep them; a folder built so is reused')
    ap.add_argument('--no-today', action='store_true', help="the doctor only: skip timing today's search on the same recording")
    ap.add_argument('--compare-today', action='store_true', help="also run today's search (screened, not raced) whole on the same recording, in a fresh process, in the doctor's precision")
    ap.add_argument('--compute', choices=('float32', 'bfloat16'), default=None, help="the doctor's precision (default: the faster on this host)")
    ap.add_argument('--copy', action='store_true', help='in float32, a float32 copy of every weight (default: kept in bfloat16, widened by slices)')
    ap.add_argument('--width', type=int, default=None, help='the draft and target width (default the true 7168), its sizes scaled from the real config')
    ap.add_argument('--layers', type=int, default=61, help='target layers (default the true 61)')
    ap.add_argument('--out', default=None, help=f'where to write the JSON (default {RESULT.relative_to(ROOT)}; --tiny: printed only)')
    a = ap.parse_args(argv)
    r = measure(a.tiny, a.threads, keep=a.keep and Path(a.keep), today=not a.no_today, whole=a.compare_today, dtype=a.compute, copy=a.copy,
                width=a.width, layers=a.layers)
    r['summary'] = summary(r)
    text = json.dumps(r, indent=1)
    if a.out or not (a.tiny or a.width or a.layers != 61): Path(a.out or RESULT).write_text(text + '\n')   # only the true size replaces the stored result
    print(json.dumps(r['summary'], indent=1))

if __name__ == '__main__': main()
