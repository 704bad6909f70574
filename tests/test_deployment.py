"The doctor on a deployment-style capture alone: SGLang --forward-hooks records of the zoo pair with the original fault planted."
import json
import pytest, torch
from torch import nn
from eagle3_workbench.loading import load_pair
from eagle3_workbench.engine import Session
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.sglang.hook import forward_hooks_json, attach_forward_hooks
from eagle3_workbench.sglang.readers import read_hook_folder
from eagle3_workbench.doctor import diagnose, fed_from_capture

FAULT = (0, 2, 6)   # SpecForge ids [-1, 1, 5]: [embedding, trained low, trained mid] in slots trained on [low, mid, high]

@pytest.fixture(scope='module')
def deployment(tmp_path_factory):
    "A hook folder as a deployment serving one prompt with the fault planted leaves it."
    tmp = tmp_path_factory.mktemp('deployment')
    pair, fault = load_pair('zoo:tiny-dsv3'), FAULT
    specs = forward_hooks_json(fault, pair.n_layers, tmp/'hooks', mode='full')
    # SGLang names the draft's modules model.fc / model.midlayer.*: the same module objects, reached through a wrapper
    handles = attach_forward_hooks(pair.target, specs, role='target') + attach_forward_hooks(nn.ModuleDict({'model': pair.draft}), specs, role='draft')
    try:
        s = Session(pair, wiring=fault, speculative_num_steps=3)
        s.extend(read_prompts(n=1)[0]); s.step()
    finally:
        for h in handles: h.remove()
    from eagle3_workbench.sglang.hook import flush_all
    flush_all()
    return pair, tmp/'hooks', read_prompts(n=1)[0]   # the request the deployment served

@pytest.mark.slow
def test_doctor_finds_embedding_fault_from_deployment_capture(deployment):
    pair, folder, prompt = deployment
    fault = FAULT
    records = read_hook_folder(folder).records
    fed, sim, findings = fed_from_capture(pair, records, prompt)
    assert fed == fault and findings == [] and all(sim['cosine'][c][k] > 0.999 for c, k in enumerate(fault))
    d = diagnose(pair, read_prompts(n=24), deployment=records, deployment_prompt=prompt, accept=False)
    assert d.verdict == 'miswired' and 'AUX_EMBEDDING_CAPTURED' in d.codes and 'AUX_LAYERS_MISMATCH' in d.codes, str(d)
    assert d.configured == list(fault) and d.recommended['resid_layers'] == [2, 6, 9]

def test_capture_without_fc_tensors_is_a_finding():
    pair = load_pair('zoo:tiny-dsv3')
    fed, sim, findings = fed_from_capture(pair, [])
    assert fed is None and findings[0].code == 'CAPTURE_INVALID' and "mode 'full'" in findings[0].message

@pytest.mark.slow
def test_cli_diagnose_from_a_deployment_folder(deployment, capsys):
    from eagle3_workbench.cli import main, EXIT_CHECK_FAILED
    _, folder, prompt = deployment
    rc = main(['diagnose', '--deployment', str(folder), '--deployment-prompt', prompt, '--no-accept', '--json', '--n-prompts', '8'])
    out = json.loads(capsys.readouterr().out)
    assert rc == EXIT_CHECK_FAILED and out['verdict'] == 'miswired', out
    assert out['configured_resid_layers'] == list(FAULT) and out['recommended']['resid_layers'] == [2, 6, 9]
    assert {'AUX_EMBEDDING_CAPTURED', 'AUX_LAYERS_MISMATCH'} <= {f['code'] for f in out['findings']}
