"""Pinned answers, per engine release, for the public draft configs in tests/fixtures/draft-configs/: the resid a
release feeds the draft and the variant keys it ignores or misreads. Every expected value is worked out by hand from
the rule cited on its row (the release's own source, as in the chapter's table), not copied from the output."""
import json
from pathlib import Path

import pytest

from eagle3_workbench.conventions import TRAINERS
from eagle3_workbench.engine_rows import ENGINE_FACTS, ENGINE_NAMES, VARIANT_KEYS, VARIANT_SUPPORT, BORROWED
from eagle3_workbench.engines import Engine, release_table
from eagle3_workbench.wiring import engine_reading, resolve_wiring
from eagle3_workbench.testing import modelopt_eagle_config, speculators_example_config, tiny_draft_config
from eagle3_workbench.variants import variant_problems

FIXTURES = Path(__file__).parent / 'fixtures' / 'draft-configs'
KEY = 'eagle_aux_hidden_state_layer_ids'


def load(name): return json.loads((FIXTURES / name).read_text())


# A speculators-format gpt-oss-20b draft (N = 24). No such file is in the fixtures, so this one is built from
# speculators' own schema (src/speculators/models/eagle3/config.py: Eagle3SpeculatorConfig, main c05b95b3): the
# top-level keys it writes, its default ids [2, N//2, N-3] (models/utils.py resolve_target_layer_ids) and
# norm_before_fc, which its gpt-oss drafts use (RedHatAI's gpt-oss speculator cards: "uses norm_before_fc"). The layer
# sizes the parser needs (head_dim, intermediate_size, rms_norm_eps) are the same public gpt-oss-20b draft's, as in
# fixtures/draft-configs/speculators-gpt-oss-20b-eagle3-reconstructed.json.
SPECULATORS_GPT_OSS_20B = {
    'architectures': ['Eagle3Speculator'], 'speculators_model_type': 'eagle3', 'draft_vocab_size': 32000,
    'norm_before_residual': False, 'norm_before_fc': True, 'fc_norm': False, 'norm_output': False,
    'target_hidden_size': None, KEY: [2, 12, 21],
    'transformer_layer_config': {'model_type': 'llama', 'hidden_size': 2880, 'num_hidden_layers': 1,
                                 'num_attention_heads': 64, 'num_key_value_heads': 8, 'vocab_size': 201088,
                                 'head_dim': 64, 'intermediate_size': 2880, 'rms_norm_eps': 1e-05},
}
if (FIXTURES / 'speculators-gpt-oss-20b-eagle3.json').exists():   # a real file, when one is added, replaces the built one
    SPECULATORS_GPT_OSS_20B = load('speculators-gpt-oss-20b-eagle3.json')

# file -> (target layers N, target model_type, trainer)
CONFIGS = {
    'kimi': ('kimi-k2.5-eagle3-reconstructed.json', 61, 'kimi_k25', 'specforge'),
    'dsv3': ('specforge-deepseek-v3-671b-eagle3.json', 61, 'deepseek_v3', 'specforge'),
    'llama8b': ('specforge-llama3-8B-eagle3.json', 32, 'llama', 'specforge'),
    'qwen3_31': ('specforge-qwen3-30B-A3B-eagle3.1.json', 48, 'qwen3_moe', 'specforge'),
    'gptoss120': ('specforge-gpt-oss-120B-eagle3.json', 36, 'gpt_oss', 'specforge'),
    'gptoss20_spec': (SPECULATORS_GPT_OSS_20B, 24, 'gpt_oss', 'speculators'),
    'gptoss20_pub': ('speculators-gpt-oss-20b-eagle3-reconstructed.json', 24, 'gpt_oss', 'speculators'),
}


def config(name):
    f, n, mt, trainer = CONFIGS[name]
    return (load(f) if isinstance(f, str) else f), n, mt, trainer


# ---- resid fed, per release -----------------------------------------------------------------------------------

FED = [
    # Kimi-K2.5 draft, nested [2, 30, 58] "capture before", N = 61, a deepseek_v2.py target
    ('kimi', 'sglang==0.5.12', (3, 31, 59)),     # every model file adds 1 before PR #25454
    ('kimi', 'sglang==0.5.13', (2, 30, 58)),     # PR #25454: first id is 2, not 1 -> no +1
    ('kimi', 'sglang', (2, 30, 58)),             # 0.5.23 keeps PR #25454's rule
    ('kimi', 'vllm==0.17.1', ()),                # deepseek_v2.py has no EAGLE-3 interface before 0.18.0
    ('kimi', 'vllm==0.18.0', (2, 30, 58)),       # top level only, absent -> default (2, N//2, N-3)
    ('kimi', 'vllm==0.22.0', (2, 30, 58)),       # nested fallback, verbatim
    ('kimi', 'trtllm', (2, 30, 58)),             # serving default {1, 29, 57}, output of layer k -> +1
    ('kimi', 'specforge', (3, 31, 59)),          # HF backend: hidden_states[id + 1]
    ('kimi', 'specforge==0.1.0', (2, 30, 58)),   # 0.1.0 ignores the ids: hidden_states[2], [N//2], [N-3]
    ('kimi', 'specforge==0.2.0', (2, 30, 58)),   # through SGLang 0.5.14: PR #25454's rule for deepseek_v2.py
    ('kimi', 'speculators', (2, 30, 58)),        # reads the top level only -> its default [2, N//2, N-3]
    ('kimi', 'eagle', (2, 30, 58)),              # hard-coded [2, N//2, N-3]
    # SpecForge DeepSeek-V3 draft, nested [1, 29, 57] "output of layer", N = 61
    ('dsv3', 'sglang==0.5.6', (2, 30, 58)),      # +1
    ('dsv3', 'sglang==0.5.13', (2, 30, 58)),     # first id is 1 -> still +1
    ('dsv3', 'vllm==0.21.0', (2, 30, 58)),       # top level only, absent -> default
    ('dsv3', 'vllm==0.22.0', (1, 29, 57)),       # nested fallback, verbatim: one layer early in every chunk
    ('dsv3', 'vllm', (1, 29, 57)),               # 0.32 reads the same
    ('dsv3', 'trtllm', (2, 30, 58)),             # serving default {1, 29, 57} + 1
    ('dsv3', 'specforge', (2, 30, 58)),          # hidden_states[id + 1]
    ('dsv3', 'speculators', (2, 30, 58)),        # top level only -> default
    # SpecForge Llama-3.1-8B draft, no ids, N = 32: every reading falls back to (2, 16, 29)
    ('llama8b', 'sglang==0.5.6', (2, 16, 29)),   # layer_ids None -> [2, N//2, N-3]
    ('llama8b', 'vllm==0.11.0', (2, 16, 29)),    # model default (2, N//2, N-3)
    ('llama8b', 'vllm', (2, 16, 29)),            # no field -> model default
    ('llama8b', 'trtllm', (2, 16, 29)),          # {1, 15, 28} + 1
    # SpecForge Qwen3-30B-A3B EAGLE 3.1 draft, no ids, N = 48
    ('qwen3_31', 'sglang', (2, 24, 45)),         # default
    ('qwen3_31', 'vllm==0.22.0', (2, 24, 45)),   # default
    ('qwen3_31', 'trtllm', (2, 24, 45)),         # {1, 23, 44} + 1
    # SpecForge gpt-oss-120B draft, nested [1, 17, 33], N = 36, gpt_oss.py is not a PR #25454 file
    ('gptoss120', 'sglang==0.5.6', (2, 18, 34)),     # +1
    ('gptoss120', 'sglang', (2, 18, 34)),            # still +1: PR #25454 did not touch gpt_oss.py
    ('gptoss120', 'vllm==0.21.0', (2, 18, 33)),      # top level only -> default (2, 18, 33)
    ('gptoss120', 'vllm==0.22.0', (1, 17, 33)),      # nested, verbatim
    ('gptoss120', 'trtllm', (2, 18, 33)),            # {1, 17, 32} + 1
    ('gptoss120', 'specforge==0.2.0', (2, 18, 34)),  # SGLang 0.5.14's +1 for gpt_oss.py
    ('gptoss120', 'speculators', (2, 18, 33)),       # top level only -> default
    # speculators gpt-oss-20b draft, top-level [2, 12, 21], N = 24
    ('gptoss20_spec', 'vllm==0.11.0', (2, 12, 21)),  # ignores the config: model default (2, 12, 21), the same by construction
    ('gptoss20_spec', 'vllm==0.11.1', (2, 12, 21)),  # top level, verbatim
    ('gptoss20_spec', 'sglang', (2, 12, 21)),        # reads eagle_config only -> default (2, 12, 21)
    ('gptoss20_spec', 'trtllm', (2, 12, 21)),        # serving default {1, 11, 20} + 1
    ('gptoss20_spec', 'speculators', (2, 12, 21)),   # verbatim
    # the public speculators gpt-oss-20b draft's keys (reconstructed): no ids anywhere, so every reader uses (2, N//2, N-3)
    ('gptoss20_pub', 'vllm==0.11.0', (2, 12, 21)),   # ignores the config: default
    ('gptoss20_pub', 'vllm', (2, 12, 21)),           # no top-level or nested ids -> default
    ('gptoss20_pub', 'sglang', (2, 12, 21)),         # no eagle_config -> default
    ('gptoss20_pub', 'trtllm', (2, 12, 21)),         # serving default {1, 11, 20} + 1
    ('gptoss20_pub', 'speculators', (2, 12, 21)),    # resolve_target_layer_ids default
]


@pytest.mark.parametrize('name, engine, fed', FED)
def test_fed(name, engine, fed):
    cfg, n, mt, _ = config(name)
    assert engine_reading(cfg, n, engine, mt).fed == fed
    assert resolve_wiring(cfg, n, engine, mt).resid_layers == fed   # one reading: resolve_wiring is engine_reading


# ---- resid[N] and resid[0]: what AUX_UNREACHABLE may say, per release ------------------------------------------

def with_ids(cfg, nested=None, top=None):
    cfg = json.loads(json.dumps(cfg))
    if nested is not None: cfg['eagle_config'][KEY] = nested
    if top is not None: cfg[KEY] = top
    return cfg


REACH_N = [
    # the DeepSeek-V3 draft with its last id moved to N = 61
    ('sglang==0.5.16', dict(nested=[1, 29, 60]), (2, 30), 'never captured'),   # +1 -> resid[61]: the loop stops before layer 61
    ('sglang==0.5.17', dict(nested=[1, 29, 60]), (2, 30), 'crashes'),          # AuxHiddenStatePacker.finalize raises
    ('vllm==0.24.0', dict(top=[2, 30, 61]), (2, 30), 'never captured'),        # deepseek_v2.py captures before layer idx only
    ('vllm==0.25.0', dict(top=[2, 30, 61]), (2, 30, 61), None),                # PR #46973: end_layer captured
]


@pytest.mark.parametrize('engine, ids, fed, why', REACH_N)
def test_resid_n_deepseek(engine, ids, fed, why):
    cfg, n, mt, _ = config('dsv3')
    r = engine_reading(with_ids(cfg, **ids), n, engine, mt)
    assert r.fed == fed
    if why: assert any(why in p for p in r.problems), r.problems
    else: assert not any('resid[61]' in p for p in r.problems), r.problems   # only the note that the nested ids are not read


@pytest.mark.parametrize('engine, how', [
    ('sglang==0.5.16', 'dropped'),     # gpt_oss.py captures before layer i only (as llama.py)
    ('sglang==0.5.23', 'captured'),    # gpt_oss.py from 0.5.17: boundary N, before the final norm
    ('sglang==0.5.23:llama', 'dropped'),   # llama.py never captures after the last layer
    ('vllm==0.17.1', 'dropped'),       # before PR #36063 capture is before layer idx
    ('vllm==0.18.0', 'captured'),      # PR #36063: idx + 1 after each layer
    ('trtllm', 'captured'),            # id N-1 = output of the last layer
    ('specforge', 'post-norm'),        # HF hidden_states[N] is after the final norm
    ('speculators', 'captured'),       # launch_vllm.py appends N itself
])
def test_resid_n_gpt_oss(engine, how):
    engine, _, mt = engine.partition(':')
    assert Engine.parse(engine).reach(36, 36, mt or 'gpt_oss').how == how


def test_trtllm_serving_layers_reach_resid_n():
    cfg, n, mt, _ = config('gptoss120')
    r = engine_reading(cfg, n, 'trtllm', mt, trtllm_layers=[1, 17, 35])   # output of layers 1, 17, 35 = resid[2, 18, 36]
    assert (r.resid, r.fed, r.source) == ((2, 18, 36), (2, 18, 36), 'config')
    assert any('serving config' in p for p in r.problems)                  # the draft's own [1, 17, 33] is not read


@pytest.mark.parametrize('engine, mt, how', [
    ('sglang==0.5.13', 'deepseek_v3', 'crash'),      # hidden_states + None before layer 0
    ('sglang==0.5.14', 'deepseek_v3', 'captured'),   # captured through the layer communicator
    ('sglang==0.5.21', 'llama', 'crash'),
    ('sglang==0.5.22', 'llama', 'captured'),         # attn_boundary.prepare(capture=...)
    ('vllm==0.17.1', 'llama', 'crash'),
    ('vllm==0.18.0', 'llama', 'captured'),           # _maybe_add_hidden_state(..., 0, ...)
    ('vllm==0.33.0', 'deepseek_v3', 'crash'),        # deepseek_v2.py still adds a None residual at idx 0
    ('trtllm', 'llama', 'not expressible'),          # ids are 'output of layer k', k >= 0
])
def test_resid_0(engine, mt, how):
    assert Engine.parse(engine).reach(0, 32, mt).how == how


# ---- variant problems, per release -----------------------------------------------------------------------------

VARIANTS = [
    # SpecForge Qwen3-30B EAGLE 3.1: fc_norm true, norm_output true (SpecForge: logits only; the next step gets h)
    ('qwen3_31', 'sglang==0.5.6', ['fc_norm']),       # no fc_norm before 0.5.12; norm_output unread = SpecForge's plain math
    ('qwen3_31', 'sglang==0.5.11', ['fc_norm']),
    ('qwen3_31', 'sglang==0.5.12', ['norm_output']),  # fc_norm read; norm_output now feeds norm(h) back
    ('qwen3_31', 'sglang', ['norm_output']),
    ('qwen3_31', 'vllm==0.21.0', ['fc_norm']),        # vLLM reads neither before 0.22.0
    ('qwen3_31', 'vllm==0.22.0', ['norm_output']),
    ('qwen3_31', 'vllm', ['norm_output']),
    ('qwen3_31', 'trtllm', ['norm_output']),          # PR #14988: post-norm feedback
    # no variant keys: SpecForge's default norm_output=true is the plain math every engine computes without the key
    ('kimi', 'sglang==0.5.6', []), ('kimi', 'vllm', []), ('kimi', 'trtllm', []),
    ('dsv3', 'sglang', []), ('dsv3', 'vllm==0.10.0', []),
    ('llama8b', 'sglang', []), ('llama8b', 'vllm', []),
    ('gptoss120', 'sglang', []), ('gptoss120', 'vllm', []), ('gptoss120', 'trtllm', []),
    # speculators gpt-oss-20b: norm_before_fc true, norm_before_residual false (written)
    ('gptoss20_spec', 'sglang', ['architectures']),        # no loader for Eagle3Speculator
    ('gptoss20_spec', 'vllm==0.10.0', ['architectures']),  # no speculators config adapter yet
    ('gptoss20_spec', 'vllm==0.10.1', ['norm_before_fc']), # the adapter does not pass norm_before_fc
    ('gptoss20_spec', 'vllm==0.18.0', ['norm_before_fc']), # the model reads it from 0.18.0, the adapter passes it from 0.19.0
    ('gptoss20_spec', 'vllm==0.19.0', []),                 # PR #38111
    ('gptoss20_spec', 'vllm', []),
    ('gptoss20_spec', 'trtllm', ['norm_before_fc']),       # TensorRT-LLM reads eagle_config.norm_before_fc only
    ('gptoss20_pub', 'sglang', ['architectures']),          # the older name Eagle3DraftModel: no SGLang loader either
    ('gptoss20_pub', 'vllm==0.18.0', ['norm_before_fc']),   # as above; norm_before_residual=True is read by the model
    ('gptoss20_pub', 'vllm', []),                           # both keys passed by the adapter (PR #38111)
    ('gptoss20_pub', 'trtllm', ['norm_before_fc', 'norm_before_residual']),  # nested norm_before_fc only; norm_before_residual not read
]


@pytest.mark.parametrize('name, engine, keys', VARIANTS)
def test_variant_problems(name, engine, keys):
    cfg, _, _, trainer = config(name)
    ps = variant_problems(cfg, trainer, engine)
    assert [p.key for p in ps] == keys
    for p in ps: assert p.evidence['trainer'] == trainer and p.message


def test_norm_output_evidence():
    cfg, *_ = config('qwen3_31')
    p, = variant_problems(cfg, 'specforge', 'sglang==0.5.12')
    assert (p.evidence['value'], p.evidence['trained'], p.evidence['served']) == (True, 'plain', 'feedback')
    assert 'compute_logits' in p.evidence['trainer_source'] and 'norm_output' in p.evidence['engine_source']


def test_speculators_norm_before_residual_absent():
    # vLLM's adapter defaults norm_before_residual to True when the speculators config omits it; speculators' default is False
    cfg = {k: v for k, v in SPECULATORS_GPT_OSS_20B.items() if k != 'norm_before_residual'}
    assert [p.key for p in variant_problems(cfg, 'speculators', 'vllm')] == ['norm_before_residual']


def test_speculators_keys_under_transformer_layer_config():
    # speculators reads norm_before_fc at the top level only (Eagle3SpeculatorConfig; formats' _flatten_speculators), so one
    # under transformer_layer_config was not trained on. vLLM 0.18's adapter does not copy the key, so the layer config's
    # true reaches the model; from 0.19 algos.py overwrites it with the top level's (absent -> false).
    cfg = json.loads(json.dumps(SPECULATORS_GPT_OSS_20B))
    cfg['transformer_layer_config']['norm_before_fc'] = cfg.pop('norm_before_fc')
    assert [p.key for p in variant_problems(cfg, 'speculators', 'vllm==0.18.0')] == ['norm_before_fc']
    assert variant_problems(cfg, 'speculators', 'vllm==0.19.0') == []


def test_same_keys_other_trainer():
    # the Qwen3 3.1 keys in speculators' meaning are what SGLang >= 0.5.12 and vLLM >= 0.22 compute
    cfg, *_ = config('qwen3_31')
    assert variant_problems(cfg, 'speculators', 'sglang') == variant_problems(cfg, 'speculators', 'vllm') == []
    # read as the EAGLE authors' draft: norm_output is not read (plain math), fc_norm is built as written (draft.from_dict
    # reads it for every trainer, and such a checkpoint must carry fc_norm.* to load), so only norm_output parts ways
    assert [p.key for p in variant_problems(cfg, 'eagle', 'sglang')] == ['norm_output']


def test_mla_and_other_kinds():
    # complete drafts: a tiny Llama draft (conftest) with DeepSeek-V3's public MLA sizes; an MLA draft is read as
    # vLLM's deepseek_eagle3.py or ModelOpt's kimik2 builds it (SpecForge 0.2.0 builds no latent attention)
    mla = tiny_draft_config(architectures=['Eagle3DeepseekV2ForCausalLM'], q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                            qk_rope_head_dim=64, v_head_dim=128)
    assert [p.key for p in variant_problems(mla, 'vllm', 'sglang==0.5.11')] == ['architectures']   # kimi_k25_eagle3.py from 0.5.12
    assert variant_problems(mla, 'vllm', 'sglang==0.5.12') == []
    assert [p.key for p in variant_problems(mla, 'vllm', 'vllm==0.17.1')] == ['architectures']     # deepseek_eagle3.py from 0.18.0
    angel = tiny_draft_config(architectures=['Eagle3LlamaForCausalLM'], aux_hidden_states_layer_ids=[1, 17, 32])
    assert [p.key for p in variant_problems(angel, 'angelslim', 'vllm')] == ['aux_hidden_states_layer_ids']
    assert variant_problems(tiny_draft_config(eagle_config=modelopt_eagle_config()), 'modelopt', 'sglang') == []   # its defaults: nothing to report
    two = speculators_example_config()
    two['transformer_layer_config']['num_hidden_layers'] = 2
    del two['norm_before_residual']
    # vLLM 0.11.0 builds one layer; its adapter also turns an absent norm_before_residual into true
    assert [p.key for p in variant_problems(two, 'speculators', 'vllm==0.11.0')] == ['norm_before_residual', 'num_hidden_layers']
    assert [p.key for p in variant_problems(two, 'speculators', 'vllm==0.11.1')] == ['norm_before_residual']   # layers stacked from 0.11.1


# ---- names, versions, tables ------------------------------------------------------------------------------------

@pytest.mark.parametrize('text, spec', [
    ('sglang==0.5.6', Engine('sglang', '0.5.6', 'sglang==0.5.6', False)),
    ('sglang', Engine('sglang', '0.5.23', 'sglang', True)),
    ('vllm', Engine('vllm', '0.32.0', 'vllm', True)),
    ('vllm-legacy', Engine('vllm', '0.21.0', 'vllm-legacy', True)),
    ('sglang-legacy', Engine('sglang', '0.5.12', 'sglang-legacy', True)),
    ('vllm==v0.25', Engine('vllm', '0.25.0', 'vllm==0.25.0', False)),
    ('tensorrt-llm', Engine('trtllm', None, 'trtllm', True)),
])
def test_parse_engine(text, spec):
    assert Engine.parse(text) == spec


@pytest.mark.parametrize('text, words', [
    ('foo', "--engine 'foo': unknown engine"),
    ('vllm==0.9.2', 'releases before 0.10.0 were not read'),
    ('sglang==latest', 'not a release number'),
    ('speculators==0.9.0', 'not versioned here'),
    ('specforge==0.3.0', "releases are ('0.1.0', '0.2.0')"),
])
def test_parse_engine_errors(text, words):
    with pytest.raises(ValueError, match=words.replace('(', r'\(').replace(')', r'\)')):
        Engine.parse(text)


def test_every_name_is_described():
    for name in ENGINE_NAMES: assert Engine.parse(name).said
    assert Engine.parse('vllm').said == "vLLM 0.32 (default: the rule of 0.22 to 0.33; 0.34.0 reads the top-level ids only)"
    assert Engine.parse('vllm==0.40.0').said.endswith('its rules assumed)')


def test_rules_rows_are_well_formed():
    for f in ENGINE_FACTS: assert f.engine in ('sglang', 'vllm') and f.source
    for s in VARIANT_SUPPORT: assert (s.key in VARIANT_KEYS) != (s.key in BORROWED) and s.source   # a variant key, or a weight a draft may borrow
    assert set(BORROWED) <= {s.key for s in VARIANT_SUPPORT}   # each borrowed weight has its rows
    for e in ('sglang', 'vllm', 'trtllm'):
        sup = Engine.parse(e).variant_support()
        assert {'norm_output', 'fc_norm', 'norm_before_fc', 'norm_before_residual', 'bias', 'num_hidden_layers',
                'tie_word_embeddings', 'rope_scaling', 'mla', 'speculators'} <= set(sup)
        assert release_table(e)
    assert set(TRAINERS) == {'specforge', 'speculators', 'eagle', 'modelopt', 'vllm', 'angelslim'}
    with pytest.raises(ValueError, match="trainer 'x'"):
        variant_problems({}, 'x', 'vllm')


def test_named_releases():
    # every name is a release: bare 'vllm' is vLLM 0.32.0, which captures resid[N] (PR #36063, from the 0.18.0 wheel)
    cfg = {KEY: [2, 16, 32]}
    assert resolve_wiring(cfg, 32, 'vllm', 'llama').resid_layers == (2, 16, 32)
    assert resolve_wiring(cfg, 32, 'vllm==0.32.0', 'llama').resid_layers == (2, 16, 32)
    assert Engine.parse('vllm-legacy').rules().reads == 'top_level' and Engine.parse('sglang-legacy').rules('deepseek_v3').convention == 'sglang'
    assert Engine.parse('sglang-pr25454').rules().convention == 'sglang-pr25454'


# ---- per-model-file rows (engine_rows.MODEL_FILES), each worked out from the setter its row cites ---------------------

V3 = 'nvidia-gpt-oss-120b-eagle3-v3-reconstructed.json'   # boundaries [24, 30, 36], N = 36


@pytest.mark.parametrize('engine, fed, states', [
    ('sglang==0.5.16', (25, 31), 2),        # +1: resid[25, 31, 37], and 37 does not exist
    ('sglang==0.5.17', (24, 30, 36), 3),    # max(ids) == N: kept as written; boundary 36 is captured before the norm
    ('sglang', (24, 30, 36), 3),
    ('vllm', (24, 30, 36), 3),              # vLLM reads ids verbatim and captures idx + 1 after each layer
])
def test_gpt_oss_boundaries(engine, fed, states):
    r = engine_reading(load(V3), 36, engine, 'gpt_oss')
    assert r.fed == fed and len(r.fed) == states
    assert (f'the draft gets {states} states' in ' '.join(r.problems)) == (states < 3)


def test_gpt_oss_recommendation_is_written_as_the_named_release_reads_it():
    "A recommendation of resid[24, 30, 36] on a gpt_oss target: bare SGLang is its newest release, which keeps boundary ids "
    "as written (gpt_oss.py), so it is named and written as that release reads them, and reading them back feeds the layers."
    from eagle3_workbench.diagnosis import Recommendation
    newest = Engine.parse('sglang')
    e = Recommendation((24, 30, 36), 36, engine='sglang', model_type='gpt_oss').for_engine()
    assert e == dict(engine='sglang', name=f'SGLang {newest.release}', field='eagle_config.eagle_aux_hidden_state_layer_ids', ids=[24, 30, 36])
    cfg = {'eagle_config': {'eagle_aux_hidden_state_layer_ids': e['ids']}}
    assert engine_reading(cfg, 36, 'sglang', 'gpt_oss').fed == (24, 30, 36) == engine_reading(cfg, 36, 'sglang==0.5.23', 'gpt_oss').fed
    # on a llama.py target the +1 rule has not changed: the edit is named by the legacy row, as before
    assert Recommendation((2, 18, 34), 36, engine='sglang', model_type='llama').for_engine()['name'] == 'SGLang 0.5.23'   # the release asked, whose llama.py adds one


def test_gpt_oss_other_ids_still_add_one():
    # SpecForge's gpt-oss-120B draft [1, 17, 33]: largest id 33 != 36, so gpt_oss.py adds 1 as before
    assert engine_reading(load('specforge-gpt-oss-120B-eagle3.json'), 36, 'sglang', 'gpt_oss').fed == (2, 18, 34)
    # the same boundary ids on a llama.py target: +1, as llama.py has always done
    assert engine_reading(load(V3), 36, 'sglang', 'llama').fed == (25, 31)


def test_gemma3_captures_the_feed_forward_output():
    cfg = load('specforge-gpt-oss-120B-eagle3.json')
    for mt in ('gemma3_text', 'gemma3'):   # the vision-language wrapper delegates to gemma3_causal.py
        r = engine_reading(cfg, 36, 'sglang', mt)
        assert r.fed == (2, 18, 34) and any('without the residual' in p for p in r.problems), r.problems
    old = engine_reading(cfg, 36, 'sglang==0.5.16', 'gemma3_text')
    assert not any('without the residual' in p for p in old.problems)   # 0.5.16 still added the residual back
    assert Engine.parse('sglang').reach(36, 36, 'gemma3_text').how == 'captured'   # num_layers in layers_to_capture


def test_vllm_gemma3_serves_no_eagle3():
    assert Engine.parse('vllm').reach(5, 36, 'gemma3').how == 'unsupported'


def test_qwen_moe_files_crash_on_resid_n():
    # qwen2_moe.py / qwen3_5.py flag self.layers[id + 1]: id N-1 indexes a layer that does not exist
    for mt in ('qwen3_moe', 'qwen3_5', 'qwen3_5_moe'):
        assert Engine.parse('sglang').reach(48, 48, mt).how == 'crash'
    assert Engine.parse('sglang').reach(48, 48, 'qwen3').how == 'dropped'   # qwen3.py: llama.py's loop


def test_model_files_cover_public_draft_targets():
    from eagle3_workbench.engine_rows import MODEL_FILES
    from eagle3_workbench.engines import model_file
    for mt in ('llama', 'qwen2', 'qwen3', 'qwen3_moe', 'gpt_oss', 'deepseek_v3', 'kimi_k2', 'kimi_k25', 'glm4_moe', 'gemma3', 'mistral', 'llama4'):
        assert model_file('sglang', mt) is not None, mt
    assert all(m.cite and m.file.endswith('.py') for m in MODEL_FILES)


def test_vllm_034_reads_the_top_level_ids_only():
    # 0.34.0 has only the V2 runner: eagle3_utils.py get_eagle3_aux_layers_from_config reads getattr(hf_config,
    # 'eagle_aux_hidden_state_layer_ids') and, for eagle_config, only its 'layer_ids'; 0.22 .. 0.33's gpu_model_runner.py
    # fell back to eagle_config['eagle_aux_hidden_state_layer_ids']
    nested, top, n = {'eagle_config': {KEY: [1, 15, 28]}}, {KEY: [1, 15, 28]}, 32
    assert engine_reading(nested, n, 'vllm==0.33.0', 'llama').fed == (1, 15, 28)          # verbatim, from eagle_config
    r = engine_reading(nested, n, 'vllm==0.34.0', 'llama')
    assert (r.fed, r.source) == ((2, n // 2, n - 3), 'default')                             # its default, the ids unread
    assert any('is not read' in p for p in r.problems)
    assert engine_reading(top, n, 'vllm==0.34.0', 'llama').fed == (1, 15, 28)
    assert not Engine.parse('vllm==0.34.0').said.endswith('assumed)')                    # read, not assumed


def test_trtllm_model_files_capture_after_layer_k():
    from eagle3_workbench.engine_rows import MODEL_FILES
    from eagle3_workbench.engines import model_file
    for mt in ('llama', 'mistral', 'qwen3', 'qwen3_moe', 'gpt_oss', 'deepseek_v3'):
        m = model_file('trtllm', mt)
        assert m is not None and m.file.startswith('modeling_') and m.cite.startswith('main '), mt
    # the GPT-OSS-120B draft's [24, 30, 36] written as TensorRT-LLM's serving layers: output of layer k = resid[k+1],
    # whatever the largest id (no boundary heuristic there), and layer 36 of 36 does not exist
    r = engine_reading({}, 36, 'trtllm', 'gpt_oss', trtllm_layers=[24, 30, 36])
    assert r.resid == (25, 31, 37) and r.fed == (25, 31)


def test_a_new_release_is_rows_of_the_registry(monkeypatch):
    # what a newcomer's edit of engine_rows.py does, end to end: a made-up SGLang 0.5.30 whose llama.py keeps the ids when
    # the largest is N and captures boundary N (two Fact rows), then one whose llama.py writes ids with a rule no
    # convention had (a Convention row too); wiring, which reads only the registry, follows
    import sys
    from eagle3_workbench import engine_rows
    from eagle3_workbench.wiring import wiring_from_ids
    def add_facts(*rows):   # as an edit of the file would: every module holding the rows sees the longer tuple
        old = engine_rows.ENGINE_FACTS
        holders = [m for n, m in list(sys.modules.items()) if n.startswith('eagle3_workbench') and getattr(m, 'ENGINE_FACTS', None) is old]
        new = old + rows
        assert len(holders) >= 2, holders   # the rows' module and the one that folds them
        for m in holders: monkeypatch.setattr(m, 'ENGINE_FACTS', new)
    fam = engine_rows.FAMILIES['sglang']
    monkeypatch.setitem(engine_rows.FAMILIES, 'sglang', fam._replace(checked=(fam.checked[0], '0.5.31')))
    made_up = lambda since, what, value: engine_rows.Fact('sglang', since, what, 'llama', value, 'made up for this test')
    add_facts(made_up('0.5.30', 'rule', 'sglang-boundary'), made_up('0.5.30', 'residN', 'captured'))
    assert wiring_from_ids([24, 30, 36], 36, 'sglang==0.5.23', 'llama').resid_layers == (25, 31)       # +1, resid[37] does not exist
    assert wiring_from_ids([24, 30, 36], 36, 'sglang==0.5.30', 'llama').resid_layers == (24, 30, 36)   # the new rows
    two = lambda ids, n: 2   # made up: output of layer k + 1
    monkeypatch.setitem(engine_rows.RULES, 'made-up-plus-two', engine_rows.Convention(two, two, 'resid[k+2]', lambda k, n: None))
    add_facts(made_up('0.5.31', 'rule', 'made-up-plus-two'))
    assert wiring_from_ids([1, 15, 28], 36, 'sglang==0.5.31', 'llama').resid_layers == (3, 17, 30)
    assert wiring_from_ids([1, 15, 28], 36, 'sglang==0.5.30', 'llama').resid_layers == (2, 16, 29)    # the boundary rule: +1 below N


def test_registry_and_readings_import_without_torch():
    # the engine registry, the conventions and the wiring answer from data alone: a fresh interpreter stays torch-free
    import subprocess, sys
    code = "import sys, eagle3_workbench.wiring, eagle3_workbench.engines, eagle3_workbench.engine_rows; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == 'False', out.stderr[-500:]


def test_readme_shows_the_architecture_rows():
    # the README's table is the registry's, rendered: a new model-file row shows there once it is re-rendered
    from eagle3_workbench.wiring import architecture_table
    readme = (Path(__file__).parent.parent / 'README.md').read_text()
    assert architecture_table() in readme, "README's architecture table differs from wiring.architecture_table(): paste it again"
