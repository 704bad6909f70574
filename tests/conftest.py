"Shared builders: tiny random-init targets and drafts written as real Hugging Face directories."
import json, os
from pathlib import Path
# The models here are tiny: one thread per process is several times faster than two fighting over 2 cores
# (measured: a 32-token speculative run took 4.4 s with 1 thread, 28.9 s with 2 while another process ran).
# Subprocesses (nbdev_test, papermill kernels, the CLI) inherit the variable.
os.environ.setdefault('OMP_NUM_THREADS', '1')
# The commands the tests run (eagle3-workbench, nbdev_test, jupyter) are the ones installed beside this interpreter, also
# when pytest is started as `.venv/bin/python -m pytest` without activating the environment.
import sys
os.environ['PATH'] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get('PATH', '')])
import pytest, torch
torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))

FIXTURES = Path(__file__).parent/'fixtures'

def pytest_configure(config):
    "One target pass per zoo target and prompt set for the whole run: tests, notebooks and CLI subprocesses share a cache folder."
    import atexit, shutil, tempfile
    if not os.environ.get('EAGLE3_RECORDING_CACHE'):
        d = tempfile.mkdtemp(prefix='e3w-passes-')
        os.environ['EAGLE3_RECORDING_CACHE'] = d   # scores.CACHE_ENV; subprocesses inherit it
        atexit.register(shutil.rmtree, d, True)

# The environment of a command a test runs as a user would: one thread, no model hub.
CLI_ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1'}

@pytest.fixture(scope='session')
def forked_cli():
    "`python -m eagle3_workbench.cli ARGS` in a process of its own, forked from one interpreter per test process that imported torch once (tests/forked_cli.py)."
    from forked_cli import ForkedCLI
    c = ForkedCLI(CLI_ENV)
    yield c
    c.close()

# The files that take longest, longest first (seconds on the 2-core machine, summed from `--durations=0` of a whole run;
# the numbers only order them). Under `--dist loadfile` each worker takes whole files in collection order, so the
# longest start first and the short ones fill in behind them; in xdist's default order (most tests first) the four
# browser tests came last and one worker ran them alone for the last minutes.
LONGEST_FIRST = ('test_notebooks.py', 'test_doctor.py', 'test_browser.py', 'test_bad_inputs.py', 'test_benchmarks.py',
                 'test_recording.py', 'test_engine.py', 'test_failure_classes.py', 'test_cli_json.py', 'test_zoo_deep.py')

def pytest_collection_modifyitems(config, items):
    "Longest files first, each file's tests in their own order (a stable sort)."
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))

def tiny_target_config(arch, vocab=96):
    "A few-layer random-init config of each architecture the loader must support."
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, DeepseekV3Config
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    if arch == 'llama': return LlamaConfig(**common)
    if arch == 'qwen2': return Qwen2Config(**common)
    if arch == 'qwen3': return Qwen3Config(head_dim=8, **common)
    if arch == 'deepseek_v3':
        return DeepseekV3Config(**{**common, 'num_key_value_heads': 4}, moe_intermediate_size=16, n_shared_experts=1,
            n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16,
            q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8)
    raise ValueError(arch)

def save_tiny_target(path, arch='llama', vocab=96, seed=0):
    "Build, save and return the path of a random-init target."
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    kw = {'experts_implementation': 'eager'} if arch == 'deepseek_v3' else {}
    m = AutoModelForCausalLM.from_config(tiny_target_config(arch, vocab), attn_implementation='eager', **kw)
    m.save_pretrained(path)
    return Path(path)

def tiny_draft_config(vocab=96, draft_vocab=48, hidden=32, target_hidden=32, **extra):
    cfg = dict(architectures=['LlamaForCausalLMEagle3'], model_type='llama', hidden_size=hidden, intermediate_size=64,
               num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_hidden_layers=1, rms_norm_eps=1e-6,
               rope_theta=10000.0, vocab_size=vocab, draft_vocab_size=draft_vocab,
               eagle_config=dict(eagle_aux_hidden_state_layer_ids=[1, 2, 3], use_aux_hidden_state=True))
    if target_hidden != hidden: cfg['target_hidden_size'] = target_hidden
    cfg.update(extra)
    return cfg

def speculators_example_config()->dict:
    "What speculators 0.9.0's save_pretrained wrote for a 32-wide, one-layer llama draft of a 96-token target (abridged)."
    return {'architectures': ['Eagle3DraftModel'], 'draft_vocab_size': 48, 'eagle_aux_hidden_state_layer_ids': [2, 3, 4],
            'fc_norm': False, 'norm_before_fc': False, 'norm_before_residual': False, 'norm_output': False, 'target_hidden_size': None,
            'speculators_model_type': 'eagle3', 'speculators_version': '0.9.0',
            'speculators_config': {'algorithm': 'eagle3', 'default_proposal_method': 'greedy',
                                   'proposal_methods': [{'proposal_type': 'greedy', 'speculative_tokens': 3, 'verifier_accept_k': 1, 'accept_tolerance': 0.0}],
                                   'verifier': {'architectures': ['LlamaForCausalLM'], 'name_or_path': None}},
            'transformer_layer_config': {'model_type': 'llama', 'hidden_size': 32, 'intermediate_size': 64, 'num_attention_heads': 4,
                                         'num_key_value_heads': 2, 'head_dim': 8, 'num_hidden_layers': 1, 'rms_norm_eps': 1e-06, 'hidden_act': 'silu',
                                         'max_position_embeddings': 256, 'vocab_size': 96, 'attention_bias': False, 'mlp_bias': False,
                                         'rope_parameters': {'rope_theta': 10000.0, 'rope_type': 'default'}}}

def modelopt_eagle_config()->dict:
    "The nested eagle_config of a ModelOpt EAGLE-3 export, with its template's default flags."
    return dict(eagle_aux_hidden_state_layer_ids=[1, 2, 3], use_aux_hidden_state=True, use_input_layernorm_in_first_layer=True,
                use_last_layernorm=True, use_mtp_layernorm=False, next_layer_regular=True, parallel_draft_step=1, parallel_draft_heads_num_layers=1)

def random_draft(cfg, seed=0):
    "A random-init draft with a real (sorted, in-range) vocabulary map."
    from eagle3_workbench.draft import Eagle3Draft, DraftConfig
    torch.manual_seed(seed)
    d = Eagle3Draft(DraftConfig.from_dict(cfg))
    for p in d.parameters(): torch.nn.init.normal_(p, std=0.2)
    keep = torch.randperm(cfg['vocab_size'])[:cfg['draft_vocab_size']].sort().values
    d.d2t.copy_(keep - torch.arange(len(keep))); d.t2d.zero_(); d.t2d[keep] = True
    return d

@pytest.fixture
def llama_dir(tmp_path): return save_tiny_target(tmp_path/'target', 'llama')

_SCRATCH = []

def scratch()->Path:
    "A fresh empty folder, removed when the process exits (notebooks have no `tmp_path`)."
    import tempfile
    if not _SCRATCH: _SCRATCH.append(tempfile.TemporaryDirectory(prefix='eagle3-workbench-'))
    return Path(tempfile.mkdtemp(dir=_SCRATCH[0].name))

def tiny_pair(path, arch='llama', vocab=96, draft_vocab=48, seed=0):
    "A random-init 6-layer target of `arch` and a random draft fed resid[2, 3, 4], written under `path` and loaded as a pair."
    from eagle3_workbench.loading import save_draft, load_pair
    path = Path(path)
    save_tiny_target(path/arch, arch, vocab=vocab, seed=seed)
    cfg = tiny_draft_config(vocab=vocab, draft_vocab=draft_vocab)
    save_draft(random_draft(cfg, seed), path/f'{arch}-draft', cfg)
    return load_pair(str(path/arch), str(path/f'{arch}-draft'))

def random_prompts(n, vocab=96, length=10, seed=0):
    "`n` random token-id prompts."
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]

def planted(edit_config=None, edit_weights=None, path=None, draft='zoo:tiny-dsv3-eagle3', target='zoo:tiny-dsv3', engine='sglang'):
    "A copy of a zoo draft with its config or weights changed (under `path`, default a new temporary folder), loaded as a pair."
    import shutil
    from safetensors.torch import load_file, save_file
    from eagle3_workbench.loading import load_pair, resolve_path
    d = Path(path or scratch())/'draft'
    shutil.copytree(resolve_path(draft), d, ignore=shutil.ignore_patterns('training_dump'))
    if edit_config:
        cfg = json.loads((d/'config.json').read_text()); edit_config(cfg); (d/'config.json').write_text(json.dumps(cfg))
    if edit_weights:
        sd = load_file(d/'model.safetensors'); edit_weights(sd); save_file(sd, d/'model.safetensors')
    return load_pair(target, str(d), engine=engine)

def aux_ids(*ids):
    "A config edit for `planted`: write the nested aux layer ids."
    def edit(cfg): cfg['eagle_config']['eagle_aux_hidden_state_layer_ids'] = list(ids)
    return edit

def error_codes(d):
    "The codes of a diagnosis's error-severity findings."
    return {f.code for f in d.findings if f.severity == 'error'}
