"""Engine releases that fix three aux states or assume the target as wide as the draft (SGLang 0.5.6 to 0.5.11, rows of
`engine_rows.LIMITS` read from their files): a four-aux draft and a narrow draft named on those releases, silent on 0.5.12 and
for drafts that fit; the fc shape the message gives is the one the workbench's own draft builds."""
import pytest
from eagle3_workbench.draft_config import DraftConfig
from eagle3_workbench.testing import tiny_draft_config, random_draft
from eagle3_workbench.engine_rows import LIMITS
from eagle3_workbench.limits import limit_findings, limits_of
from eagle3_workbench.engines import version_tuple

def _cfg(ids=(1, 2, 3), **kw):
    return tiny_draft_config(eagle_config=dict(eagle_aux_hidden_state_layer_ids=list(ids), use_aux_hidden_state=True), **kw)

@pytest.mark.parametrize('release', ['0.5.6', '0.5.9', '0.5.11'])
def test_four_aux_states_on_a_release_that_builds_three(release):
    cfg = _cfg((1, 2, 3, 4))
    d = random_draft(cfg)
    f, = limit_findings(d.config, f'sglang=={release}')
    w = tuple(d.fc.weight.shape)   # what the checkpoint holds: [hidden, 4 x target hidden]
    assert f.code == 'AUX_COUNT_FIXED' and f.severity == 'error' and f"fc weight [{w[0]}, {w[1]}]" in f.message
    assert f"[{w[0]}, {3 * cfg['hidden_size']}]" in f.message   # the engine's: three target widths

@pytest.mark.parametrize('release', ['0.5.12', '0.5.23'])
def test_releases_that_read_the_count_are_silent(release):
    assert limit_findings(DraftConfig.from_dict(_cfg((1, 2, 3, 4))), f'sglang=={release}') == []
    assert limit_findings(DraftConfig.from_dict(_cfg((1, 2, 3, 4), hidden=16, target_hidden=32)), f'sglang=={release}') == []

def test_three_aux_states_fit_every_release():
    for v in ('0.5.6', '0.5.11', '0.5.12'): assert limit_findings(DraftConfig.from_dict(_cfg()), f'sglang=={v}') == []

def test_a_draft_narrower_than_its_target():
    narrow = DraftConfig.from_dict(_cfg(hidden=16, target_hidden=32))
    assert [(f.code, f.severity) for f in limit_findings(narrow, 'sglang==0.5.8')] == [('TARGET_WIDTH_ASSUMED', 'warning')]

def test_every_limit_names_its_file_and_releases():
    for r in LIMITS:
        assert '.py' in r.source and version_tuple(r.first) <= version_tuple(r.last)
        assert limits_of(f'{r.engine}=={r.first}') and r not in limits_of(f'{r.engine}==0.5.12')
