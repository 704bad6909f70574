"""`diagnose --training-dump DUMP --deployment CAPTURE`: the features a deployment fed the draft (draft.fc.in, a full-mode
--forward-hooks capture) held against a SpecForge dump of the real target on the same prompts, from the command. An
fp8-rounded copy of the target is TARGET_PRECISION_MISMATCH, the real target in float32 is clean, a rotated feature basis
is TARGET_ROTATED_BASIS, and two paired prompts are not enough evidence."""
import copy, dataclasses, json
import pytest, torch
from torch import nn
from test_runtime_classes import resid_features, specforge_dump

PRECISION_CODES = {'TARGET_PRECISION_MISMATCH', 'TARGET_ROTATED_BASIS'}

@pytest.fixture(scope='module')
def served(tmp_path_factory):
    "`capture(how)`: a --forward-hooks capture (full mode) of the zoo pair serving 6 prompts, its target as `how` says; the dump and the prompts."
    from eagle3_workbench.loading import load_pair
    from eagle3_workbench.engine import Session
    from eagle3_workbench.prompts import read_prompts
    from eagle3_workbench.sglang.hook import forward_hooks_json, attach_forward_hooks, flush_all
    pair, ps = load_pair('zoo:tiny-llama', 'zoo:tiny-llama-eagle3'), read_prompts(n=6)
    tmp = tmp_path_factory.mktemp('precision')
    layers = tuple(pair.wiring.resid_layers)
    specforge_dump(tmp/'dump', resid_features(pair.target, pair.tokenizer, ps, layers))   # the real target's features, stored in bf16
    specforge_dump(tmp/'dump2', resid_features(pair.target, pair.tokenizer, ps[:2], layers))
    def fp8(model):
        m = copy.deepcopy(model)
        with torch.no_grad():
            for name, w in m.named_parameters():
                if w.dim() == 2 and 'embed' not in name: w.copy_(w.to(torch.float8_e4m3fn).float())
        return m
    H = pair.target.config.hidden_size
    q = torch.linalg.qr(torch.randn(H, H, generator=torch.Generator().manual_seed(0)))[0]   # one orthogonal map, every chunk
    made = {}
    def capture(how):
        if how in made: return made[how]
        p = dataclasses.replace(pair, target=fp8(pair.target)) if how == 'fp8' else pair
        folder = tmp/how
        specs = forward_hooks_json(layers, pair.n_layers, folder, mode='full')
        handles = []
        if how == 'rotated':   # before the capture's hooks: the capture records the rotated features the draft is fed
            handles.append(p.draft.fc.register_forward_pre_hook(lambda m, a: ((a[0].unflatten(-1, (len(layers), H)) @ q).flatten(-2), *a[1:])))
        handles += attach_forward_hooks(p.target, specs, role='target') + attach_forward_hooks(nn.ModuleDict({'model': p.draft}), specs, role='draft')
        try:
            for x in ps:
                s = Session(p, speculative_num_steps=2); s.extend(p.tokenizer(x, add_special_tokens=False)['input_ids']); s.step()
            flush_all()
        finally:
            for h in handles: h.remove()
        made[how] = folder
        return folder
    return capture, tmp, ps

def run(forked_cli, cwd, dump, cap, prompt):
    p = forked_cli.run(['diagnose', '--training-dump', str(dump), '--deployment', str(cap), '--deployment-prompt', prompt,
                        '--target', 'zoo:tiny-llama', '--draft', 'zoo:tiny-llama-eagle3', '--n-prompts', '3', '--no-accept', '--json'], cwd)
    try: out = json.loads(p.stdout)
    except json.JSONDecodeError: raise AssertionError(f"exit {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}") from None
    return p.returncode, out, p.stderr

@pytest.mark.parametrize('how', ['fp8', 'fp32', 'rotated'], ids=['TARGET_PRECISION_MISMATCH', 'clean', 'TARGET_ROTATED_BASIS'])
def test_fed_features_against_the_dump_from_the_command(served, forked_cli, tmp_path, how):
    capture, tmp, ps = served
    rc, out, err = run(forked_cli, tmp_path, tmp/'dump', capture(how), ps[0])
    feats = out['deployment']['features']
    # every prompt paired: the first by --deployment-prompt, the others by the draft's own ids (the target's shifted by one)
    assert feats['samples'] == 6 and feats['dtypes'] == ['bfloat16', 'float32'], feats
    found = {f['code'] for f in out['findings']} & PRECISION_CODES
    verdicts = {r['verdict'] for r in feats['rows']}
    if how == 'fp32':
        assert found == set() and verdicts == {'same'}, (found, feats['rows'])
        assert 'chunk 0 same' in err
        return
    code = {'fp8': 'TARGET_PRECISION_MISMATCH', 'rotated': 'TARGET_ROTATED_BASIS'}[how]
    assert found == {code} and out['verdict'] == 'miswired' and rc == 1, (found, feats['rows'])
    f = next(f for f in out['findings'] if f['code'] == code)
    assert f['severity'] == 'error'
    if how == 'fp8':   # more than the bf16 rounding the dump allows, the directions kept
        assert all(r['rel_error_ci'][0] > feats['tol'] and r['cosine'] > 0.99 for r in f['evidence']['chunks'])
    else:   # the norms kept, the directions not
        assert all(abs(r['norm_ratio'] - 1) < 1e-3 and r['cosine'] < 0.9 for r in f['evidence']['chunks'])

def test_two_paired_prompts_are_not_enough_evidence(served, forked_cli, tmp_path):
    capture, tmp, ps = served
    rc, out, err = run(forked_cli, tmp_path, tmp/'dump2', capture('fp8'), ps[0])
    assert out['deployment']['features']['samples'] == 2
    assert not {f['code'] for f in out['findings']} & PRECISION_CODES and 'not enough evidence' in err, err[-2000:]
