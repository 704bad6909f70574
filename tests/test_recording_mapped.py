"""A recording at real width is opened mapped, not read: `recorded_pair` and the stepper on it (extend, draft, verify)
touch the pages of the sequence they step, never whole shards. Measured as the process's resident memory, in a fresh
process per case, against the shards' size; the counterpart reads every shard whole (as `safetensors.torch.load_file`
would) and the same bound catches it."""
import json, os, subprocess, sys
from pathlib import Path
import torch

ROOT = Path(__file__).parent.parent
H, LAYERS, V, SEQS, T, PROMPT = 512, 6, 96, 64, 256, 12   # shards of 64 x 256 tokens x resid[0..6] x 512 floats: ~235 MB

def _recording(folder:Path)->Path:
    "A synthetic recording written by the recording writer: random resid[k] and logits, continuations the greedy tokens."
    from eagle3_workbench.recording import RecordingWriter, new_manifest, new_request
    from eagle3_workbench.testing import tiny_target_config
    cfg = tiny_target_config('llama', vocab=V, hidden_size=H, num_hidden_layers=LAYERS).to_dict()
    g = torch.Generator().manual_seed(0)
    seqs = []
    for _ in range(SEQS):
        logits = torch.randn(T, V, generator=g)
        greedy = logits.argmax(-1)
        tokens = torch.cat([torch.randint(0, V, (PROMPT,), generator=g), greedy[PROMPT - 1:T - 1]])   # greedy: the continuation is the argmax
        seqs.append(dict(tokens=tokens, greedy=greedy, logits=logits, prompt_tokens=PROMPT, kind='prompt',
                         resid={k: torch.randn(T, H, generator=g) for k in range(LAYERS + 1)}))
    layers = range(LAYERS + 1)
    req = new_request([s['tokens'][:PROMPT].tolist() for s in seqs], [], T - PROMPT, 'full', None, layers, torch.float32)
    w = RecordingWriter(folder/'rec', new_manifest(cfg, req, layers, torch.float32))
    for i in range(0, SEQS, SEQS // 2): w.add(seqs[i:i + SEQS // 2])   # two shards
    w.finish(dict(embed_tokens=torch.randn(V, H, generator=g), lm_head=torch.randn(V, H, generator=g)))
    return folder/'rec'

def _draft(folder:Path)->Path:
    from eagle3_workbench.testing import tiny_draft_config, random_draft
    from eagle3_workbench.loading import save_draft
    cfg = tiny_draft_config(vocab=V, draft_vocab=48, hidden=H, target_hidden=H)   # as wide as the target, as drafts are
    save_draft(random_draft(cfg), folder/'draft', cfg)
    return folder/'draft'

# run in a fresh process: resident memory before the recording is opened (a second time), and after the stepper stepped on it
PROBE = """
import json, sys
def rss(): return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmRSS'))
rec, draft, whole = sys.argv[1], sys.argv[2], sys.argv[3] == 'whole'
import torch, ipywidgets
from eagle3_workbench import recording
from eagle3_workbench.recording import recorded_pair
from eagle3_workbench.widgets import stepper
if whole:   # the planted fault: every shard read whole when opened
    from safetensors.torch import load_file
    class Whole(recording.MappedSafetensors):
        def __init__(self, path):
            super().__init__(path); self.tensors = {k: v.clone() for k, v in load_file(str(path)).items()}
        def get(self, name): return self.tensors[name]
    recording.MappedSafetensors = Whole
def stepped():
    st = stepper(recorded_pair(rec, draft=draft), speculative_num_steps=3)
    for n in ('Extend', 'Draft', 'Verify'): st.buttons[n].click()
    assert st.session.history, 'nothing was verified'
    return st
kept = stepped()   # once first: what the first stepper imports and builds is not what is measured
before = rss()
again = stepped()   # the same recording opened again: new maps, so its pages count anew
print(json.dumps(dict(grew=rss() - before)))
"""

def _grew(rec, draft, how)->int:
    r = subprocess.run([sys.executable, '-c', PROBE, str(rec), str(draft), how], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])['grew']

def test_stepper_maps_the_shards_it_steps(tmp_path):
    rec, draft = _recording(tmp_path), _draft(tmp_path)
    shards = sum(f.stat().st_size for f in rec.glob('shard-*.safetensors'))
    assert shards > 200e6, shards
    mapped, whole = _grew(rec, draft, 'mapped'), _grew(rec, draft, 'whole')
    print(f"shards {shards / 1e6:.0f} MB; resident memory grew {mapped / 1e6:.0f} MB mapped, {whole / 1e6:.0f} MB read whole")
    # one stepped sequence is 256 tokens x 7 x 512 floats (3.7 MB); a second draft, stand-in and capture stay well under a tenth
    assert mapped < shards / 10, f"opening the stepper grew resident memory by {mapped / 1e6:.0f} MB, shards hold {shards / 1e6:.0f} MB"
    assert whole > shards * 0.9, f"the planted whole read grew it by only {whole / 1e6:.0f} MB of {shards / 1e6:.0f} MB"
