"""A disaggregated deployment's hand-off, read against a real pair: the clean row is the draft's own state after its
extend over the prompt (the state SGLang 0.5.23's prefill node sends, `engine_rows.HANDOFF_PATH`), computed here by the
workbench's own draft; each planted row is what a public thread saw sent instead, named, beside its clean counterpart."""
import json
import pytest, torch
from safetensors.torch import save_file
from eagle3_workbench.testing import tiny_pair, random_prompts
from eagle3_workbench.recording import record
from eagle3_workbench.handoff import handoff_findings, handoff_width, read_handoff

@pytest.fixture(scope='module')
def case(tmp_path_factory):
    "A tiny pair, a recording of three prompts, and per prompt the draft's state at its last prompt token."
    pair = tiny_pair(tmp_path_factory.mktemp('handoff'))
    prompts = random_prompts(3, length=7)
    rec = record(pair, prompts, max_new_tokens=2)
    own = []
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            P = len(ids)
            feats = torch.cat([rec.resid(k, i)[:P] for k in pair.wiring.resid_layers], -1)[None].float()
            nxt = int(rec.greedy(i)[P - 1])   # the target's token after the prompt: the draft extend's last input token
            h, _ = pair.draft(feats, torch.tensor([ids[1:] + [nxt]]), torch.tensor([list(range(P))]))
            own.append(h[0, -1])
    return pair, rec, prompts, torch.stack(own)

def _last(rec, prompts, k): return torch.stack([rec.resid(k, i)[len(p) - 1] for i, p in enumerate(prompts)]).float()

def test_the_draft_state_is_clean(case):
    pair, rec, prompts, own = case
    assert own.shape == (3, pair.draft.config.hidden_size)
    assert handoff_findings(own, pair.draft.config, rec, [0, 1, 2]) == []

def test_the_target_last_state_sent_is_named(case):
    "The target's resid[N] at the last prompt token, as wide as the draft: served without an error, named here."
    pair, rec, prompts, own = case
    N = rec.n_layers
    sent = own.clone(); sent[1] = _last(rec, prompts, N)[1]   # one request's row is the target's state
    f, = handoff_findings(sent, pair.draft.config, rec, [0, 1, 2])
    assert (f.code, f.severity, f.evidence['rows'], f.evidence['layers']) == ('HANDOFF_TARGET_STATE', 'error', {1: f'resid[{N}]'}, [f'resid[{N}]'])
    assert f.message.startswith("1 of 3 hand-off rows are the target's")

def test_the_aux_concat_sent_is_named_by_its_layers(case):
    "Three times the target's width, each chunk the configured layer at the last prompt token (sglang#10059)."
    pair, rec, prompts, _ = case
    ks = list(pair.wiring.resid_layers)
    sent = torch.cat([_last(rec, prompts, k) for k in ks], -1)
    f, = handoff_findings(sent, pair.draft.config, rec, [0, 1, 2])
    H = rec.target['hidden_size']
    assert (f.code, f.evidence['width'], f.evidence['expected'], f.evidence['chunks']) == ('HANDOFF_WIDTH', 3 * H, pair.draft.config.hidden_size, [f'resid[{k}]' for k in ks])

def test_a_buffer_the_target_width_for_a_wider_draft(case):
    "A draft wider than the target with rows the target's width (sglang#13590): named; its own width is clean."
    pair, rec, prompts, own = case
    wide = type(pair.draft.config)(**{**pair.draft.config.__dict__, 'hidden_size': 2 * rec.target['hidden_size']})
    f, = handoff_findings(own, wide, rec, [0, 1, 2])
    assert f.code == 'HANDOFF_WIDTH' and "sized by the target's hidden size" in f.message
    assert handoff_findings(torch.randn(3, wide.hidden_size), wide, rec, [0, 1, 2]) == []

def test_settings_and_files(case, tmp_path):
    pair, rec, prompts, own = case
    cfg = pair.draft.config
    assert handoff_width(dict(disaggregation_mode='decode', speculative_algorithm='EAGLE3'), cfg) == cfg.hidden_size
    assert handoff_width(dict(disaggregation_mode=None, speculative_algorithm='EAGLE3'), cfg) is None
    save_file({'hidden_states': own.contiguous()}, str(tmp_path/'h.safetensors'))
    assert torch.equal(read_handoff(tmp_path/'h.safetensors'), own)
    (tmp_path/'h.json').write_text(json.dumps([1]))
    with pytest.raises(ValueError, match=r'h\.json: expected a \.safetensors or \.pt file'): read_handoff(tmp_path/'h.json')
    with pytest.raises(ValueError, match='seqs: 2 sequence indices for 3 hand-off rows'): handoff_findings(own, cfg, rec, [0, 1])

# ------------------------------------------------------------------------------------------------------------------
# the same check from a running deployment's tensor dump instead of a recording
from pathlib import Path
from eagle3_workbench.sglang.readers import read_debug_tensor_dump
from eagle3_workbench.handoff import dump_layers

def _write_dump(base, passes, N):
    "Pass files as SGLang's dump writes them: resid[0] at embed_tokens, resid[i] as the residual at layer i's input norm, resid[N] at model.norm."
    d = Path(base)/'TP0_PP0_Rank0_pid7'; d.mkdir(parents=True)
    for n, (pos, ids, resid) in enumerate(passes):
        data = {'model.embed_tokens': resid[0], 'model.norm': [resid[N] * 2, resid[N]],
                'model.forward_batch_info.positions': pos, 'model.forward_batch_info.input_ids': ids,
                'model.forward_batch_info.seq_lens': torch.tensor([int(pos.max()) + 1])}
        data |= {f'model.layers.{i}.input_layernorm': [resid[i] * 2, resid[i]] for i in range(1, N)}
        torch.save(data, d/f'Pass{n:05d}.pt')

def test_a_dump_read_as_layers_gives_the_recordings_states(case, tmp_path):
    "Prompt 0 in one prefill pass, prompts 1 and 2 batched in the next, then a decode pass: the dump's layers are the recording's prompt rows, and the hand-off check reads them alike."
    pair, rec, prompts, own = case
    N = rec.n_layers
    rows = lambda i, a, b: [rec.resid(k, i)[a:b].float() for k in range(N + 1)]
    cat = lambda *rs: [torch.cat(t) for t in zip(*rs)]
    p0, p1, p2 = prompts
    passes = [(torch.arange(len(p0)), torch.tensor(p0), rows(0, 0, len(p0))),
              (torch.cat([torch.arange(len(p1)), torch.arange(len(p2))]), torch.tensor(p1 + p2), cat(rows(1, 0, len(p1)), rows(2, 0, len(p2)))),
              (torch.tensor([len(p0)]), torch.tensor([5]), rows(0, len(p0), len(p0) + 1))]   # a decode pass: not a prompt
    _write_dump(tmp_path, passes, N)
    dl = dump_layers(read_debug_tensor_dump(tmp_path, n_layers=N, keep_tensors=True), N)
    assert dl.layers == tuple(range(N + 1)) and [dl.tokens(i).tolist() for i in range(3)] == [p0, p1, p2] and dl.lacks == ('greedy tokens', 'logits')
    for i, p in enumerate(prompts):
        for k in dl.layers: assert torch.equal(dl.resid(k, i), rec.resid(k, i)[:len(p)].float())
    last = torch.stack([rec.resid(N, i)[len(p) - 1] for i, p in enumerate(prompts)]).float()
    assert handoff_findings(own, pair.draft.config, dl, [0, 1, 2]) == []
    f, = handoff_findings(last, pair.draft.config, dl, [0, 1, 2])
    assert f.code == 'HANDOFF_TARGET_STATE' and f.evidence['layers'] == [f'resid[{N}]'] and len(f.evidence['rows']) == 3

def test_a_chunked_prompt_is_read_to_its_first_chunk_and_said(case, tmp_path):
    "A later chunk looks like a verify pass by its positions: the prompt is read to its first chunk, and the notes say why."
    pair, rec, prompts, own = case
    N, p = rec.n_layers, prompts[0]
    rows = lambda a, b: [rec.resid(k, 0)[a:b].float() for k in range(N + 1)]
    _write_dump(tmp_path, [(torch.arange(4), torch.tensor(p[:4]), rows(0, 4)), (torch.arange(4, len(p)), torch.tensor(p[4:]), rows(4, len(p)))], N)
    dl = dump_layers(read_debug_tensor_dump(tmp_path, n_layers=N, keep_tensors=True), N)
    assert dl.tokens(0).tolist() == p[:4] and len(dl.sequences) == 1 and any('chunk' in n for n in dl.notes)

def test_a_dump_without_tensors_is_named(tmp_path):
    _write_dump(tmp_path, [(torch.arange(3), torch.arange(3), [torch.randn(3, 4) for _ in range(4)])], 3)
    with pytest.raises(ValueError, match='keep_tensors=True'): dump_layers(read_debug_tensor_dump(tmp_path, n_layers=3), 3)
