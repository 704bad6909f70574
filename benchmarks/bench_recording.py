"""Recording the target once, diagnosing from the recording: what it costs on disk and in time, whether the doctor's memory
stays bounded as the recording grows, how a wiring's cost grows with tokens and width (up to a real-width, 7168-wide draft
with a 32k vocabulary), and from these the cost of the doctor on a 61-layer, 7168-wide target."""
from __future__ import annotations
import json, subprocess, sys, tempfile, time
from pathlib import Path
from common import ROOT, zoo, pair, med, spread, row, interleaved, subprocess_env, tiny

TITLE = 'recording and the doctor at scale'
QUESTION = ('What does a recording cost (bytes per token, time next to a plain forward)? Does the doctor stay within bounded '
            'memory however large the recording? How does the time per wiring grow with tokens and width, and what does a '
            '61-layer, 7168-wide target need?')

DSV3 = dict(layers=61, hidden=7168, intermediate=40960, heads=56, kv_heads=8, vocab=129280, draft_vocab=32000)   # the SpecForge DeepSeek-V3 draft

def bytes_per_token(n_layers:int, hidden:int, resid_bytes:int, logit_columns:int)->int:
    "The format's size per token (docs/reference.md §8): resid[0..N], float32 logits, two int64 token ids."
    return (n_layers + 1) * hidden * resid_bytes + 4 * logit_columns + 16

def folder_bytes(p:Path)->int: return sum(f.stat().st_size for f in p.rglob('*') if f.is_file())

def random_draft(hidden:int, intermediate:int, heads:int, kv_heads:int, vocab:int, seed:int=0):
    "A random-init EAGLE-3 draft (draft vocabulary = vocabulary: no map needed) of the given width."
    import torch
    from eagle3_workbench.draft import Eagle3Draft
    from eagle3_workbench.draft_config import DraftConfig
    torch.manual_seed(seed)
    cfg = dict(architectures=['LlamaForCausalLMEagle3'], model_type='llama', hidden_size=hidden, intermediate_size=intermediate,
               num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=128 if hidden >= 1024 else hidden // heads,
               num_hidden_layers=1, rms_norm_eps=1e-5, rope_theta=10000.0, vocab_size=vocab, draft_vocab_size=vocab,
               max_position_embeddings=4096, eagle_config=dict(eagle_aux_hidden_state_layer_ids=[1, 2, 3], use_aux_hidden_state=True))
    with torch.no_grad():
        d = Eagle3Draft(DraftConfig.from_dict(cfg)).eval()
        if d.embed_tokens is None: d.embed_tokens = torch.nn.Embedding(vocab, hidden)   # what load_draft borrows from a target
        for p in d.parameters(): p.normal_(std=0.02)
        d.t2d.fill_(True)
    return d

def synthetic_recording(hidden:int, vocab:int, n_layers:int, seqs:int, tokens:int, seed:int=0):
    "An in-memory recording of random states (only the layers the timed wirings read: resid[0..n_layers])."
    import torch
    from eagle3_workbench.recording import new_manifest, new_request, in_memory
    g = torch.Generator().manual_seed(seed)
    layers = tuple(range(n_layers + 1))
    cfg = dict(model_type='llama', num_hidden_layers=n_layers, hidden_size=hidden, vocab_size=vocab)
    m = new_manifest(cfg, new_request([], [], 0, 'full', None, layers, torch.float32), layers, torch.float32)
    rows = []
    for _ in range(seqs):
        t = torch.randint(0, vocab, (tokens,), generator=g)
        rows.append(dict(tokens=t, greedy=torch.randint(0, vocab, (tokens,), generator=g), prompt_tokens=tokens, kind='prompt',
                         logits=torch.randn(tokens, vocab, generator=g), resid={k: torch.randn(tokens, hidden, generator=g) for k in layers}))
    return in_memory(m, [rows])

def per_wiring(draft, rec, repeats:int)->tuple:
    "(seconds per wiring once its fc products are kept, seconds per fc product): `AgreementTable` over the whole recording."
    from eagle3_workbench.search import AgreementTable
    import itertools
    t = AgreementTable(rec, draft, list(range(len(rec.sequences))))
    ws = list(itertools.permutations((0, 1, 2)))[:2 + repeats]   # the same three resid, in other chunk orders
    t0 = time.perf_counter(); t.score_many(ws[:1]); first = time.perf_counter() - t0   # reads the layers, three fc products, one step
    t.score_many(ws[1:2])   # warm
    times = []
    for w in ws[2:]:
        t0 = time.perf_counter(); t.score_many([w]); times.append(time.perf_counter() - t0)
    return times, max(first - min(times), 0.0) / 3

def doctor_peak_rss(folder:Path, prompts:int)->float:
    "Peak resident memory (MiB) of a fresh process diagnosing from the recording (its first `prompts` prompts)."
    code = (f"import resource, json\nfrom eagle3_workbench.recording import recorded_pair\nfrom eagle3_workbench.doctor import diagnose\n"
            f"from eagle3_workbench.scores import recorded_prompts\np = recorded_pair({str(folder)!r})\n"
            f"d = diagnose(p, recorded_prompts(p.target)[:{prompts}], accept=False)\n"
            "print(json.dumps(dict(rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, verdict=d.verdict)))")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=subprocess_env(), cwd=ROOT, timeout=1800)
    if r.returncode: raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])['rss']

def calibration_tokens()->tuple:
    "From the stored calibration: the fewest tokens at which the doctor names each planted fault in >= 80% of subsets, the worst fault."
    f = Path(__file__).parent/'results'/'doctor_calibration.json'
    if not f.exists(): return None, 'benchmarks/results/doctor_calibration.json missing: run benchmarks/doctor_calibration.py'
    res = json.loads(f.read_text())['rows']
    worst = (0, '')
    for (p, fault) in {(r['pair'], r['fault']) for r in res if r['fault'] != 'correct'}:
        ok = sorted((r['tokens'], r['prompts']) for r in res if r['pair'] == p and r['fault'] == fault and r['named'] >= 0.8 * r['trials'])
        need = ok[0] if ok else (float('inf'), None)
        worst = max(worst, (need[0], f"{p} {fault} ({need[1]} prompts)"))
    return worst

def true_size_rows()->list:
    "The stored true-size run (`benchmarks/truesize.py`, results/truesize.json): the doctor at 61 x 7168 from disk beside today's search."
    import truesize
    if not truesize.RESULT.exists():
        return [row('doctor from a recording at 61 x 7168 on this CPU, end to end (measured)', None, 's', '', '<= 600 s', None,
                    'not available: run python benchmarks/truesize.py (minutes; writes benchmarks/results/truesize.json)')]
    r = json.loads(truesize.RESULT.read_text()); s = r['summary']
    when = f"measured {r['when']}, {r['new']['threads']} torch thread(s), load average {r['load_before']:.1f} before / {r['load_after']:.1f} after"
    return [row(f"doctor from a recording at {r['layers']} x {r['hidden']} on this CPU, end to end (measured)", s['wall'], 's', '', '<= 600 s', s['wall'] <= 600,
                f"verdict {s['verdict']}, planted resid{r['planted']} {'found' if s['found'] else 'NOT found'} (configured resid{r['configured']}); "
                f"{s['explored']} wirings explored, {s['scored_in_full']} scored on all {r['new']['search']['tokens']} positions; "
                f"CPU time {s['cpu']:.0f} s; {when}"),
            row(f"doctor from a recording at {r['layers']} x {r['hidden']}: CPU time of the process", s['cpu'], 's', '', '<= 600 s', s['cpu'] <= 600,
                f"the wall time above over the CPU time: the share of a core the process got on the shared machine ({when})"),
            row(f"doctor from a recording at {r['layers']} x {r['hidden']}: peak memory", s['rss_gib'], 'GiB', '', '<= 8 GiB', s['rss_gib'] <= 8,
                f"draft in bfloat16 (MLP {r['intermediate']}, draft vocabulary {r['draft_vocab']}, target vocabulary {r['target_vocab']}); "
                f"{s['read_gib']:.2f} GiB read by the process (rchar); recording {r['recording']['bytes'] / 2**30:.2f} GiB on disk"),
            row(f"today's search at {r['layers']} x {r['hidden']}, same recording (extrapolated)", s['today_extrapolated'], 's', '', '', None,
                f"about {s['today_cpu_extrapolated']:.0f} s of CPU; {s['explored']} wirings on a screen of 8 prompts and 17 on all, at {s['today_per_wiring']:.1f} s per wiring on every prompt in float32 (measured on 3 wirings in the same run): "
                "the search alone"),
            row('bfloat16 against float32: largest relative difference of a per-prompt fit', s['bf16_max_rel'], '', '', '', None,
                f"planted resid{r['planted']}; its summed fit gain over the neighbour resid{r['neighbour']}: {s['gap_b16']:.3f} nats in bfloat16, "
                f"{s['gap_f32']:.3f} in float32 (the fit is summed in float32 either way)")]

def run(quick:bool=False)->dict:
    import torch
    from eagle3_workbench.recording import record
    z, rows = zoo(), []
    p = pair('tiny-dsv3')
    prompts = z.prompts(8 if quick else 48)
    tmp = Path(tempfile.mkdtemp(prefix='e3w-rec-'))

    # 1. bytes per token, measured against the format's formula
    rec = record(p, prompts, out=tmp/'zoo', max_new_tokens=8 if quick else 31)
    tok = sum(s['tokens'] for s in rec.sequences)
    shards = sum(f.stat().st_size for f in (tmp/'zoo').glob('shard-*.safetensors'))
    want = bytes_per_token(p.n_layers, rec.hidden_size, 4, rec.vocab_size)
    rows.append(row('recording shard bytes per token / the format\'s formula', shards / tok / want, 'x', '', '~1', abs(shards / tok / want - 1) < 0.02,
                    f"{shards / tok:.0f} B/token measured on {tok} tokens (zoo target, float32, full logits); (N+1) x H x 4 + 4 x V + 16 = {want} "
                    f"B/token; once per recording besides: the borrowed embedding and head, manifest and tokenizer "
                    f"({(folder_bytes(tmp/'zoo') - shards) / 2**20:.1f} MiB)"))

    # 2. what recording costs next to a plain forward over the same tokens
    ids = [rec.tokens(i).tolist() for i in range(len(rec.sequences))]
    def plain():
        with torch.no_grad():
            for s in ids: p.target(input_ids=torch.tensor([s]), use_cache=False)
    def recorded(): record(p.target, ids, max_new_tokens=0, batch_tokens=1)   # in memory, one sequence per forward as `plain`
    t = interleaved({'plain': plain, 'record': recorded}, repeats=1 if quick else 3)
    r = [a / b for a, b in zip(t['record'], t['plain'])]
    rows.append(row('recording time per forward / plain forward (teacher-forced pass, every resid kept)', med(r), 'x', spread(r), '', None,
                    f"{len(ids)} sequences one forward each; recording keeps every resid[k], the greedy token and the logits per position"))

    # 3. the doctor's peak memory as the recording grows
    from eagle3_workbench.zoo import corpus_files, heldout_prompts
    more = heldout_prompts(corpus_files()[1], n=16 if quick else 432, seed=13)
    big = record(p, prompts, out=tmp/'big', max_new_tokens=0, extra_sequences=[p.tokenizer(x, add_special_tokens=False)['input_ids'] for x in more])
    small = record(p, prompts, out=tmp/'small', max_new_tokens=0)
    grow = folder_bytes(tmp/'big') / folder_bytes(tmp/'small')
    a, b = (doctor_peak_rss(tmp/'small', 2), doctor_peak_rss(tmp/'big', 2)) if tiny() else \
           (doctor_peak_rss(tmp/'small', len(prompts)), doctor_peak_rss(tmp/'big', len(prompts)))
    rows.append(row('doctor peak memory, recording grown x' + f"{grow:.0f}", b / a, 'x', '', '<= 1.1x', b / a <= 1.1,
                    f"peak RSS {a:.0f} MiB on {folder_bytes(tmp/'small') / 2**20:.0f} MiB, {b:.0f} MiB on {folder_bytes(tmp/'big') / 2**20:.0f} MiB "
                    f"({len(big.sequences)} sequences): the shards are memory-mapped and the doctor reads only its prompts' rows"))
    del big, small

    # 4. time per wiring against tokens (zoo width) and against width (fixed tokens)
    reps = 2 if quick else 4
    tokens = (256, 512) if quick else (512, 1024, 2048)
    at = {}
    for T in tokens:
        times, _ = per_wiring(p.draft, synthetic_recording(128, p.target.config.vocab_size, 3, T // 64, 64), reps)
        at[T] = med(times)
    slope = (at[tokens[-1]] - at[tokens[0]]) / (tokens[-1] - tokens[0]) * 1e6   # ms per 1000 tokens
    rows.append(row(f"time per wiring, zoo draft (width 128), {tokens[-1]} vs {tokens[0]} tokens", at[tokens[-1]] / at[tokens[0]], 'x', '', '', None,
                    ', '.join(f"{T} tokens {at[T] * 1e3:.0f} ms" for T in tokens) + f"; {slope:.1f} ms per 1000 tokens: linear in tokens"))
    widths = (128, 512) if quick else (128, 512, 2048)
    T = 256
    by = {}
    for H in widths:
        d = random_draft(H, 4 * H, max(4, H // 128), max(2, H // 512), 1024)
        times, _ = per_wiring(d, synthetic_recording(H, 1024, 3, T // 64, 64), reps)
        by[H] = med(times)
    rows.append(row(f"time per wiring, width {widths[-1]} / width {widths[0]} ({T} tokens, vocab 1024)", by[widths[-1]] / by[widths[0]], 'x', '', '', None,
                    ', '.join(f"width {H} {by[H] * 1e3:.0f} ms" for H in widths) + "; MLP 4 x width: the cost grows with width squared once the matmuls dominate"))

    # 5. a real-width draft: DeepSeek-V3's EAGLE-3 (7168 wide, MLP 40960, 56 heads, 32k draft vocabulary)
    H, I, V = (DSV3['hidden'], DSV3['intermediate'], DSV3['draft_vocab']) if not quick else (512, 2048, 4096)
    d = random_draft(H, I, DSV3['heads'] if not quick else 4, DSV3['kv_heads'] if not quick else 2, V)
    T = 64 if quick else 128
    times, prod = per_wiring(d, synthetic_recording(H, V, 3, 1, T), 2 if quick else 3)
    ms_tok = med(times) / T * 1e3
    flop_tok = 2 * sum(q.numel() for n, q in d.named_parameters() if not n.startswith(('embed', 'fc')))   # a wiring's step: midlayer and head
    del d
    label = 'real width 7168, MLP 40960, 32k vocab' if not quick else f"quick stand-in: width {H}, vocab {V}"
    rows.append(row(f"time per wiring per token on CPU, {label}", ms_tok, 'ms', spread([x / T * 1e3 for x in times]), '', None,
                    f"{T} tokens, {torch.get_num_threads()} thread(s), float32; an fc product (one chunk x layer) {prod / T * 1e3:.2f} ms/token, "
                    "computed once per layer and chunk"))

    # 6. how many tokens the search needs (the calibration) and the 61-layer cost model
    need, which = calibration_tokens()
    rows.append(row('tokens the search needs to name every planted one-layer fault with power >= 0.8', need if need != float('inf') else None,
                    'tokens', '', '', None, f"the hardest fault in the calibration: {which}"))
    n_tok = max(need if isinstance(need, (int, float)) and need != float('inf') else 4000, 4000)
    screen = n_tok / 6   # the screen: MIN_PROMPTS of the prompts
    explored, finals = 230, 17   # the coordinate search at N = 61 scores 120-220 (BENCHMARKS.md, doctor), 16 finalists + the seeds in full
    cpu = (explored * screen + finals * n_tok) * ms_tok / 1e3 + 3 * (DSV3['layers'] + 1) * n_tok * prod / T
    rows.append(row('61-layer, 7168-wide target: the doctor from a recording on this CPU (model)', cpu / 3600 if not quick else None, 'h', '', '', None,
                    (f"{explored} wirings explored on {screen:.0f} tokens and {finals} on {n_tok:.0f} at {ms_tok:.1f} ms/token, plus 3 x 62 fc "
                     "products: measured per-token costs times the search's counts" if not quick else
                     "not available in quick mode: it needs the real-width timing")))
    gpu_tflops = 300   # an assumption, stated: bf16 dense matmuls at about half an H100/H200's peak
    gpu = (explored * screen + finals * n_tok) * flop_tok / (gpu_tflops * 1e12)
    rows.append(row('61-layer, 7168-wide target: the doctor on one GPU (estimate, not measured)', gpu, 's', '', '', None,
                    f"{flop_tok / 1e9:.1f} GFLOP per token per wiring at width {H} x {(explored * screen + finals * n_tok):.0f} token-wirings at an "
                    f"assumed {gpu_tflops} TFLOP/s; no GPU was lent to measure it"))
    disk = bytes_per_token(DSV3['layers'], DSV3['hidden'], 2, DSV3['draft_vocab']) * n_tok
    rows.append(row('61-layer, 7168-wide target: recording size (bf16 resid, draft-vocabulary logits)', disk / 2**30, 'GiB', '', '', None,
                    f"{bytes_per_token(DSV3['layers'], DSV3['hidden'], 2, DSV3['draft_vocab']) / 1024:.0f} KiB/token x {n_tok:.0f} tokens, "
                    f"plus the embedding and head once ({2 * DSV3['vocab'] * DSV3['hidden'] * 2 / 2**30:.1f} GiB in bf16); full logits would add "
                    f"{4 * DSV3['vocab'] / 1024:.0f} KiB/token"))
    # 7. the doctor end to end at the true size from a recording on disk (benchmarks/truesize.py): the tiny stand-in run here,
    # the true size from its stored result (it takes minutes and GiBs: run it on its own)
    import truesize
    t = truesize.measure(True, threads=torch.get_num_threads())
    st = truesize.summary(t)
    rows.append(row('doctor from a recording, the true-size run at its tiny stand-in (24 layers, width 64): planted wiring found', float(st['found']), '',
                    '', '= 1', st['found'], f"verdict {st['verdict']}; {st['explored']} wirings explored, {st['scored_in_full']} scored on every prompt; "
                    f"{st['wall']:.1f} s wall; today's search extrapolated {st['today_extrapolated']:.1f} s"))
    rows += true_size_rows()
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=(f"zoo pair tiny-dsv3 ({len(prompts)} prompts) for the recording rows; synthetic in-memory recordings of random states and "
                       "random-init drafts for the per-wiring rows (`AgreementTable`, fc products kept as in the search); the 61-layer rows are a "
                       "model built from the measured per-token costs and the search's wiring counts" + (" (quick: small sizes)" if quick else '')))
