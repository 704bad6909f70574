"""A wide draft stored in bfloat16 and computed in float32 (issue 53): the numbers of its float32 copy, without the copy."""
import sys, tempfile
from pathlib import Path
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from eagle3_workbench.draft import WIDEN_BYTES, DraftCache
from eagle3_workbench.loading import save_draft, load_draft
from eagle3_workbench.recording import recorded_pair
from eagle3_workbench.doctor import diagnose
import eagle3_workbench.search as search

sys.path.insert(0, str(Path(__file__).resolve().parent.parent/'benchmarks'))
import truesize   # noqa: E402  the true-size benchmark's draft and recording, at its tiny stand-in


def _built(cfg):
    tmp = Path(tempfile.mkdtemp(prefix='widened-'))
    d = truesize.make_draft(cfg)   # built in bfloat16, saved so
    save_draft(d, tmp/'draft', cfg)
    return tmp, d


def test_bfloat16_storage_gives_the_float32_copys_diagnosis():
    cfg, n = truesize.draft_config(True)
    tmp, d = _built(cfg)
    truesize.write_recording(tmp/'rec', d, n, truesize.planted(n))
    got = {}
    for storage in (None, torch.bfloat16):   # None: today's float32 copy of every weight
        p = recorded_pair(tmp/'rec', tmp/'draft', storage=storage)
        assert {q.dtype for q in p.draft.parameters()} == {torch.float32 if storage is None else torch.bfloat16}
        dg = diagnose(p, accept=False)
        table = search._TABLES[-1][1]
        fits = {w: table.score(w) for w in (truesize.planted(n), (1, n // 2 - 1, n - 4), (6, n // 2 + 3, n - 6))}
        got[storage] = dg, fits
    (a, fa), (b, fb) = got[None], got[torch.bfloat16]
    assert (a.verdict, a.codes, a.recommended, a.search['candidates']) == (b.verdict, b.codes, b.recommended, b.search['candidates'])
    for w in fa:
        torch.testing.assert_close(fb[w][0], fa[w][0], rtol=1e-5, atol=0)   # per-prompt fits: the same float32 arithmetic
        assert torch.equal(fb[w][1], fa[w][1])                              # agreeing positions


class _LargestFloat32(TorchDispatchMode):
    "The largest float32 tensor any op makes while active (parameters made before it are not seen)."
    def __init__(self): super().__init__(); self.largest = 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32: self.largest = max(self.largest, t.numel())
        return out


def test_float32_compute_makes_no_float32_copy_of_a_wide_weight():
    cfg, _ = truesize.draft_config(True)
    cfg.update(hidden_size=1024, intermediate_size=32768, num_attention_heads=8, num_key_value_heads=2, head_dim=128, draft_vocab_size=500)
    tmp, _ = _built(cfg)
    d, _ = load_draft(tmp/'draft', storage=torch.bfloat16)   # computed in float32 (load_draft's dtype), kept in bfloat16
    biggest = max(q.numel() for q in d.parameters())
    assert biggest == 32768 * 1024 and biggest * 4 >= 2 * WIDEN_BYTES   # a float32 copy of the MLP's weight: twice the slice
    assert {q.dtype for q in d.parameters()} == {torch.bfloat16} and d.dtype == torch.float32
    T, H = 6, d.config.target_hidden_size
    feats, ids = torch.randn(1, T, 3 * H), torch.randint(0, cfg['vocab_size'], (1, T))
    with torch.no_grad(), _LargestFloat32() as seen: h, logits = d(feats, ids, torch.arange(T)[None], DraftCache())
    assert logits.dtype == torch.float32
    assert seen.largest <= WIDEN_BYTES // 4 < biggest   # float32 slices only: never the [32768, 1024] weight widened whole
    ref, _ = load_draft(tmp/'draft')                   # today's path: a float32 copy of every weight
    assert max(q.numel() for q in ref.parameters() if q.dtype == torch.float32) == biggest   # there, the weight whole in float32
    with torch.no_grad(): h2, logits2 = ref(feats, ids, torch.arange(T)[None], DraftCache())
    torch.testing.assert_close(logits, logits2, rtol=1e-5, atol=1e-6)


def test_true_size_benchmark_forces_the_float32_path_and_records_the_cpu_flags():
    "truesize --compute float32: the doctor's draft kept in bfloat16 (the no-bfloat16-units path, on any host), the flags it saw recorded."
    r = truesize.measure(True, threads=1, dtype='float32', today=False)
    assert (r['dtype'], r['storage']) == ('float32', 'bfloat16')
    assert r['new']['recommended'] == r['planted'] and r['new']['verdict'] == 'miswired'
    flags = open('/proc/cpuinfo').read().split('flags', 1)[1].split('\n', 1)[0].split()
    assert r['cpu_flags'] == [f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile', 'avx512_vnni', 'fma') if f in flags]
    c = truesize.measure(True, threads=1, dtype='float32', today=False, copy=True)   # the float32 copy: the same answer
    assert c['storage'] == 'float32' and c['new']['recommended'] == r['new']['recommended']
    for w, f in r['new']['fits'].items():
        assert max(abs(a - b) / abs(b) for a, b in zip(f, c['new']['fits'][w])) < 1e-5


def test_the_stepper_over_bfloat16_storage_decodes_as_the_float32_copy():
    "Session (the `run` stepper) with the draft kept in bfloat16 and computed in float32: the float32 copy's proposals and accepts."
    import dataclasses
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    p = load_pair('zoo:tiny-llama')
    d16, _ = load_draft('zoo:tiny-llama-eagle3', target=p.target, storage=torch.bfloat16)
    assert {q.dtype for q in d16.parameters()} == {torch.bfloat16} and d16.dtype == torch.float32
    got = {}
    for name, dr in (('copy', p.draft), ('widened', d16)):
        s = Session(dataclasses.replace(p, draft=dr))
        r = s.run(24, prompt='The quick brown fox jumps over the lazy dog because')
        got[name] = s.tokens, [(x.verify.proposed, x.verify.accepted) for x in r]
    assert got['widened'] == got['copy'] and sum(a for _, a in got['copy'][1]) > 0   # something accepted: the draft was read
