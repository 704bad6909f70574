"The doctor on a deployment-style capture alone: SGLang --forward-hooks records of the zoo pair with the original fault planted."
import pytest, torch
from torch import nn
from eagle3_workbench.models import load_pair
from eagle3_workbench.engine import Session, zoo_prompts
from eagle3_workbench.sglang import forward_hooks_json, attach_forward_hooks, read_hook_folder
from eagle3_workbench.doctor import diagnose, fed_from_capture

@pytest.mark.slow
def test_doctor_finds_embedding_fault_from_deployment_capture(tmp_path):
    pair = load_pair('zoo:tiny-dsv3')
    fault = (0, 2, 6)   # SpecForge ids [-1, 1, 5]: [embedding, trained low, trained mid] in slots trained on [low, mid, high]
    specs = forward_hooks_json(fault, pair.n_layers, tmp_path/'hooks', mode='full')
    # SGLang names the draft's modules model.fc / model.midlayer.*: the same module objects, reached through a wrapper
    handles = attach_forward_hooks(pair.target, specs, role='target') + attach_forward_hooks(nn.ModuleDict({'model': pair.draft}), specs, role='draft')
    try:
        s = Session(pair, wiring=fault, speculative_num_steps=3)
        s.extend(zoo_prompts(1)[0]); s.step()
    finally:
        for h in handles: h.remove()
    from eagle3_workbench import sglang
    sglang._flush_all()
    records = read_hook_folder(tmp_path/'hooks').records
    prompt = zoo_prompts(1)[0]        # the request the deployment served
    fed, sim, findings = fed_from_capture(pair, records, prompt)
    assert fed == fault and findings == [] and all(sim['cosine'][c][k] > 0.999 for c, k in enumerate(fault))
    d = diagnose(pair, zoo_prompts(24), deployment=records, deployment_prompt=prompt, accept=False)
    assert d.verdict == 'miswired' and 'AUX_EMBEDDING_CAPTURED' in d.codes and 'AUX_LAYERS_MISMATCH' in d.codes, str(d)
    assert d.configured == list(fault) and d.recommended['resid_layers'] == [2, 6, 9]

def test_capture_without_fc_tensors_is_a_finding():
    pair = load_pair('zoo:tiny-dsv3')
    fed, sim, findings = fed_from_capture(pair, [])
    assert fed is None and findings[0].code == 'CAPTURE_INVALID' and "mode 'full'" in findings[0].message
