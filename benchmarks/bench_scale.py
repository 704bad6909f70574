"""Scale: stats-capture time and retained memory against sequence length and hidden size, on random-init 2-layer Llamas."""
from __future__ import annotations
import dataclasses, gc, math, pickle, time
import torch
from common import interleaved, ratios, med, spread, row, g

TITLE = 'scale'
QUESTION = 'Does stats capture stay cheap and small as sequences get long and models get wide?'

def llama(hidden:int, max_pos:int=4096, vocab:int=1024, inter:int|None=None, head_dim:int=64, kv_heads:int|None=None):
    "A random-init 2-layer Llama (sdpa attention, float32, eval)."
    from transformers import LlamaConfig, LlamaForCausalLM
    heads = max(1, hidden // head_dim)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter or 2 * hidden, num_hidden_layers=2,
                      num_attention_heads=heads, num_key_value_heads=kv_heads or heads, head_dim=head_dim,
                      max_position_embeddings=max_pos, tie_word_embeddings=False)
    cfg._attn_implementation = 'sdpa'
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()

def count_tensors(x, seen=None)->int:
    "Tensors reachable from a record (dataclass fields, dicts, lists, tuples)."
    seen = set() if seen is None else seen
    if id(x) in seen: return 0
    seen.add(id(x))
    if isinstance(x, torch.Tensor): return 1
    if dataclasses.is_dataclass(x) and not isinstance(x, type): return sum(count_tensors(getattr(x, f.name), seen) for f in dataclasses.fields(x))
    if isinstance(x, dict): return sum(count_tensors(v, seen) for v in x.values())
    if isinstance(x, (list, tuple)): return sum(count_tensors(v, seen) for v in x)
    return 0

def retained(records)->dict:
    "Bytes the records hold (pickled size), with and without the per-token norm lists, and tensors held."
    full = sum(len(pickle.dumps(r)) for r in records)
    rest = sum(len(pickle.dumps(dataclasses.replace(r, stats={**r.stats, 'norms': []}))) for r in records)
    return dict(full=full, rest=rest, norms=full - rest, tensors=sum(count_tensors(r) for r in records),
                n_norms=max((len(r.stats['norms']) for r in records), default=0))

def measure(model, T:int, reps:int)->dict:
    "Interleaved bare vs stats-capture forwards over T tokens; time spent inside the capture's hooks; what the records retain."
    from eagle3_workbench.capture import Capture
    ids = torch.randint(0, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T))
    hook_time, last = [], {}
    def with_capture():
        cap = Capture(model, points=['target.resid[*]'], mode='stats')
        inner, spent = cap._keep, [0.0]
        def keep(point, t):  # time what the capture does at each hook
            a = time.perf_counter(); inner(point, t); spent[0] += time.perf_counter() - a
        cap._keep = keep
        with torch.no_grad(), cap: model(input_ids=ids, use_cache=False)
        hook_time.append(spent[0]); last['cap'] = cap
    @torch.no_grad()
    def bare(): model(input_ids=ids, use_cache=False)
    t = interleaved(dict(bare=bare, stats=with_capture), reps, warmup=1)
    hooks = hook_time[-reps:]
    return dict(T=T, bare=t['bare'], stats=t['stats'], ratio=ratios(t['stats'], t['bare']), hooks=hooks,
                mem=retained(last['cap'].records), n_records=len(last['cap'].records))

def slope(xs, ys)->float:
    "Least-squares slope of log(y) against log(x)."
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)

def run(quick:bool=False)->dict:
    lengths = [128, 256] if quick else [128, 512, 1024, 2048, 4096]
    hiddens = [256] if quick else [1024, 4096, 7168]
    HT = 128  # tokens for the hidden-size sweep
    rows = []
    # ---- sequence length
    m = llama(256, max_pos=4096)
    seq = [measure(m, T, (3 if quick else (7 if T <= 1024 else 4))) for T in lengths]
    del m; gc.collect()
    for r in seq:
        T, mem = r['T'], r['mem']
        rows.append(row(f"T={T}: stats capture time in hooks", med(r['hooks'], 1e3), 'ms', spread(r['hooks'], 1e3, ' ms'),
                        note=f"forward with capture {g(med(r['stats'], 1e3))} ms, bare {g(med(r['bare'], 1e3))} ms, "
                             f"ratio {g(med(r['ratio']))}x ({spread(r['ratio'])})"))
        rows.append(row(f"T={T}: retained bytes ({r['n_records']} records)", mem['full'], 'B',
                        note=f"without the per-token norm lists {mem['rest']:,} B; norm lists {mem['norms']:,} B "
                             f"({mem['n_norms']} norms per record); tensors held {mem['tensors']}"))
    a, b = seq[0], seq[-1]
    rr = b['mem']['rest'] / a['mem']['rest']
    rf = b['mem']['full'] / a['mem']['full']
    tens = sum(r['mem']['tensors'] for r in seq)
    sl = slope([r['T'] for r in seq], [med(r['hooks']) for r in seq])
    sl_fwd = slope([r['T'] for r in seq], [med(r['stats']) for r in seq])
    rows += [
        row(f"retained bytes without norm lists, T={b['T']} / T={a['T']}", rr, 'x', target='<= 1.10x (flat)', met=rr <= 1.10),
        row(f"retained bytes with norm lists, T={b['T']} / T={a['T']}", rf, 'x',
            note=f"grows by design: one norm per token, up to max_tokens_per_record (4096) per record; "
                 f"{b['T'] / a['T']:g}x more tokens"),
        row('tensors held by stats records (all lengths)', tens, '', target='= 0', met=tens == 0),
        row(f"capture time in hooks vs T: log-log slope ({a['T']}..{b['T']})", sl, '', target='<= 1.2 (roughly linear)', met=sl <= 1.2,
            note=f"1 = linear; the whole forward with capture has slope {g(sl_fwd)}" + (" (attention is quadratic in T)" if sl_fwd > 1.2 else '')),
    ]
    # ---- hidden size
    hid = []
    for H in hiddens:
        t0 = time.perf_counter(); m = llama(H, max_pos=512, kv_heads=8 if H >= 1024 else None, head_dim=128 if H >= 1024 else 64)
        build = time.perf_counter() - t0
        r = measure(m, HT, 3 if quick or H < 4096 else 2); r['H'] = H; r['build'] = build
        r['params'] = sum(p.numel() for p in m.parameters())
        hid.append(r); del m; gc.collect()
    for r in hid:
        mem = r['mem']
        rows.append(row(f"H={r['H']}: stats capture / bare ({HT} tokens)", med(r['ratio']), 'x', spread(r['ratio']),
                        note=f"hooks {g(med(r['hooks'], 1e3))} ms of a {g(med(r['stats'], 1e3))} ms forward "
                             f"({g(med(r['hooks'], 1e9 / (r['n_records'] * HT * r['H'])))} ns per captured element); "
                             f"{r['params'] / 1e6:.0f}M parameters"))
        rows.append(row(f"H={r['H']}: retained bytes ({r['n_records']} records)", mem['full'], 'B',
                        note=f"without norm lists {mem['rest']:,} B; tensors held {mem['tensors']}"))
    if len(hid) > 1:
        rh = hid[-1]['mem']['full'] / hid[0]['mem']['full']
        sh = slope([r['H'] for r in hid], [med(r['hooks']) for r in hid])
        rows += [row(f"retained bytes H={hid[-1]['H']} / H={hid[0]['H']}", rh, 'x', target='<= 1.10x (flat)', met=rh <= 1.10),
                 row(f"capture time in hooks vs H: log-log slope ({hid[0]['H']}..{hid[-1]['H']})", sh, '', target='<= 1.2 (roughly linear)',
                     met=sh <= 1.2, note='1 = linear; per-element cost by H (ns): ' + ', '.join(
                         f"{r['H']}: {g(med(r['hooks'], 1e9 / (r['n_records'] * HT * r['H'])))}" for r in hid))]
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=(f"random-init 2-layer Llama, float32, sdpa attention; sequence sweep at hidden 256 (4 heads, vocab 1024, "
                       f"max_position_embeddings 4096) over T = {lengths}; hidden sweep at T = {HT} over H = {hiddens} "
                       f"(intermediate 2H, vocab 1024). Each point: bare and stats-capture forwards interleaved; hook time is "
                       f"the time spent inside the capture's record function; retained bytes = sum of len(pickle.dumps(record))."))
