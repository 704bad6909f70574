"""Recordings on the zoo: the doctor from a recording folder, with the target's weight files removed, gives the
in-process answers (verdict, recommended and trained layers, accept lengths), planted faults included; the engine's
accept length from a recording is the live target's (chain and tree); `record` then `diagnose / run --recording` from
the command line; bad recordings and requests are one-line errors (exit 2) or named findings."""
import contextlib, io, json, os, re, shutil, subprocess, sys
from pathlib import Path
import pytest, torch
from eagle3_workbench.testing import planted, aux_ids, save_tiny_target
from eagle3_workbench.loading import load_pair, load_target
from eagle3_workbench.formats import resolve_path
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.recording import record, recorded_pair, open_recording
from eagle3_workbench.doctor import diagnose, read_training_dump
from eagle3_workbench.engine import run_prompts
from eagle3_workbench.cli import main, EXIT_BAD_INPUT, EXIT_OK

ZOO = read_prompts()   # the doctor's default prompts: 48, so the search screens as it does for a user
DUMPS = {'tiny-dsv3': ['zoo:tiny-dsv3-eagle3', 'zoo:tiny-dsv3-eagle3-offdefault']}
# name -> (target, draft, the layers the zoo card says it was trained on)
DRAFTS = {'tiny-dsv3': ('tiny-dsv3', 'zoo:tiny-dsv3-eagle3', (2, 6, 9)), 'tiny-llama': ('tiny-llama', 'zoo:tiny-llama-eagle3', (2, 5, 7)),
          'offdefault': ('tiny-dsv3', 'zoo:tiny-dsv3-eagle3-offdefault', (4, 9, 11))}

def _dump(draft): return resolve_path(draft)/'training_dump' if (resolve_path(draft)/'training_dump').is_dir() else None

@pytest.fixture(scope='module')
def recordings(tmp_path_factory):
    "Each zoo target recorded once (its prompts and its drafts' dump samples) from a copy whose weight files are then removed."
    out = {}
    for t in ('tiny-dsv3', 'tiny-llama'):
        d = tmp_path_factory.mktemp(t)
        shutil.copytree(resolve_path(f'zoo:{t}'), d/'target')
        model, tok = load_target(d/'target')
        extra = [s['input_ids'].tolist() for dr in DUMPS.get(t, []) for s in read_training_dump(_dump(dr))[0]]
        record(model, ZOO, out=d/'rec', tokenizer=tok, max_new_tokens=31, extra_sequences=extra, source=dict(target=f'zoo:{t}'))
        del model
        for f in (d/'target').glob('*.safetensors'): f.unlink()   # from here on, no target weights anywhere
        out[t] = d/'rec'
    return out

def _same(live, rec, what):
    assert rec.verdict == live.verdict and rec.codes == live.codes, f"{what}: {live.verdict} {live.codes} vs {rec.verdict} {rec.codes}"
    assert rec.recommended.get('resid_layers') == live.recommended.get('resid_layers'), what
    assert (live.training_match or {}).get('trained') == (rec.training_match or {}).get('trained'), what
    for k in ('accept_length_before', 'accept_length_after'):
        a, b = live.recommended.get(k), rec.recommended.get(k)
        assert (a is None) == (b is None) and (a is None or abs(a - b) <= 0.01), f"{what} {k}: {a} vs {b}"

@pytest.mark.slow
@pytest.mark.parametrize('name', list(DRAFTS))
def test_doctor_from_a_recording_gives_the_in_process_answers(name, recordings):
    "As shipped (with its dump where the zoo has one), and with a planted fault: same verdict, codes, layers, accept lengths."
    t, draft, trained = DRAFTS[name]
    live, rec = load_pair(f'zoo:{t}', draft), recorded_pair(recordings[t], draft)
    assert not list((recordings[t].parent/'target').glob('*.safetensors'))
    dump = _dump(draft)
    a, b = diagnose(live, ZOO, training_dump=dump), diagnose(rec, training_dump=dump)   # the recording's prompts: the same 48
    _same(a, b, f"{name} as shipped")
    assert b.recommended['resid_layers'] == list(trained) and b.recommended['accept_length_after'] is not None
    if dump: assert tuple(b.training_match['trained']) == trained
    if name == 'offdefault': return   # its planted faults are the dsv3 draft's, on the same recording
    fed = (0,) + trained[1:]   # the embedding captured in chunk 0: the founding fault
    a, b = diagnose(live, ZOO, wiring=fed), diagnose(rec, wiring=fed)
    _same(a, b, f"{name} fed {fed}")
    assert b.verdict == 'miswired' and 'AUX_EMBEDDING_CAPTURED' in b.codes and b.recommended['accept_length_after'] > b.recommended['accept_length_before']

@pytest.mark.slow
def test_planted_config_fault_from_a_recording(recordings):
    "An id one layer off in the shipped config (as SGLang reads it): named from the recording, trained layers recommended."
    p = planted(aux_ids(2, 6, 9), engine='sglang==0.5.6')   # read +1 by this release: resid[3, 7, 10]
    d = diagnose(recorded_pair(recordings['tiny-dsv3'], p.draft_path, engine='sglang==0.5.6'), accept=False)
    assert d.configured == [3, 7, 10] and d.verdict == 'miswired' and d.recommended['resid_layers'] == [2, 6, 9]
    assert d.recommended['for_engine']['ids'] == [1, 5, 8]

@pytest.mark.slow
def test_engine_accept_length_from_a_recording_is_the_live_one(recordings):
    "run_prompts on the recorded pair and on the live one, chain and tree: the same accept length (exactly, at temperature 0)."
    live, rec = load_pair('zoo:tiny-dsv3'), recorded_pair(recordings['tiny-dsv3'])
    for settings in (dict(speculative_num_steps=5), dict(speculative_num_steps=3, speculative_eagle_topk=2, speculative_num_draft_tokens=6)):
        a = run_prompts(live, ZOO[:6], 24, progress=False, **settings)
        b = run_prompts(rec, ZOO[:6], 24, progress=False, **settings)
        assert abs(a.summary['accept_length'] - b.summary['accept_length']) <= 0.01 and b.lossless, (settings, a.summary, b.summary)
        assert [[r.verify.accept_length for r in run] for run in a.runs] == [[r.verify.accept_length for r in run] for run in b.runs]

def _cli(*argv):
    "main() in-process: (exit code, stdout, stderr)."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try: rc = main(list(map(str, argv)))
        except SystemExit as e: rc = e.code
    return rc, out.getvalue(), err.getvalue()

@pytest.mark.slow
def test_record_then_diagnose_and_run_without_the_target(tmp_path):
    "The README's flow from a fresh shell: record, remove the target's weights, diagnose and run from the recording."
    shutil.copytree(resolve_path('zoo:tiny-dsv3'), tmp_path/'target')
    env = dict(os.environ, OMP_NUM_THREADS='1')
    cli = lambda *a: subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', *map(str, a)], capture_output=True, text=True, env=env)
    r = cli('record', '--target', tmp_path/'target', '--out', tmp_path/'rec', '--n-prompts', 8, '--json')
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info['sequences'] == 8 and info['layers'] == 13 and open_recording(tmp_path/'rec').manifest['complete']
    for f in (tmp_path/'target').glob('*.safetensors'): f.unlink()
    r = cli('diagnose', '--recording', tmp_path/'rec', '--draft', 'zoo:tiny-dsv3-eagle3', '--json')
    assert r.returncode in (0, 3), r.stderr   # 8 prompts: ok, or not enough evidence to say more
    d = json.loads(r.stdout)
    assert d['recommended']['resid_layers'] == [2, 6, 9] and d['search']['prompts'] == 8
    # `run --recording` as a user compares it with `run --target`: the same flags, chain and tree; the recording (made for a
    # run of 32 new tokens with 5 steps, record's defaults) replays it whole, so the same cycles and tokens are counted
    for tree in ([], ['--topk', '3', '--num-draft-tokens', '8']):
        flags = ['--draft', 'zoo:tiny-dsv3-eagle3', '--max-new-tokens', 24, *tree, '--json']
        r, t = cli('run', '--recording', tmp_path/'rec', *flags), cli('run', '--target', 'zoo:tiny-dsv3', '--n-prompts', 8, *flags)
        assert r.returncode == 0 == t.returncode, r.stderr + t.stderr
        recd, live = json.loads(r.stdout), json.loads(t.stdout)
        assert (recd['tokens'], recd['cycles'], recd['short']) == (live['tokens'], live['cycles'], []) and recd['lossless'] is True
        assert abs(recd['accept_length'] - live['accept_length']) <= 0.01 and 'ended before' not in r.stderr
    # asked for more than it holds (32 + 5 continuation tokens): the replay stops short and says so
    r = cli('run', '--recording', tmp_path/'rec', '--draft', 'zoo:tiny-dsv3-eagle3', '--max-new-tokens', 40, '--json')
    short = json.loads(r.stdout)['short']
    assert r.returncode == 0 and short and all(s['new_tokens'] < 40 and s['why'] == 'recording' for s in short)
    assert f"{len(short)} of 8 prompts ended before --max-new-tokens 40" in r.stderr and 'record --max-new-tokens 40 --steps 5' in r.stderr

@pytest.fixture(scope='module')
def small(tmp_path_factory):
    "A recording of the zoo target on 8 prompts, some layers only (resid[0, 2, 6]), no dump samples."
    d = tmp_path_factory.mktemp('small')
    rc, out, err = _cli('record', '--out', d/'rec', '--n-prompts', 8, '--max-new-tokens', 0, '--layers', '0,2,6')
    assert rc == EXIT_OK, err
    return d/'rec'

def _broken(src, tmp_path, how):
    d = tmp_path/how; shutil.copytree(src, d)
    shard = d/'shard-00000.safetensors'
    if how == 'truncated': shard.write_bytes(shard.read_bytes()[:-100])
    if how == 'corrupted': b = bytearray(shard.read_bytes()); b[-5] ^= 1; shard.write_bytes(bytes(b))
    if how == 'unfinished':
        m = json.loads((d/'manifest.json').read_text()); m['complete'] = False; (d/'manifest.json').write_text(json.dumps(m))
    return d

@pytest.mark.parametrize('case', ['truncated', 'corrupted', 'unfinished', 'missing layers', 'both targets', 'no draft', 'vocab without draft',
                                  'another model'])
def test_bad_recordings_are_one_line_errors(case, small, tmp_path):
    argv = {'missing layers': ['diagnose', '--recording', small, '--no-accept'],
            'both targets': ['diagnose', '--recording', small, '--target', 'zoo:tiny-dsv3'],
            'vocab without draft': ['record', '--out', tmp_path/'r', '--logits', 'vocab'],
            }.get(case)
    want = {'truncated': 'truncated or replaced', 'corrupted': 'sha256 differs', 'unfinished': 'unfinished recording',
            'missing layers': 'not resid[9]', 'both targets': 'give one of them', 'no draft': 'give --draft',
            'vocab without draft': 'give --draft', 'another model': 'a recording of another model'}[case]
    if case in ('truncated', 'corrupted', 'unfinished'): argv = ['diagnose', '--recording', _broken(small, tmp_path, case)]
    if case in ('no draft', 'another model'):   # a recording of a target that is not the zoo's (another vocabulary and width)
        t = save_tiny_target(tmp_path/'other', vocab=2048)   # the zoo's tokenizer, a 32-wide model
        for f in ('tokenizer.json', 'tokenizer_config.json'): shutil.copy(resolve_path('zoo:tiny-dsv3')/f, t/f)
        assert _cli('record', '--target', t, '--out', tmp_path/'orec', '--n-prompts', 2, '--max-new-tokens', 0)[0] == EXIT_OK
        argv = ['run', '--recording', tmp_path/'orec'] + (['--draft', 'zoo:tiny-dsv3-eagle3'] if case == 'another model' else [])
    rc, out, err = _cli(*argv)
    errors = [l for l in re.split(r'[\r\n]', err) if l.startswith('eagle3-workbench ')]   # (stderr also holds the progress lines)
    assert rc == EXIT_BAD_INPUT and len(errors) == 1 and want in errors[0] and 'error:' in errors[0] and 'Traceback' not in err, (case, rc, err)
    assert not (tmp_path/'r').exists()   # nothing half-written

@pytest.mark.slow
def test_dump_not_in_the_recording_is_a_named_finding(small):
    "A dump whose samples were not recorded: DUMP_INVALID naming the fix, the rest of the diagnosis still given."
    d = diagnose(recorded_pair(small), training_dump=_dump('zoo:tiny-dsv3-eagle3'), wiring=(0, 2, 6), accept=False)
    f = next(f for f in d.findings if f.code == 'DUMP_INVALID')
    assert 'not in the recording' in f.message and 'record --training-dump' in f.message and d.sweep

@pytest.mark.slow
def test_report_from_a_recording(tmp_path):
    "`report --recording DIR` with paths relative to where the user stands: the verdict and acceptance of the recorded target, no weights."
    env = dict(os.environ, OMP_NUM_THREADS='1')
    cli = lambda *a: subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', *map(str, a)], capture_output=True, text=True, env=env, cwd=tmp_path)
    r = cli('record', '--out', 'rec', '--n-prompts', 8, '--max-new-tokens', 24, '--json')
    assert r.returncode == 0, r.stderr
    r = cli('report', '--recording', 'rec', '--out', 'out/report.html')
    assert r.returncode == 0, r.stderr
    nb = json.loads((tmp_path/'out'/'report.ipynb').read_text())
    text = '\n'.join(''.join(o.get('text', '')) + ''.join(o.get('data', {}).get('text/plain', '')) for c in nb['cells'] for o in c.get('outputs', []))
    assert f"Pair(target={tmp_path/'rec'} [deepseek_v3, 12 layers]" in text and 'verdict: OK' in text   # the zoo pair as trained
    assert 'prompts: 8, 24 new tokens each' in text and 'lossless:                True' in text
    assert (tmp_path/'out'/'report.html').stat().st_size > 100_000
    assert cli('report', '--recording', 'rec', '--target', 'zoo:tiny-dsv3').returncode == 2
