"""The 61-layer zoo pair (`deep-dsv3`): DeepSeek-V3's shape (MLA, MoE, YaRN), a draft trained on resid[3, 31, 59] whose
ids [2, 30, 58] SGLang 0.5.6 reads as those layers, and the founding case replayed with its own ids from a recording:
the engine patched to capture the embedding for id -1, configured [-1, 2, 30], feeds resid[0, 3, 31]; acceptance drops;
the doctor names it and recommends [2, 30, 58] back."""
import json, math
import pytest, torch
from eagle3_workbench.loading import load_pair
from eagle3_workbench.target import zoo_root
from eagle3_workbench.engines import to_resid
from eagle3_workbench.wiring import resolve_wiring
from eagle3_workbench.recording import record, recorded_pair
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.doctor import diagnose
from eagle3_workbench.zoo import DEEP, corpus_files, encode_files, heldout_windows, teacher_forced_agreement
from eagle3_workbench.card import zoo_listing

ENGINE = 'sglang==0.5.6'
TRAINED = (3, 31, 59)      # what the draft was trained on (the zoo recipe's `deep_resid(61)`)
FOUNDING = (0, 3, 31)      # ids [-1, 2, 30] read +1 by an SGLang 0.5.6 patched to capture the embedding for id -1
PROMPTS = read_prompts()   # the doctor's default prompts (48): the search screens as it does for a user

@pytest.fixture(scope='module')
def live():
    "The pair as SGLang 0.5.6 wires it."
    return load_pair('zoo:deep-dsv3', engine=ENGINE)

@pytest.fixture(scope='module')
def recorded(live):
    "The target recorded once (in memory) on the doctor's prompts, with the continuations accept length needs; the draft wired as SGLang 0.5.6 reads it."
    rec = record(live, PROMPTS, max_new_tokens=31, source=dict(target='zoo:deep-dsv3'))
    return recorded_pair(rec, engine=ENGINE)   # draft=None: the zoo draft of a recorded zoo target

def test_the_pair_is_deepseek_v3_shaped(live):
    cfg = json.loads((zoo_root()/'deep-dsv3'/'config.json').read_text())
    assert cfg['model_type'] == 'deepseek_v3' and cfg['num_hidden_layers'] == 61 == live.n_layers
    assert cfg['q_lora_rank'] and cfg['kv_lora_rank'] and cfg['qk_rope_head_dim'] and cfg['qk_nope_head_dim']      # MLA
    assert cfg['n_routed_experts'] > 1 and cfg['num_experts_per_tok'] > 1 and cfg['first_k_dense_replace'] == 3     # MoE, dense first 3
    want = dict(factor=40.0, original_max_position_embeddings=128, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0)
    assert cfg['rope_scaling'] == dict(type='yarn', **want) and cfg['max_position_embeddings'] == 40 * 128   # hub spelling, as DeepSeek-V3's
    assert cfg['moe_layer_freq'] == 1 and cfg['topk_method'] == 'noaux_tc'   # keys SGLang's / vLLM's DeepSeek files read
    rp = live.target.config.rope_parameters   # what transformers built the model from
    assert rp['rope_type'] == 'yarn' and all(rp[k] == v for k, v in want.items())
    layers = live.target.model.layers
    assert hasattr(layers[0].self_attn, 'q_a_proj') and hasattr(layers[0].self_attn, 'kv_a_proj_with_mqa')
    assert not hasattr(layers[2].mlp, 'experts') and hasattr(layers[3].mlp, 'experts') and hasattr(layers[60].mlp, 'shared_experts')
    # the draft shares the target's embedding (same width), ships its vocabulary map, and rotates positions as the target does
    assert live.report.embedding == 'target' and live.report.vocab_map == 'checkpoint' and live.report.unknown_keys == []
    assert live.draft.config.rope_scaling['rope_type'] == 'yarn' and live.draft.config.rope_scaling['factor'] == 40.0
    assert live.draft.config.max_position_embeddings == 5120
    size = sum(p.stat().st_size for d in ('deep-dsv3', 'deep-dsv3-eagle3') for p in (zoo_root()/d).rglob('*') if p.is_file())
    assert size < 6 * 2**20, f"{size / 2**20:.1f} MB"

def test_sglang_056_reads_the_trained_layers(live):
    cfg = json.loads((zoo_root()/'deep-dsv3-eagle3'/'config.json').read_text())
    assert cfg['eagle_config']['eagle_aux_hidden_state_layer_ids'] == [2, 30, 58]      # the founding case's ids
    assert resolve_wiring(cfg, 61, ENGINE, 'deepseek_v3').resid_layers == TRAINED == live.wiring.resid_layers
    assert resolve_wiring(cfg, 61, 'sglang', 'deepseek_v3').resid_layers == (2, 30, 58)   # after PR #25454: verbatim, one layer early
    assert to_resid([-1, 2, 30], 'sglang', 61) == FOUNDING                                 # the patched engine's +1 reading of [-1, 2, 30]
    log = json.loads((zoo_root()/'build_log.json').read_text())['models']['deep-dsv3-eagle3']
    assert log['resid_layers'] == list(TRAINED) and log['target'] == 'deep-dsv3'

def test_the_target_is_trained_and_its_layers_differ(live):
    "A stack of near-identity layers would make neighbouring wirings tie: every layer moves the residual stream, and the target predicts."
    windows = heldout_windows(encode_files(live.tokenizer, corpus_files()[1]), 4, 128)
    with torch.no_grad(): out = live.target(input_ids=windows, labels=windows, output_hidden_states=True)
    hs = out.hidden_states
    step = torch.tensor([float(((hs[k + 1] - hs[k]).norm(dim=-1) / hs[k].norm(dim=-1)).mean()) for k in range(60)])
    assert float(step.min()) > 0.02, step
    # far below a uniform guess over the 2,048 tokens (7.62 nats): the narrow 61-layer target ends its training at 4.87
    # (the 12-layer tiny-dsv3 at 3.93), held out it measures about 5.1
    assert out.loss.item() < math.log(2048) - 2, out.loss.item()

def test_draft_agrees_on_its_trained_layers_not_on_the_founding_case(live):
    "Measured live on held-out windows, not read from the build log: as trained, far above the founding case's resid[0, 3, 31]; "
    "a layer earlier or later agrees nearly as well (61 narrow layers move the residual stream little from one to the next; "
    "the build log shows the same near tie), so what the doctor must catch here is the embedding fed, not a one-layer slip."
    windows = heldout_windows(encode_files(live.tokenizer, corpus_files()[1]), 8, 128)
    acc = teacher_forced_agreement(live.target, live.draft, windows, {'trained': TRAINED, 'one early': (2, 30, 58),
                                                                       'one late': (4, 32, 60), 'founding': FOUNDING})
    assert acc['trained'][0] > acc['founding'][0] + 0.4, acc
    assert all(abs(acc[k][0] - acc['trained'][0]) < 0.03 for k in ('one early', 'one late')), acc

def test_zoo_lists_the_deep_pair():
    lines = {l.split()[0]: l for l in zoo_listing()}
    assert 'deepseek_v3 architecture, 61 layers, hidden 64' in lines['zoo:deep-dsv3']
    assert "trained on resid[3, 31, 59], not the engines' default resid[2, 30, 58] (config ids [2, 30, 58], specforge convention)" in lines['zoo:deep-dsv3-eagle3']
    assert '## deep-dsv3 + deep-dsv3-eagle3' in (zoo_root()/'ZOO.md').read_text() and set(DEEP) == {'deep-dsv3'}

def test_doctor_says_ok_on_the_deep_pair(recorded):
    "From the recording: configured as SGLang 0.5.6 reads it, the doctor finds nothing better than the trained layers."
    d = diagnose(recorded, accept=False)
    assert d.configured == list(TRAINED) and d.verdict == 'ok', str(d)
    assert d.recommended['resid_layers'] == list(TRAINED) and 'coordinate search' in d.search['how']
    assert not [f for f in d.findings if f.severity == 'error'], str(d)
    assert d.seconds < 60, d.seconds   # the doctor's 61-layer time target (from a recording: the search alone)

@pytest.fixture(scope='module')
def founding(recorded):
    "The doctor on the founding case, from the recording."
    return diagnose(recorded, wiring=FOUNDING)

def test_founding_case_named_from_a_recording(founding):
    d = founding
    assert d.configured == list(FOUNDING) and d.verdict == 'miswired', str(d)
    assert 'AUX_EMBEDDING_CAPTURED' in d.codes and 'AUX_LAYERS_MISMATCH' in d.codes, str(d)
    assert d.recommended['resid_layers'] == list(TRAINED)
    assert d.recommended['for_engine'] == dict(engine=ENGINE, name='SGLang 0.5.6', field='eagle_config.eagle_aux_hidden_state_layer_ids', ids=[2, 30, 58])

def test_founding_case_acceptance_drops(founding):
    "Accept length as configured (the founding case) against as recommended, on the same prompts: paired, the fix is better."
    r = founding.recommended
    before, after, change = r['accept_length_before'], r['accept_length_after'], r['accept_length_change']
    assert 1.0 <= before < after, (before, after)
    assert r['accept_length_before_ci'][1] < r['accept_length_after_ci'][0], r   # the intervals do not even overlap
    assert change['label'] == 'better' and change['ci'][0] > 0 and abs(change['gain'] - (after - before)) < 0.02, change

@pytest.mark.slow
def test_founding_case_in_process_gives_the_recorded_answers(live, founding):
    "The live target (recorded now by the doctor itself): the same verdict, codes, recommendation and accept lengths within 0.01."
    a = diagnose(live, PROMPTS, wiring=FOUNDING)
    assert (a.verdict, a.codes, a.recommended['resid_layers']) == (founding.verdict, founding.codes, founding.recommended['resid_layers'])
    for k in ('accept_length_before', 'accept_length_after'): assert abs(a.recommended[k] - founding.recommended[k]) <= 0.01, (k, a, founding)
