"""The speculative engine over many pairs and settings: lossless on every one, sampling that keeps the target's distribution
(the phases, masks, metrics and bad inputs are tested in the engine chapter)."""
import pytest, torch
from eagle3_workbench.testing import tiny_pair, random_prompts
from eagle3_workbench.loading import load_pair
from eagle3_workbench.engine import Session, greedy_reference, run_prompts
from eagle3_workbench.prompts import read_prompts

@pytest.mark.slow
@pytest.mark.parametrize('arch', ['llama', 'deepseek_v3'])
def test_random_pair_lossless_chain_and_tree(tmp_path, arch):
    pair = tiny_pair(tmp_path, arch)
    for kw in (dict(speculative_num_steps=3), dict(speculative_num_steps=3, speculative_eagle_topk=3, speculative_num_draft_tokens=6)):
        rep = run_prompts(pair, random_prompts(20), max_new_tokens=8, progress=False, **kw)
        for p, out in zip(random_prompts(20), rep.outputs):   # independent check, token for token
            assert out == greedy_reference(pair.target, p, len(out))
        assert rep.lossless is True

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
    pair = tiny_pair(tmp_path, 'llama', vocab=vocab, draft_vocab=6)
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

@pytest.mark.slow
@pytest.mark.parametrize('name', ['tiny-dsv3', 'tiny-llama'])
def test_zoo_pairs_lossless_chain_and_tree_on_20_heldout_prompts(name):
    "On real trained pairs (which accept many tokens), speculative output equals target-only greedy decoding."
    pair = load_pair(f'zoo:{name}')
    prompts = read_prompts(n=20)
    for kw in (dict(speculative_num_steps=5), dict(speculative_num_steps=4, speculative_eagle_topk=3, speculative_num_draft_tokens=8)):
        rep = run_prompts(pair, prompts, max_new_tokens=12, progress=False, **kw)
        assert rep.lossless is True and rep.summary['accept_length'] > 1.5, (kw, rep.summary['accept_length'])
        ids = [pair.tokenizer(p, add_special_tokens=False)['input_ids'] for p in prompts[:3]]
        for p, out in zip(ids, rep.outputs):   # spot-check against an independent greedy decode
            assert out == greedy_reference(pair.target, p, len(out))
