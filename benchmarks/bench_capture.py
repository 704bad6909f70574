"""Capture overhead: bare forward vs our stats / full capture of every resid[k], transformers' output_hidden_states and nnsight."""
from __future__ import annotations
import copy
import torch
from common import zoo, pair, interleaved, ratios, med, spread, row, unavailable, g, tiny

TITLE = 'capture overhead'
QUESTION = 'What does recording every resid[k] cost, against a bare forward and against other ways to get the same tensors?'

def _nnsight_variant(target, ids, n):
    "A callable that runs an nnsight trace saving resid[0..N] (inputs of every layer and of the final norm), or (None, why)."
    try:
        import nnsight
        from nnsight import NNsight
    except Exception as e:
        return None, f"not installed ({type(e).__name__}: {e}); optional: `pip install nnsight` to include it"
    m = NNsight(copy.deepcopy(target))  # its own copy: the wrapper must not touch the module the other variants time
    inner = m.model
    def go():
        with torch.no_grad():
            with m.trace(ids, use_cache=False):
                out = nnsight.save([])
                for k in range(n): out.append(inner.layers[k].input)
                out.append(inner.norm.input)
        return out
    return go, f"nnsight {getattr(nnsight, '__version__', '?')}"

def run(quick:bool=False)->dict:
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.capture import live_hooks
    p = pair('tiny-dsv3')
    n = p.n_layers
    # a freshly loaded target: transformers 5 installs its output-recording hooks on the first
    # output_hidden_states=True call and keeps them, so that variant gets its own copy
    tgt, _ = load_target(zoo().spec('tiny-dsv3'))
    tgt_ohs = copy.deepcopy(tgt)
    hooks0 = live_hooks(tgt, mine_only=False)
    T = min(64 if quick else 512, p.target.config.max_position_embeddings)
    reps = 2 if tiny() else 5 if quick else 31   # the per-repeat ratios scatter widely on a shared 2-core machine
    ids = torch.randint(0, tgt.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    from eagle3_workbench.capture import Capture
    @torch.no_grad()
    def bare(): tgt(input_ids=ids, use_cache=False)
    @torch.no_grad()
    def stats():
        with Capture(tgt, points=['target.resid[*]'], mode='stats'): tgt(input_ids=ids, use_cache=False)
    @torch.no_grad()
    def full():
        with Capture(tgt, points=['target.resid[*]'], mode='full'): tgt(input_ids=ids, use_cache=False)
    @torch.no_grad()
    def ohs(): tgt_ohs(input_ids=ids, use_cache=False, output_hidden_states=True)
    variants = dict(bare=bare, stats=stats, full=full, ohs=ohs)
    nn_fn, nn_info = _nnsight_variant(tgt, ids, n)
    nn_same = None
    if nn_fn is not None:
        saved = nn_fn()
        with torch.no_grad(), Capture(tgt, points=['target.resid[*]'], mode='full') as cap: tgt(input_ids=ids, use_cache=False)
        nn_same = len(saved) == len(cap.records) and all(torch.equal(a, r.tensor) for a, r in zip(saved, cap.records))
        variants['nnsight'] = nn_fn
    t = interleaved(variants, reps, warmup=2)
    # what one hook costs: the statistics of one resid tensor, and the exact fingerprint inside them
    from eagle3_workbench.records import tensor_stats, _hash_device
    x = torch.randn(1, T, tgt.config.hidden_size)
    per = interleaved(dict(stats=lambda: tensor_stats(x), hash=lambda: _hash_device(x)), reps * 4, warmup=2)
    hooks1 = live_hooks(tgt, mine_only=False)
    b = med(t['bare'], 1e3)
    rs = {k: ratios(v, t['bare']) for k, v in t.items()}
    st_ohs = ratios(t['stats'], t['ohs'])
    s, so = med(rs['stats']), med(st_ohs)
    rows = [
        row(f'bare forward ({T} tokens, {n} layers)', b, 'ms', spread(t['bare'], 1e3, ' ms')),
        row('stats capture of resid[*] / bare', s, 'x', spread(rs['stats']), '<= 1.10x', s <= 1.10,
            '' if s <= 1.10 else f"each of the {n + 1} hooks runs tensor_stats (moments, min/max, per-token norms, an exact int64 "
                                 f"fingerprint), {g(med(per['stats'], 1e3 * (n + 1)))} ms per forward against a {g(b)} ms bare forward"),
        row('stats capture / output_hidden_states', so, 'x', spread(st_ohs), '<= 1.00x (no slower)', so <= 1.0,
            '' if so <= 1.0 else f"transformers' hooks only keep a reference to each tensor; stats mode reduces each one on "
                                 f"its device ({g(med(per['stats'], 1e3 * (n + 1)))} ms per forward, "
                                 f"{g(100 * med(per['stats'], n + 1) / med(t['bare']))}% of a bare forward), so it cannot be "
                                 f"cheaper, only within the noise"),
        row(f'tensor_stats of one [{T}, {tgt.config.hidden_size}] tensor', med(per['stats'], 1e3), 'ms', spread(per['stats'], 1e3, ' ms'),
            note=f"x {n + 1} hooks = {g(med(per['stats'], 1e3 * (n + 1)))} ms per forward; of it the exact fingerprint "
                 f"(_hash_device) {g(med(per['hash'], 1e3))} ms; info"),
        row('full capture of resid[*] / bare', med(rs['full']), 'x', spread(rs['full']), note='CPU clone of every tensor; info'),
        row('output_hidden_states=True / bare', med(rs['ohs']), 'x', spread(rs['ohs']), note='info'),
    ]
    if nn_fn is not None:
        rows.append(row('nnsight trace saving resid[*] / bare', med(rs['nnsight']), 'x', spread(rs['nnsight']),
                        note=f"{nn_info}; saved tensors identical to our full capture: {'yes' if nn_same else 'NO'}"))
        sn = ratios(t['stats'], t['nnsight'])
        rows.append(row('stats capture / nnsight trace', med(sn), 'x', spread(sn), note='info'))
    else:
        rows.append(unavailable('nnsight trace saving resid[*] / bare', nn_info))
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"target {p.target_path} ({p.model_type}, {n} layers, hidden {p.target.config.hidden_size}); "
                      f"one forward over {T} random token ids, use_cache=False, no_grad; all variants interleaved in each of "
                      f"{reps} repeats (order rotated); ratios are per repeat, then the median. Bare, stats and full run on a freshly "
                      f"loaded target (forward hooks on it before/after: {hooks0}/{hooks1}); output_hidden_states and nnsight "
                      f"each on their own copy, since both leave hooks or wrappers behind.")
