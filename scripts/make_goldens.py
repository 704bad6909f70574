#!/usr/bin/env python
"""Golden EAGLE-3 drafts and logits written by the trainers' OWN code (issue #17 part 5).

Every row builds a small random draft with a reference trainer's config class and model class, saves it the
way that trainer saves drafts, reloads it with that trainer's loader, runs that trainer's own training-time-test
(TTT) loop for 3 unrolled steps and stores the per-step logits together with the exact inputs the reference
consumed. `tests/test_goldens.py` then loads each checkpoint with the workbench and must reproduce the logits.
The test needs none of the packages below; only this script does.

Run it in the reference venv, never in the project env (from the repository root):

    TORCHDYNAMO_DISABLE=1 OMP_NUM_THREADS=1 ../refvenv/bin/python scripts/make_goldens.py [--only ROW ...]

Reference venv, beside the checkout (recorded 2026-12-01 on the CPU-only project machine, python 3.11, torch 2.13.0+cpu from the system):

    python -m venv --system-site-packages ../refvenv
    ../refvenv/bin/pip install --no-deps speculators==0.9.0 specforge==0.2.0
    ../refvenv/bin/pip install "transformers==5.19.0" loguru psutil "openai>=2.0.0" "datasets>=4.0.0,<=5.1.0"
    ../refvenv/bin/pip install --no-deps hs-connectors==0.9.0

`--no-deps` because specforge 0.2.0 pins torch==2.11.0 (a CUDA build), sglang==0.5.14, yunchang, wandb, ...;
speculators 0.9.0 pulls torchvision/torchaudio and mooncake. None of those is imported by the modules used here.
transformers 5.19.0 is the newest version speculators 0.9.0 accepts (<=5.19.0); specforge pins 5.8.1 but its
draft module only uses LlamaConfig, ACT2FN and PreTrainedModel from it.

What is not the reference's own code (each also written into the row's meta.json):
- `triton` is not installable on this CPU machine; specforge.core.loss imports it at module level for its
  `LogSoftmaxLoss` kernel. A stub module (`jit` = identity decorator, everything else a placeholder) lets the
  import succeed, and `specforge.algorithms.eagle3.model.LogSoftmaxLoss` is replaced by an object whose
  `apply` calls specforge's own pure-torch `specforge.core.loss._compute_loss`. The loss value is not part of
  the golden; the draft's logits are recorded from inside SpecForge's `OnlineEagle3Model.forward`.
- TORCHDYNAMO_DISABLE=1: SpecForge wraps RMSNorm, RoPE and its loss in `torch.compile`; disabled, they run
  the same Python code eagerly (no C compiler needed).
"""
from __future__ import annotations
import os
os.environ.setdefault('TORCHDYNAMO_DISABLE', '1')
import argparse, copy, importlib.util, json, shutil, sys, tempfile, types
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT/'tests'/'fixtures'/'goldens'
SEED, T, STEPS = 1234, 12, 3
H, H_T, INTER, HEADS, KV_HEADS, HEAD_DIM = 32, 48, 64, 4, 2, 8   # draft hidden; SpecForge target hidden (!= H)
VOCAB, DRAFT_VOCAB, MAX_POS, EPS = 256, 128, 64, 1e-6

ROPE = {   # small original context so that every scaling law changes the angles of a 12-token window
    'llama3': {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
               'original_max_position_embeddings': 32},
    'yarn': {'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 16, 'beta_fast': 32.0,
             'beta_slow': 1.0, 'mscale': 1.0, 'mscale_all_dim': 0.0},
    'linear': {'rope_type': 'linear', 'factor': 2.0},
}

# name: (trainer, variant config keys, keys of the "plain" twin whose logits the golden must differ from, notes)
ROWS = {
    'specforge_base': ('specforge', {}, None, 'norm_output absent = SpecForge default True; exported with to_sglang (no embedding)'),
    'specforge_norm_output_false': ('specforge', {'norm_output': False}, {'norm_output': True}, 'exported with to_hf (embedding included)'),
    'specforge_fc_norm': ('specforge', {'fc_norm': True}, {'fc_norm': False}, ''),
    'specforge_rope_llama3': ('specforge', {'rope_scaling': ROPE['llama3']}, {'rope_scaling': None}, ''),
    'specforge_rope_yarn': ('specforge', {'rope_scaling': ROPE['yarn']}, {'rope_scaling': None}, ''),
    'specforge_rope_linear': ('specforge', {'rope_scaling': ROPE['linear']}, {'rope_scaling': None}, ''),
    'speculators_base': ('speculators', {}, None, 'llama layer config, norm_output False (speculators default)'),
    'speculators_norm_output': ('speculators', {'norm_output': True}, {'norm_output': False}, 'EAGLE 3.1'),
    'speculators_norm_before_fc': ('speculators', {'norm_before_fc': True}, {'norm_before_fc': False}, ''),
    'speculators_norm_before_residual': ('speculators', {'norm_before_residual': True}, {'norm_before_residual': False}, ''),
    'speculators_fc_norm': ('speculators', {'fc_norm': True}, {'fc_norm': False}, ''),
    'speculators_rope_llama3': ('speculators', {'rope': ROPE['llama3']}, {'rope': None}, ''),
    'speculators_rope_yarn': ('speculators', {'rope': ROPE['yarn']}, {'rope': None}, ''),
    'speculators_rope_linear': ('speculators', {'rope': ROPE['linear']}, {'rope': None}, ''),
    'speculators_two_layers': ('speculators', {'num_hidden_layers': 2}, None, 'layers.1 is a plain transformers LlamaDecoderLayer'),
    'speculators_aux4': ('speculators', {'aux_ids': [1, 3, 5, 7]}, None, 'four auxiliary layers: fc takes 4 x hidden'),
    'speculators_qwen3': ('speculators', {'layer_type': 'qwen3'}, None, "speculators' DEFAULT transformer_layer_config (Qwen3: q_norm/k_norm per head)"),
}

# ---------------------------------------------------------------- environment
def _import_specforge_loss():
    "Import specforge.core.loss with a placeholder `triton` when there is none (see module docstring); True if stubbed."
    if importlib.util.find_spec('triton') is not None: import specforge.core.loss; return False
    import transformers.generation, transformers.modeling_utils   # before the stub: transformers probes for triton
    class _Any:
        def __getattr__(self, k):
            if k.startswith('__'): raise AttributeError(k)
            return _Any()
        def __call__(self, *a, **k): return _Any()
        def __getitem__(self, k): return _Any()
    tr, tl = types.ModuleType('triton'), types.ModuleType('triton.language')
    tr.jit = lambda f=None, **k: f if f is not None else (lambda g: g)
    tr.next_power_of_2 = lambda n: 1 << (int(n) - 1).bit_length()
    def placeholder(k):
        if k.startswith('__'): raise AttributeError(k)   # inspect/importlib probe dunders: stay a plain module
        return _Any()
    tr.__getattr__ = tl.__getattr__ = placeholder
    tr.language = tl
    sys.modules['triton'], sys.modules['triton.language'] = tr, tl
    try: import specforge.core.loss
    finally: del sys.modules['triton'], sys.modules['triton.language']   # visible to that one import only
    return True

def versions()->dict:
    from importlib.metadata import version
    return {p: version(p) for p in ('specforge', 'speculators', 'transformers', 'torch')}

# ---------------------------------------------------------------- shared pieces
def randomize_(model, g:torch.Generator):
    "Seeded weights that make every part of the draft matter: norms 1 + 0.2 N(0,1), linears N(0, 1/fan_in), embedding N(0,1); bf16-exact."
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.ndim == 1: v = 1 + 0.2*torch.randn(p.shape, generator=g)
            elif 'embed' in name: v = torch.randn(p.shape, generator=g)
            else: v = torch.randn(p.shape, generator=g) / p.shape[1]**0.5
            p.copy_(v.bfloat16().float())   # exact in bf16, so a bf16 export stores the same numbers

def vocab_map(g:torch.Generator):
    "A real draft vocabulary: DRAFT_VOCAB sorted target ids; d2t[i] = target_id - i, t2d[j] = j is kept."
    ids = torch.randperm(VOCAB, generator=g)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(VOCAB, dtype=torch.bool); t2d[ids] = True
    return ids - torch.arange(DRAFT_VOCAB), t2d

def rel(a, b)->float: return float((a - b).abs().max() / b.abs().max())

# ---------------------------------------------------------------- SpecForge 0.2.0
def specforge_config(variant:dict)->dict:
    "A SpecForge draft config.json (the layout of SpecForge's configs/*-eagle3.json), with the row's keys."
    c = {'architectures': ['LlamaForCausalLMEagle3'], 'model_type': 'llama', 'hidden_act': 'silu',
         'hidden_size': H, 'intermediate_size': INTER, 'num_attention_heads': HEADS, 'num_key_value_heads': KV_HEADS,
         'head_dim': HEAD_DIM, 'num_hidden_layers': 1, 'max_position_embeddings': MAX_POS, 'rms_norm_eps': EPS,
         'rope_theta': 10000.0, 'vocab_size': VOCAB, 'draft_vocab_size': DRAFT_VOCAB, 'target_hidden_size': H_T,
         'tie_word_embeddings': False, 'pretraining_tp': 1, 'torch_dtype': 'bfloat16',
         'eagle_config': {'eagle_aux_hidden_state_layer_ids': [1, 3, 5], 'use_aux_hidden_state': True}}
    for k, v in copy.deepcopy(variant).items():
        if v is None: c.pop(k, None)
        else: c[k] = v
    return c

class _TorchLogSoftmaxLoss:
    "Stands in for specforge.core.loss.LogSoftmaxLoss (a triton kernel): specforge's own pure-torch `_compute_loss`."
    @staticmethod
    def apply(logits, target_p, position_mask):
        from specforge.core.loss import _compute_loss
        return _compute_loss(logits, target_p, position_mask)

def specforge_ttt(draft, feats, ids, target_logits)->dict:
    "Run SpecForge's OnlineEagle3Model.forward (sdpa backend) and record what its draft saw and produced per step."
    from specforge.algorithms.eagle3 import model as sfm
    from specforge.modeling.draft import llama3_eagle
    from specforge.modeling.target.target_head import TargetHead
    sfm.LogSoftmaxLoss = _TorchLogSoftmaxLoss
    rec = {'ids': [], 'pos': [], 'logits': []}
    embed, logits, rope = draft.embed_input_ids, draft.compute_logits, llama3_eagle.apply_rotary_pos_emb
    def embed_rec(x): rec['ids'].append(x.clone()); return embed(x)
    def logits_rec(h): out = logits(h); rec['logits'].append(out.detach().clone()); return out
    def rope_rec(q, k, cos, sin, position_ids, unsqueeze_dim=1):
        rec['pos'].append(position_ids.clone()); return rope(q, k, cos, sin, position_ids, unsqueeze_dim)
    draft.embed_input_ids, draft.compute_logits, llama3_eagle.apply_rotary_pos_emb = embed_rec, logits_rec, rope_rec
    try:
        # the same shift the SpecForge trainer applies before the TTT loop (TargetHead.preprocess: padding(left=False))
        input_ids, target, loss_mask = TargetHead.preprocess(None, ids, target_logits, torch.ones_like(ids))
        ttt = sfm.OnlineEagle3Model(draft, length=STEPS, attention_backend='sdpa')
        with torch.no_grad():
            ttt(input_ids=input_ids, attention_mask=torch.ones_like(ids), target=target, loss_mask=loss_mask, hidden_states=feats)
    finally:
        del draft.embed_input_ids, draft.compute_logits
        llama3_eagle.apply_rotary_pos_emb = rope
    assert len(rec['logits']) == len(rec['ids']) == len(rec['pos']) == STEPS, {k: len(v) for k, v in rec.items()}
    return dict(raw_features=feats, raw_ids=ids, features=feats, ids=rec['ids'], pos=[p.expand_as(ids) for p in rec['pos']],
                logits=rec['logits'])

def make_specforge(name, variant, plain, g, work:Path, dest:Path)->dict:
    from safetensors.torch import save_file
    from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig
    from specforge.export.to_sglang import export_to_sglang
    from specforge.export.to_hf import export_to_hf
    cfg_path = work/'draft_config.json'
    cfg_path.write_text(json.dumps(specforge_config(variant), indent=2))
    draft = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(cfg_path)))
    randomize_(draft, g)
    d2t, t2d = vocab_map(g)
    draft.d2t.copy_(d2t); draft.t2d.copy_(t2d)
    # a stand-in target directory: SpecForge reads the frozen embedding from the target as model.embed_tokens.weight
    (work/'target').mkdir()
    save_file({'model.embed_tokens.weight': draft.embed_tokens.weight.detach().clone()}, str(work/'target'/'model.safetensors'))
    # a training checkpoint as SpecForge's trainer leaves it (embeddings excluded), then its own exporter
    state = {'strategy': 'eagle3', 'draft_state_dict': {k: v.clone() for k, v in draft.state_dict().items() if 'embed' not in k}}
    torch.save(state, work/'training_state.pt')
    export = 'to_sglang' if name == 'specforge_base' else 'to_hf'
    if export == 'to_sglang': export_to_sglang(str(work/'training_state.pt'), str(cfg_path), str(dest))
    else: export_to_hf(str(work/'training_state.pt'), str(cfg_path), str(dest), embedding_source=str(work/'target'))
    # The reference computes from what was written, rebuilt the way SpecForge's exporters materialize a draft
    # (AutoDraftModel.from_config + load_state_dict). Not AutoDraftModel.from_pretrained: under transformers 5.19 it
    # leaves the non-persistent rotary buffers (inv_freq, cos_cached, sin_cached) of SpecForge's own
    # LlamaRotaryEmbedding uninitialized, and the logits come out NaN.
    from safetensors.torch import load_file
    ref = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(dest/'config.json'))).float().eval()
    missing, unexpected = ref.load_state_dict(load_file(str(dest/'model.safetensors')), strict=False)
    has_embed = export == 'to_hf'
    assert not unexpected and missing == ([] if has_embed else ['embed_tokens.weight']), (missing, unexpected)
    if not has_embed: ref.load_embedding(str(work/'target'))
    feats = torch.randn(1, T, 3*H_T, generator=g)
    ids = torch.randint(0, VOCAB, (1, T), generator=g)
    target_logits = torch.randn(1, T, VOCAB, generator=g)
    run = specforge_ttt(ref, feats, ids, target_logits)
    extra = {'rel_diff_saved_vs_built': max(rel(a, b) for a, b in zip(specforge_ttt(draft.eval(), feats, ids, target_logits)['logits'], run['logits']))}
    if plain is not None:   # the same weights under the variant-free config: the golden must tell them apart
        (work/'plain.json').write_text(json.dumps(specforge_config({**variant, **plain}), indent=2))
        twin = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(str(work/'plain.json'))).float().eval()
        twin.load_state_dict(ref.state_dict(), strict=False)
        extra['rel_diff_vs_plain'] = max(rel(a, b) for a, b in zip(specforge_ttt(twin, feats, ids, target_logits)['logits'], run['logits']))
    meta = {'reference': 'specforge', 'model_class': 'specforge.modeling.draft.llama3_eagle.LlamaForCausalLMEagle3',
            'config_class': 'transformers LlamaConfig via specforge.modeling.auto.AutoDraftModelConfig.from_file',
            'saved_with': f'specforge.export.{export}.export_{export} from a training_state.pt '
                          '(AutoDraftModel materialized in bfloat16, then save_pretrained + apply_legacy_rope_scaling)',
            'reloaded_with': 'AutoDraftModel.from_config(AutoDraftModelConfig.from_file(exported config.json)) + '
                             'load_state_dict(exported model.safetensors), float32 (from_pretrained under transformers 5.19 '
                             'leaves the rotary cache buffers uninitialized: NaN logits)' +
                             ('' if has_embed else ' + load_embedding(target dir): embedding shipped here as embed_tokens'),
            'ttt': 'specforge.algorithms.eagle3.model.OnlineEagle3Model(length=3, attention_backend="sdpa").forward; '
                   'input_ids shifted left by one (TargetHead.preprocess) before the loop and again after every step, '
                   'pad id 0 at the end; step k: rope positions t + k (position_ids + len(cache)); step-0 keys causal, '
                   'step-j keys (j >= 1) on the diagonal only; the next step gets the pre-norm backbone output; '
                   'logits = compute_logits(h) (lm_head(norm(h)) when norm_output, else lm_head(h))',
            'workbench_ttt_forward_slice': T, 'has_embedding_in_checkpoint': has_embed}
    return run, meta, extra, (None if has_embed else ref.embed_tokens.weight.detach().clone())

# ---------------------------------------------------------------- speculators 0.9.0
def speculators_config(variant:dict, attn='eager'):
    from transformers import LlamaConfig, Qwen3Config
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    v = copy.deepcopy(variant)
    rope = {'rope_type': 'default', **(v.pop('rope', None) or {}), 'rope_theta': 10000.0}
    cls = Qwen3Config if v.pop('layer_type', 'llama') == 'qwen3' else LlamaConfig
    tl = cls(hidden_size=H, intermediate_size=INTER, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
             head_dim=HEAD_DIM, vocab_size=VOCAB, num_hidden_layers=v.pop('num_hidden_layers', 1), rms_norm_eps=EPS,
             max_position_embeddings=MAX_POS, rope_parameters=rope, tie_word_embeddings=False)
    tl._attn_implementation = attn   # never serialized: set before every construction, as speculators' cli does
    aux = v.pop('aux_ids', [1, 3, 5])
    return Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=DRAFT_VOCAB, eagle_aux_hidden_state_layer_ids=aux,
        speculators_config=SpeculatorsConfig(
            algorithm='eagle3', default_proposal_method='greedy',
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=STEPS)],
            verifier=VerifierConfig(name_or_path=None, architectures=[f'{cls.__name__[:-6]}ForCausalLM'])),
        **v)

def speculators_ttt(model, feats, ids)->dict:
    "speculators' shift_batch + Eagle3DraftModel.forward(ttt_steps=3); record ids, rope positions and logits per step."
    from speculators.models.eagle3 import shift_batch
    rec = {'ids': [], 'pos': [], 'logits': []}
    hooks = [model.embed_tokens.register_forward_hook(lambda m, a, o: rec['ids'].append(a[0].clone())),
             model.rotary_emb.register_forward_hook(lambda m, a, o: rec['pos'].append(a[1].clone())),
             model.lm_head.register_forward_hook(lambda m, a, o: rec['logits'].append(o.detach().clone()))]
    b = shift_batch({'input_ids': ids[0], 'hidden_states': feats[0], 'verifier_last_hidden_states': torch.zeros(T, H),
                     'loss_mask': torch.ones(T), 'lengths': torch.tensor([T]), 'position_ids': torch.arange(T)})
    try:
        with torch.no_grad():
            model(hidden_states=b['hidden_states'][None], input_ids=b['input_ids'][None],
                  document_ids=torch.zeros(1, T-1, dtype=torch.long), position_ids=b['position_ids'][None], ttt_steps=STEPS)
    finally:
        for h in hooks: h.remove()
    assert len(rec['logits']) == len(rec['ids']) == len(rec['pos']) == STEPS, {k: len(v) for k, v in rec.items()}
    return dict(raw_features=feats, raw_ids=ids, features=b['hidden_states'][None], ids=rec['ids'], pos=rec['pos'],
                logits=rec['logits'])

def make_speculators(name, variant, plain, g, work:Path, dest:Path)->dict:
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    model = Eagle3DraftModel(speculators_config(variant))
    randomize_(model, g)
    d2t, t2d = vocab_map(g)
    model.load_vocab_mappings(t2d, d2t)
    model.save_pretrained(str(dest))   # what speculators' trainer does at the end (train/cli.py) and its converters do
    # speculators 0.9.0's Eagle3DraftModel.from_pretrained -> load_verifier_weights reads the verifier's config even
    # when speculators_config.verifier.name_or_path is null (AutoConfig.from_pretrained(None) fails), so the reload
    # names a stand-in verifier directory; its embedding is the draft's own, and checkpoint weights win anyway.
    from transformers import LlamaConfig
    from safetensors.torch import save_file
    LlamaConfig(hidden_size=H, num_attention_heads=HEADS, num_hidden_layers=8, vocab_size=VOCAB,
                architectures=['LlamaForCausalLM']).save_pretrained(str(work/'verifier'))
    save_file({'model.embed_tokens.weight': model.embed_tokens.weight.detach().clone(), 'model.norm.weight': torch.ones(H),
               'lm_head.weight': torch.randn(VOCAB, H, generator=g)}, str(work/'verifier'/'model.safetensors'))
    def reload(attn):
        cfg = Eagle3SpeculatorConfig.from_pretrained(str(dest))
        cfg.transformer_layer_config._attn_implementation = attn
        cfg.speculators_config.verifier.name_or_path = str(work/'verifier')
        return Eagle3DraftModel.from_pretrained(str(dest), config=cfg).float().eval()
    # speculators' training default is simple_flex_attention, but its extend_mask_for_draft_tokens grows a BlockMask
    # by whole 128-token blocks and fails for a 11-token window; `--draft-attn-impl eager` (dense float masks) is the
    # supported alternative. sdpa is run as a cross-check.
    ref = reload('eager')
    num_aux = len(variant.get('aux_ids', [1, 3, 5]))
    feats = torch.randn(1, T, num_aux*H, generator=g)
    ids = torch.randint(0, VOCAB, (1, T), generator=g)
    run = speculators_ttt(ref, feats, ids)
    extra = {'rel_diff_saved_vs_built': max(rel(a, b) for a, b in zip(speculators_ttt(model.eval(), feats, ids)['logits'], run['logits'])),
             'rel_diff_sdpa_vs_eager': max(rel(a, b) for a, b in zip(speculators_ttt(reload('sdpa'), feats, ids)['logits'], run['logits']))}
    if plain is not None:
        twin = Eagle3DraftModel(speculators_config({**variant, **plain})).float().eval()
        twin.load_state_dict(ref.state_dict(), strict=False)
        extra['rel_diff_vs_plain'] = max(rel(a, b) for a, b in zip(speculators_ttt(twin, feats, ids)['logits'], run['logits']))
    meta = {'reference': 'speculators', 'model_class': 'speculators.models.eagle3.core.Eagle3DraftModel',
            'config_class': 'speculators.models.eagle3.config.Eagle3SpeculatorConfig',
            'saved_with': 'Eagle3DraftModel.save_pretrained (float32; writes config.json, config.py, model.safetensors)',
            'reloaded_with': 'Eagle3DraftModel.from_pretrained(config=Eagle3SpeculatorConfig.from_pretrained + '
                             '_attn_implementation="eager" (flex needs 128-token blocks) + a stand-in verifier directory, because '
                             'load_verifier_weights fails on a null verifier name_or_path)',
            'ttt': 'speculators.models.eagle3.shift_batch (input_ids[1:], hidden_states[:-1], position_ids[1:]: '
                   'T-1 positions, rope positions start at 1), then Eagle3DraftModel.forward(ttt_steps=3) with no '
                   'verifier states (no loss); step k: input ids shifted left by k more, pad id 0; rope positions '
                   '1 + t + k; step-0 keys causal, step-j keys on the diagonal only (extend_dense_mask_for_draft_tokens); '
                   'norm_output false: next step gets the pre-norm h, logits lm_head(norm(h)); norm_output true: '
                   'h = norm(h) is fed back and logits = lm_head(h)',
            'workbench_ttt_forward_slice': T - 1, 'has_embedding_in_checkpoint': True}
    return run, meta, extra, None

# ---------------------------------------------------------------- driver
def make_row(name:str, out:Path=OUT):
    from safetensors.torch import save_file
    trainer, variant, plain, note = ROWS[name]
    g = torch.Generator().manual_seed(SEED + sorted(ROWS).index(name))
    row = out/name
    if row.exists(): shutil.rmtree(row)
    row.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        fn = make_specforge if trainer == 'specforge' else make_speculators
        run, meta, extra, embed = fn(name, variant, plain, g, Path(tmp), row/'draft')
    tensors = {'features': run['features'].clone(), 'target_features': run['raw_features'].clone(),
               'input_ids': run['raw_ids'].clone()}
    for k in range(STEPS):
        tensors[f'ids_step{k}'] = run['ids'][k].clone()
        tensors[f'positions_step{k}'] = run['pos'][k].long().contiguous()
        tensors[f'logits_step{k}'] = run['logits'][k].float().contiguous()
    if embed is not None: tensors['embed_tokens'] = embed.float().contiguous()
    save_file(tensors, str(row/'golden.safetensors'))
    # config.py is speculators' own source (save_pretrained copies the config class for `auto_map`), and
    # generation_config.json says nothing about the draft: neither is kept in this repository
    dropped = [f for f in ('config.py', 'generation_config.json') if (row/'draft'/f).exists()]
    for f in dropped: (row/'draft'/f).unlink()
    meta = {'row': name, 'trainer': trainer, 'variant': variant, 'note': note, 'seed': SEED + sorted(ROWS).index(name),
            'versions': versions(), 'steps': STEPS, 'tokens': T, 'stubs': STUBS, 'files_not_kept': dropped, **meta, **extra,
            'golden_keys': {'target_features': 'the target features of the T-token window, before any shift',
                            'input_ids': 'the T token ids of the window, before any shift',
                            'features': 'the features the reference fed to fc (after its own shift)',
                            'ids_step{k}': 'token ids embedded at step k (as the reference embedded them)',
                            'positions_step{k}': 'rope positions at step k (as the reference applied them)',
                            'logits_step{k}': 'draft-vocabulary logits of step k',
                            'embed_tokens': 'the embedding, when the checkpoint has none (SGLang-style export)'}}
    (row/'meta.json').write_text(json.dumps(meta, indent=1) + '\n')
    size = sum(f.stat().st_size for f in row.rglob('*') if f.is_file())
    print(f"{name:36s} {size/1024:7.1f} KiB  " + '  '.join(f'{k}={v:.3g}' for k, v in extra.items()))

STUBS = []

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--only', nargs='*', default=None, help='row names (default: all)')
    p.add_argument('--out', default=str(OUT))
    a = p.parse_args(argv)
    torch.manual_seed(SEED)
    if _import_specforge_loss():
        STUBS.append('triton (placeholder module) and specforge.algorithms.eagle3.model.LogSoftmaxLoss -> '
                     'specforge.core.loss._compute_loss (pure torch); loss value unused')
    for name in a.only or list(ROWS): make_row(name, Path(a.out))
    total = sum(f.stat().st_size for f in Path(a.out).rglob('*') if f.is_file())
    print(f'total {total/1024:.1f} KiB in {a.out}')

if __name__ == '__main__': main()
