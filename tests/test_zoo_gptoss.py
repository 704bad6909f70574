"""The GPT-OSS-shaped zoo pair (`tiny-gptoss`): a trained sliding-window target (a 32-token window on every other layer,
attention sinks, MoE, YaRN) and its draft trained on resid[2, 4, 5]. Checked against transformers itself (its forward
with the window switched off, its greedy `generate`), against the engines' rows for gpt_oss.py, and by measurement:
acceptance as trained against a planted miswiring on the same prompts, and the doctor's verdicts."""
import json
import pytest, torch
from eagle3_workbench.loading import load_pair
from eagle3_workbench.target import zoo_root, target_parts
from eagle3_workbench.engine import Session, run_prompts
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.wiring import engine_readings, resolve_wiring
from eagle3_workbench.doctor import diagnose
from eagle3_workbench.stats import paired_change
from eagle3_workbench.zoo import GPTOSS, GPTOSS_WINDOW, corpus_files, encode_files, heldout_windows, teacher_forced_agreement
from eagle3_workbench.card import zoo_listing
from eagle3_workbench.engines import Engine

def engine_name(e): return f"SGLang {Engine.parse(e).release}"

TRAINED = (2, 4, 5)        # the engines' default for 8 layers, what the draft was trained on
PLANTED = (0, 4, 5)        # the embedding captured in place of the low layer
PROMPTS = read_prompts(n=16)

@pytest.fixture(scope='module')
def pair():
    return load_pair('zoo:tiny-gptoss')

def _ids(pair, text)->list: return pair.tokenizer(text)['input_ids']

@torch.no_grad()
def _generate(model, ids:list, n:int)->list:
    "transformers' own greedy decoding: its cache and its per-layer-type masks, the reference."
    x = torch.tensor([ids])
    return model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, min_new_tokens=n,
                          pad_token_id=0)[0, len(ids):].tolist()

def test_the_pair_is_gpt_oss_shaped(pair):
    cfg = json.loads((zoo_root()/'tiny-gptoss'/'config.json').read_text())
    assert cfg['model_type'] == 'gpt_oss' and cfg['num_hidden_layers'] == 8 == pair.n_layers
    assert cfg['layer_types'] == ['sliding_attention', 'full_attention'] * 4 and cfg['sliding_window'] == GPTOSS_WINDOW == 32
    assert cfg['num_local_experts'] == 4 and cfg['num_experts_per_tok'] == 2
    assert cfg['rope_scaling']['rope_type'] == 'yarn' and cfg['rope_scaling']['factor'] == 32.0 and cfg['rope_theta'] == 150000.0   # hub spelling
    attn = target_parts(pair.target)['layers'][0].self_attn
    assert attn.sinks.shape == (cfg['num_attention_heads'],) and attn.sinks.abs().sum() > 0      # a learned sink per head
    assert hasattr(target_parts(pair.target)['layers'][7].mlp, 'experts')
    assert pair.report.embedding == 'target' and pair.report.vocab_map == 'checkpoint' and pair.report.unknown_keys == []
    assert pair.draft.config.rope_scaling is None and pair.draft.config.rope_theta == 10000.0   # as the public GPT-OSS drafts
    size = sum(p.stat().st_size for d in ('tiny-gptoss', 'tiny-gptoss-eagle3') for p in (zoo_root()/d).rglob('*') if p.is_file())
    assert size < 8 * 2**20, f"{size / 2**20:.1f} MB"

def test_the_window_matters_on_zoo_prompts(pair, monkeypatch):
    "transformers' forward with the window switched off agrees inside the window and differs past it, where the argmax moves too."
    ids = torch.tensor([_ids(pair, PROMPTS[0])[:96]])
    with torch.no_grad(): windowed = pair.target(input_ids=ids).logits[0]
    monkeypatch.setattr(pair.target.config, 'sliding_window', 4096)
    with torch.no_grad(): unwindowed = pair.target(input_ids=ids).logits[0]
    inside, past = slice(0, GPTOSS_WINDOW), slice(GPTOSS_WINDOW + 1, None)
    assert torch.allclose(windowed[inside], unwindowed[inside], atol=1e-4)
    assert (windowed[past] - unwindowed[past]).abs().max() > 0.5
    assert (windowed[past].argmax(-1) != unwindowed[past].argmax(-1)).any()

@pytest.mark.parametrize('settings', [dict(speculative_num_steps=5),
                                      dict(speculative_num_steps=4, speculative_eagle_topk=3, speculative_num_draft_tokens=8)],
                         ids=['chain', 'tree'])
def test_speculative_equals_generate(pair, settings):
    "Chain and tree emit transformers' greedy `generate` token for token, far past the window, with proposals accepted."
    accepted = 0
    for text in PROMPTS[:4]:
        ids = _ids(pair, text)
        s = Session(pair, **settings)
        s.extend(ids)
        steps = s.run(32)
        out = s.tokens[len(ids):]
        assert out == _generate(pair.target, ids, len(out)), text[:40]
        assert len(ids) + len(out) > 2 * GPTOSS_WINDOW
        accepted += sum(st.verify.accepted for st in steps)
    assert accepted >= 4 * 16, accepted   # the trained draft gets most of the 4 x 32 tokens accepted

@pytest.fixture(scope='module')
def runs(pair):
    "Chain runs on the same 16 held-out prompts, as trained and with the embedding in place of the low layer."
    return {w: run_prompts(pair, PROMPTS, 24, wiring=w, progress=False) for w in (TRAINED, PLANTED)}

def test_acceptance_as_trained_and_the_paired_loss_of_a_miswiring(runs):
    trained, planted = runs[TRAINED], runs[PLANTED]
    assert trained.lossless and planted.lossless   # a wrong wiring costs speed, never output
    assert trained.summary['accept_length_ci'][0] > 2.0, trained.summary
    per = lambda r: torch.tensor([[sum(st.verify.accept_length for st in run), len(run)] for run in r.runs], dtype=torch.float64)
    gain, lo, hi = paired_change(per(trained), per(planted))   # the same prompts: paired, resampling prompts
    assert lo > 0, (gain, lo, hi)   # measured: +0.58 (0.20 .. 1.04) on 16 prompts x 24 tokens
    assert abs(gain - (trained.summary['accept_length'] - planted.summary['accept_length'])) < 1e-6

def test_engine_readings_of_gpt_oss_py(pair):
    "SGLang's gpt_oss.py adds one (largest id 4 is not N = 8): the trained layers; vLLM reads the ids verbatim, one layer early, "
    "and the draft measurably agrees less there."
    cfg = json.loads((zoo_root()/'tiny-gptoss-eagle3'/'config.json').read_text())
    assert cfg['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [1, 3, 4] and 'rope_scaling' not in cfg
    fed = {r.engine: r.fed for r in engine_readings(cfg, 8, 'gpt_oss')}
    assert fed['SGLang 0.5.23'] == TRAINED and fed['vLLM 0.32'] == (1, 3, 4), fed
    assert resolve_wiring(cfg, 8, 'sglang==0.5.23', 'gpt_oss').resid_layers == TRAINED
    assert pair.wiring.resid_layers == TRAINED
    assert load_pair('zoo:tiny-gptoss', engine='vllm==0.32.0').wiring.resid_layers == (1, 3, 4)
    windows = heldout_windows(encode_files(pair.tokenizer, corpus_files()[1]), 8, 128)
    acc = teacher_forced_agreement(pair.target, pair.draft, windows, {'trained': TRAINED, 'vllm': (1, 3, 4), 'planted': PLANTED})
    assert acc['trained'][0] > acc['vllm'][0] and acc['trained'][0] > acc['planted'][0] + 0.1, acc

def test_doctor_ok_as_configured_and_names_the_planted_fault(pair):
    ok = diagnose(pair, accept=False)
    assert ok.configured == list(TRAINED) and ok.verdict == 'ok', str(ok)
    assert ok.recommended['for_engine']['name'] == engine_name('sglang') and ok.recommended['for_engine']['ids'] == [1, 3, 4]   # the newest release
    # the draft's plain rope at 10,000 beside the target's YaRN at 150,000 is how it was trained: measured, info, not a warning
    rope = {f.code: f for f in ok.findings if f.code in ('ROPE_MISMATCH', 'ROPE_SCALING_MISMATCH')}
    assert set(rope) == {'ROPE_MISMATCH', 'ROPE_SCALING_MISMATCH'} and all(f.severity == 'info' for f in rope.values()), str(ok)
    m = rope['ROPE_MISMATCH'].evidence['measured']
    assert m['trained_with'] == 'its own rope' and m['ci'][1] < 0 and m['agreement_target_rope'] < m['agreement'], m
    bad = diagnose(pair, wiring=PLANTED, accept=False)
    assert bad.verdict == 'miswired' and 'AUX_EMBEDDING_CAPTURED' in bad.codes, str(bad)
    assert bad.recommended['resid_layers'] == list(TRAINED)

def test_zoo_lists_the_gptoss_pair():
    lines = {l.split()[0]: l for l in zoo_listing()}
    assert 'gpt_oss architecture, 8 layers, hidden 128' in lines['zoo:tiny-gptoss'] and 'window of 32 tokens on 4 of 8 layers' in lines['zoo:tiny-gptoss']
    assert 'trained on resid[2, 4, 5] (config ids [1, 3, 4], specforge convention)' in lines['zoo:tiny-gptoss-eagle3']
    card = (zoo_root()/'ZOO.md').read_text()
    assert "## tiny-gptoss + tiny-gptoss-eagle3: a sliding-window target (GPT-OSS's shape)" in card and set(GPTOSS) == {'tiny-gptoss'}
