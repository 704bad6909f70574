"""What the engine recording scripts share: the prompts as token ids, a draft's vocabulary, and how a recording made by an
engine compares with the in-process recorder's on the same prompts (tokens, greedy tokens, resid[k], logits, and the
doctor's answers). Imported by scripts/sglang_record.py, scripts/vllm_record.py and scripts/gpu_sglang_check.py."""
from __future__ import annotations
import json
from pathlib import Path

def prompt_ids(target, # the target's directory or zoo:NAME (its tokenizer is used)
               prompts=None, # a prompt file (read_prompts), or None for the zoo's held-out prompts
               n:int=8, # the first n prompts
               prompt_tokens:int|None=None, # cut each prompt to its first tokens (keeps fixtures small)
              )->list:
    "Token ids of the prompts, as the in-process recorder tokenises text (no special tokens)."
    from eagle3_workbench.loading import load_tokenizer
    from eagle3_workbench.formats import resolve_path
    from eagle3_workbench.prompts import read_prompts
    tok = load_tokenizer(resolve_path(target))
    ids = [tok(p, add_special_tokens=False)['input_ids'] for p in read_prompts(prompts, n)]
    return [p[:prompt_tokens] if prompt_tokens else p for p in ids]

def fresh_raw(raw)->Path|None:
    "The raw folder of one engine run, checked to be new or empty (a ValueError naming it otherwise)."
    if raw is None: return None
    if (raw := Path(raw)).exists() and (not raw.is_dir() or any(raw.iterdir())):
        raise ValueError(f"{raw}: not an empty folder: --raw takes a new or empty folder (the raw passes of one run)")
    return raw

def draft_vocab_ids(draft)->list:
    "The target ids a draft can propose (its d2t-mapped vocabulary): what logits='vocab' keeps."
    import torch
    from eagle3_workbench.loading import load_draft
    d, _ = load_draft(draft)
    return d.to_target_ids(torch.arange(d.config.draft_vocab_size)).tolist()

def in_process(target, prompts, max_new_tokens, logits='full', vocab_ids=None, dtype=None, source=None, borrow=('embed_tokens', 'lm_head')):
    "The in-process recorder's recording of the same prompts (in memory)."
    from eagle3_workbench.loading import load_target
    from eagle3_workbench.recording import record
    model, tok = load_target(target)
    return record(model, prompts, tokenizer=tok, max_new_tokens=max_new_tokens, logits=logits, vocab_ids=vocab_ids, dtype=dtype,
                  source=source, borrow=tuple(borrow))

def agreement(rec, ref)->dict:
    "How recording `rec` compares with `ref` (the same sequences): tokens, greedy tokens, resid[k] and logits."
    import torch
    out = dict(sequences=len(rec.sequences), same_tokens=0, greedy_same=0, positions=0, resid_max_rel=0.0, resid_identical_layers=0,
               resid_layers=0, logits_max_abs=0.0, logits_max_rel=0.0, request_same=rec.manifest['request'] == ref.manifest['request'])
    rel = lambda a, b: float(((a.double() - b.double()).norm(dim=-1) / b.double().norm(dim=-1).clamp_min(1e-30)).max())
    for i in range(len(rec.sequences)):
        if not torch.equal(rec.tokens(i), ref.tokens(i)): continue
        out['same_tokens'] += 1
        out['greedy_same'] += int((rec.greedy(i) == ref.greedy(i)).sum()); out['positions'] += len(rec.tokens(i))
        for k in rec.layers:
            a, b = rec.resid(k, i), ref.resid(k, i)
            out['resid_layers'] += 1; out['resid_identical_layers'] += int(torch.equal(a, b))
            out['resid_max_rel'] = max(out['resid_max_rel'], rel(a, b))
        a, b = rec.logits(i), ref.logits(i)
        out['logits_max_abs'] = max(out['logits_max_abs'], float((a - b).abs().max()))
        out['logits_max_rel'] = max(out['logits_max_rel'], rel(a, b))
    return out

def doctor_agreement(rec, ref, draft, engine=None)->dict:
    "The doctor on recording `rec` and on `ref` with the same draft (wired as `engine` reads it): verdict, recommended layers, accept lengths."
    from eagle3_workbench.recording import recorded_pair
    from eagle3_workbench.doctor import diagnose
    kw = dict(engine=engine) if engine else {}
    a, b = diagnose(recorded_pair(rec, draft, **kw)), diagnose(recorded_pair(ref, draft, **kw))
    pick = lambda d: dict(verdict=d.verdict, codes=sorted(d.codes), recommended=d.recommended.get('resid_layers'),
                          accept_before=d.recommended.get('accept_length_before'), accept_after=d.recommended.get('accept_length_after'))
    return dict(engine=pick(a), in_process=pick(b))

def report(rec, ref, draft=None, engine=None)->dict:
    "Print and return the agreement (and the doctor's, given a draft)."
    got = dict(agreement=agreement(rec, ref))
    g = got['agreement']
    print(f"vs the in-process recorder: same request {g['request_same']}; tokens identical in {g['same_tokens']}/{g['sequences']} sequences; "
          f"greedy identical at {g['greedy_same']}/{g['positions']} positions; resid[k] identical in {g['resid_identical_layers']}/{g['resid_layers']} "
          f"(sequence, layer) pairs, max per-token relative difference {g['resid_max_rel']:.2e}; logits max |diff| {g['logits_max_abs']:.2e}, "
          f"max per-row relative {g['logits_max_rel']:.2e}", flush=True)
    if draft is not None:
        got['doctor'] = doctor_agreement(rec, ref, draft, engine)
        print(f"doctor, {draft}: from the engine recording {got['doctor']['engine']}; from the in-process one {got['doctor']['in_process']}", flush=True)
    return got

def add_request_args(ap, engine:str):
    "The arguments both engine recorders take: which prompts, how long, what the recording keeps, and the check against the in-process recorder."
    ap.add_argument('--prompts', help='a prompt file (default: the zoo held-out prompts)')
    ap.add_argument('--n-prompts', type=int, default=8); ap.add_argument('--prompt-tokens', type=int, help='cut each prompt to this many tokens')
    ap.add_argument('--max-new-tokens', type=int, default=31)
    ap.add_argument('--borrow', default='embed_tokens,lm_head', help='what a draft may borrow from the target, kept in the recording')
    ap.add_argument('--logits-draft', help="keep only this draft's vocabulary's logits (logits='vocab')")
    ap.add_argument('--store-dtype', help=f'storage dtype of resid[k] in the recording (default: as {engine} computed)')
    ap.add_argument('--raw', type=Path, help='where the raw passes go (default: a temporary folder)')
    ap.add_argument('--compare', action='store_true', help="hold the recording against the in-process recorder's")
    ap.add_argument('--doctor-draft', help='with --compare: also the doctor from both recordings, with this draft')
    ap.add_argument('--doctor-engine', help="with --doctor-draft: the engine whose reading of the draft's layer ids the doctor checks (e.g. sglang==0.5.6)")

def save(path, obj): Path(path).write_text(json.dumps(obj, indent=1, default=str))
