"""The accept length's setup says how many prompts it ran: those asked (the doctor's `accept_prompts`), and when it ran
more (the paired change stayed within noise, so the prompts were doubled) or fewer (there were no more), that too."""
import copy
import torch
from eagle3_workbench.loading import load_pair
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.scores import target_pass
from eagle3_workbench.accepts import accept_lengths

def blind_pair():
    "The zoo pair's recorded pass on 8 prompts, and its draft with the fc zeroed: blind to its features, so any two wirings accept alike."
    pair = load_pair('zoo:tiny-dsv3')
    rec, seqs = target_pass(pair, read_prompts(n=8), continuation=8 + 5 + 2)
    blind = copy.deepcopy(pair.draft)
    with torch.no_grad():
        for p in blind.fc.parameters(): p.zero_()
    return rec, seqs, blind

def test_doubled_prompts_are_said():
    rec, seqs, blind = blind_pair()
    calls = []
    def source(a, b): calls.append((a, b)); return rec, seqs[a:b]
    acc = accept_lengths(source, len(seqs), blind, (0, 2, 6), (2, 6, 9), n_prompts=2, tokens=8, max_prompts=8)
    assert acc['change']['gain'] == 0 and acc['change']['label'] == 'within noise'   # the planted blindness: no change at all
    assert calls == [(0, 2), (2, 4), (4, 8)] and acc['change']['prompts'] == 8   # doubled 2 -> 4 -> 8 (max_prompts)
    assert acc['setup'] == "chain of 5 steps, the first 8 prompts x 8 tokens, paired (2 asked, doubled while the paired change was within noise)"

def test_prompts_as_asked_or_as_many_as_there_are():
    rec, seqs, blind = blind_pair()
    source = lambda a, b: (rec, seqs[a:b])
    asked = accept_lengths(source, len(seqs), blind, (0, 2, 6), (2, 6, 9), n_prompts=2, tokens=8, max_prompts=2)
    assert asked['setup'] == "chain of 5 steps, the first 2 prompts x 8 tokens, paired" and asked['change']['prompts'] == 2
    fewer = accept_lengths(source, len(seqs), blind, (0, 2, 6), (2, 6, 9), n_prompts=20, tokens=8)
    assert fewer['setup'] == "chain of 5 steps, the first 8 prompts x 8 tokens, paired (20 asked, 8 there are)"
