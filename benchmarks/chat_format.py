"""What the prompt format costs a draft: the zoo drafts (trained on raw text) measured on the zoo's held-out prompts as
raw text and as chats of the same content, rendered by a chat template (the testing kit's `CHAT_TEMPLATE`, added to a
copy of each zoo target's tokenizer). The same prompts on both sides: a paired comparison (`stats.paired_change`,
prompts resampled), accept length = tokens emitted per verify, greedy chain.

    python benchmarks/chat_format.py [--prompts N] [--tokens N] [--steps N]
"""
from __future__ import annotations
import argparse, sys, tempfile, time
from pathlib import Path
import torch

def per_prompt(rep)->torch.Tensor:
    "[m, 2] per prompt: tokens emitted by verifies (accept lengths summed), verify cycles."
    rows = [[sum(st.verify.accept_length for st in run if st.verify is not None), sum(st.verify is not None for st in run)] for run in rep.runs]
    return torch.tensor(rows, dtype=torch.float64)

def measure(name:str, n_prompts:int, tokens:int, steps:int, where:Path)->dict:
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import run_prompts
    from eagle3_workbench.prompts import zoo_prompts, render_chats, Chat
    from eagle3_workbench.stats import paired_change, bootstrap_ci
    from eagle3_workbench.testing import chat_target
    raw = zoo_prompts(n_prompts)
    plain = load_pair(f"zoo:{name}", f"zoo:{name}-eagle3")
    chat = load_pair(str(chat_target(where/name, f"zoo:{name}")), f"zoo:{name}-eagle3")
    chats = render_chats([Chat(({'role': 'user', 'content': p},), f"zoo prompt {i + 1}") for i, p in enumerate(raw)], chat.tokenizer)
    kw = dict(max_new_tokens=tokens, progress=False, speculative_num_steps=steps, speculative_eagle_topk=1)
    a, b = run_prompts(plain, raw, **kw), run_prompts(chat, chats, **kw)
    ra, rb = per_prompt(a), per_prompt(b)
    d, lo, hi = paired_change(rb, ra)
    al = lambda r: [[float(st.verify.accept_length) for st in run if st.verify is not None] for run in r.runs]
    return dict(pair=name, raw=a.summary['accept_length'], raw_ci=bootstrap_ci(al(a)), chat=b.summary['accept_length'], chat_ci=bootstrap_ci(al(b)),
                change=d, lo=lo, hi=hi, lossless=(a.lossless, b.lossless), prompts=len(raw))

def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--prompts', type=int, default=48); ap.add_argument('--tokens', type=int, default=32); ap.add_argument('--steps', type=int, default=5)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        rows = [measure(n, a.prompts, a.tokens, a.steps, Path(d)) for n in ('tiny-llama', 'tiny-dsv3')]
    print(f"| pair | raw accept length | chat accept length | chat - raw (paired, 95% CI) | lossless (raw, chat) |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| zoo:{r['pair']} | {r['raw']:.3f} ({r['raw_ci'][0]:.3f}-{r['raw_ci'][1]:.3f}) | {r['chat']:.3f} ({r['chat_ci'][0]:.3f}-{r['chat_ci'][1]:.3f}) "
              f"| {r['change']:+.3f} ({r['lo']:+.3f} to {r['hi']:+.3f}) | {r['lossless'][0]}, {r['lossless'][1]} |")
    print(f"\n{rows[0]['prompts']} held-out zoo prompts x {a.tokens} new tokens, greedy chain (steps {a.steps}, topk 1), torch threads 1; "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)

if __name__ == '__main__': main()
