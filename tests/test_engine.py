"The speculative engine: lossless on every pair and setting, exact tree masks, sampling that keeps the target's distribution."
import math, statistics, pytest, torch
from conftest import save_tiny_target, tiny_draft_config, random_draft
from eagle3_workbench.models import save_draft, load_pair, target_parts
from eagle3_workbench.engine import Session, greedy_reference, run_prompts, tree_mask, summarize, bootstrap_ci, _cache_kw

def make_pair(tmp_path, arch='llama', vocab=96, draft_vocab=48, seed=0):
    save_tiny_target(tmp_path/arch, arch, vocab=vocab, seed=seed)
    cfg = tiny_draft_config(vocab=vocab, draft_vocab=draft_vocab)
    save_draft(random_draft(cfg, seed), tmp_path/f'{arch}-draft', cfg)
    return load_pair(str(tmp_path/arch), str(tmp_path/f'{arch}-draft'))

def prompts(n, vocab=96, length=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]

@pytest.mark.slow
@pytest.mark.parametrize('arch', ['llama', 'deepseek_v3'])
def test_random_pair_lossless_chain_and_tree(tmp_path, arch):
    pair = make_pair(tmp_path, arch)
    for kw in (dict(speculative_num_steps=3), dict(speculative_num_steps=3, speculative_eagle_topk=3, speculative_num_draft_tokens=6)):
        rep = run_prompts(pair, prompts(20), max_new_tokens=8, progress=False, **kw)
        for p, out in zip(prompts(20), rep.outputs):   # independent check, token for token
            assert out == greedy_reference(pair.target, p, len(out))
        assert rep.lossless is True

def test_tree_verify_equals_each_branch_alone(tmp_path):
    "One forward under a tree mask gives the logits of each root-to-leaf branch run on its own."
    from transformers import DynamicCache
    pair = make_pair(tmp_path, 'deepseek_v3')
    t, kw = pair.target, _cache_kw(pair.target)
    prefix = prompts(1)[0]
    parents = [-1, 0, 0, 1, 2]            # root, two children, one grandchild under each
    toks = [5, 17, 23, 42, 7]
    depth = [0, 1, 1, 2, 2]
    with torch.no_grad():
        c = DynamicCache(); t(input_ids=torch.tensor([prefix]), use_cache=True, **{kw: c})
        P = len(prefix)
        tree = t(input_ids=torch.tensor([toks]), position_ids=torch.tensor([[P + d for d in depth]]),
                 attention_mask=tree_mask(parents, P), use_cache=True, **{kw: c}).logits[0]
        for leaf, branch in ((3, [0, 1, 3]), (4, [0, 2, 4])):
            alone = t(input_ids=torch.tensor([prefix + [toks[i] for i in branch]])).logits[0, P:]
            torch.testing.assert_close(tree[branch], alone, atol=1e-5, rtol=1e-5)

def test_phases_and_records(tmp_path):
    pair = make_pair(tmp_path)
    s = Session(pair, speculative_num_steps=4)
    e = s.extend(prompts(1)[0])
    assert s.tokens == e.prompt_ids + [e.next_token] and len(s.draft_cache) == len(e.prompt_ids)
    d = s.draft()
    assert len(d.tokens) == 4 and d.depths == [1, 2, 3, 4] and d.parents == [-1, 0, 1, 2]
    with pytest.raises(RuntimeError, match='verify'): s.draft()
    v = s.verify()
    assert v.root == e.next_token and v.accept_length == v.accepted + 1 and v.emitted == v.accepted_tokens + [v.bonus]
    # both caches hold exactly the committed tokens; the newest token is pending
    assert s.target_cache.get_seq_length() == len(s.tokens) - 1 == len(s.draft_cache)
    assert [type(h).__name__ for h in s.history] == ['ExtendResult', 'DraftResult', 'VerifyResult']
    r = s.run(12)
    assert len(s.tokens) - len(e.prompt_ids) - 1 >= 12 and all(x.cycle == i + 1 for i, x in enumerate(r))

def test_bad_input_leaves_session_unchanged(tmp_path):
    pair = make_pair(tmp_path)
    s = Session(pair)
    s.extend(prompts(1)[0]); before = (list(s.tokens), s.settings, s.wiring, s.target_cache.get_seq_length())
    with pytest.raises(ValueError, match='empty prompt'): s.extend([])
    with pytest.raises(ValueError, match='leaves no room'): s.extend([1] * 300)
    with pytest.raises(ValueError, match='speculative_num_steps=0'): s.configure(speculative_num_steps=0)
    with pytest.raises(ValueError, match='speculative_eagle_topk=49'): s.configure(speculative_eagle_topk=49)
    with pytest.raises(ValueError, match=r'resid index 6 out of range, expected 0 .. 5'): s.configure(wiring=(2, 3, 6))
    with pytest.raises(ValueError, match='takes 3 aux chunks'): s.configure(wiring=(2, 3))
    assert (list(s.tokens), s.settings, s.wiring, s.target_cache.get_seq_length()) == before
    with pytest.raises(ValueError, match='speculative_num_steps'): Session(pair, speculative_num_steps=0)
    s.step()  # still usable

def _exact_second_token(pair, prompt, vocab):
    "P(x_{P+1}) = sum_x p(x | prompt) p(x_{P+1} | prompt, x), computed by enumeration."
    with torch.no_grad():
        p1 = pair.target(input_ids=torch.tensor([prompt])).logits[0, -1].softmax(-1)
        batch = torch.tensor([prompt + [x] for x in range(vocab)])
        p2 = pair.target(input_ids=batch).logits[:, -1].softmax(-1)
    return (p1[:, None] * p2).sum(0)

@pytest.mark.slow
@pytest.mark.parametrize('topk', [1, 3])
def test_sampling_keeps_target_distribution(tmp_path, topk):
    "Rejection sampling (chain) and draw-and-match (tree) emit tokens distributed as the target's (chi-square test)."
    vocab = 8
    pair = make_pair(tmp_path, 'llama', vocab=vocab, draft_vocab=6)
    prompt = [1, 2, 3, 4]
    exact = _exact_second_token(pair, prompt, vocab)
    n, counts = 500, torch.zeros(vocab)
    s = Session(pair, speculative_num_steps=2, speculative_eagle_topk=topk, temperature=1.0, seed=123)
    accepted = 0
    for i in range(n):
        s.extend(prompt); v = s.step().verify
        counts[s.tokens[len(prompt) + 1]] += 1; accepted += v.accepted
    assert accepted > 0.1 * n          # the speculative path really was exercised
    expected = exact * n
    chi2 = float(((counts - expected) ** 2 / expected.clamp(min=1e-9)).sum())
    assert chi2 < 24.3, (chi2, counts.tolist(), expected.tolist())   # 7 degrees of freedom, p = 0.001

def test_metrics_definitions():
    class V:  # minimal stand-ins carrying what summarize reads
        def __init__(self, a): self.accept_length, self.seconds = a + 1, {'verify': 0.1}
    class S:
        def __init__(self, a): self.verify, self.draft = V(a), type('D', (), {'seconds': {'draft': 0.1}})()
    runs = [[S(3), S(0)], [S(5), S(1)]]  # accepted counts 3, 0, 5, 1 with 5 steps
    m = summarize(runs, steps=5)
    assert m['accept_length'] == (4 + 1 + 6 + 2) / 4
    assert m['per_position_acceptance'] == [3/4, 2/4, 2/4, 1/4, 1/4]
    assert m['accept_rate'] == 9 / 20 and m['cycles'] == 4 and m['tokens'] == 13
    lo, hi = bootstrap_ci([[1.0, 1.0], [3.0, 3.0]])
    assert lo == 1.0 and hi == 3.0

def test_bootstrap_interval_matches_normal_theory():
    "For many independent values the percentile bootstrap of the mean approaches mean +- 1.96 sd / sqrt(n)."
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(400, generator=g, dtype=torch.float64) * 2 + 5).tolist()
    m, sd = statistics.fmean(x), statistics.stdev(x)
    half = 1.96 * sd / math.sqrt(len(x))
    lo, hi = bootstrap_ci([[v] for v in x], n=4000)
    assert abs(lo - (m - half)) < 0.15 * half and abs(hi - (m + half)) < 0.15 * half, (lo, hi, m - half, m + half)
    # groups are resampled whole: two long constant groups give the two values as the interval's ends
    assert bootstrap_ci([[0.0] * 50, [1.0] * 50], n=2000) == (0.0, 1.0)
    assert bootstrap_ci([[1.0, 2.0]]) == (1.5, 1.5) and all(math.isnan(v) for v in bootstrap_ci([[], []]))

@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny-dsv3', 'tiny-llama'])
def test_zoo_pairs_lossless_chain_and_tree_on_20_heldout_prompts(name):
    "On real trained pairs (which accept many tokens), speculative output equals target-only greedy decoding."
    from eagle3_workbench.engine import zoo_prompts
    pair = load_pair(f'zoo:{name}')
    prompts = zoo_prompts(20)
    for kw in (dict(speculative_num_steps=5), dict(speculative_num_steps=4, speculative_eagle_topk=3, speculative_num_draft_tokens=8)):
        rep = run_prompts(pair, prompts, max_new_tokens=12, progress=False, **kw)
        assert rep.lossless is True and rep.summary['accept_length'] > 1.5, (kw, rep.summary['accept_length'])
        ids = [pair.tokenizer(p, add_special_tokens=False)['input_ids'] for p in prompts[:3]]
        for p, out in zip(ids, rep.outputs):   # spot-check against an independent greedy decode
            assert out == greedy_reference(pair.target, p, len(out))
