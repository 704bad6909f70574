"""A catalog of bad inputs to every `eagle3-workbench` command, run as a user runs it (a process of its own: forked from an
interpreter that has imported torch once, `forked_cli.py`, checked against a new interpreter below).

Each mistake must end with exit code 2, no traceback, ONE error line that names the offending file, key or option,
and nothing written half-way. The bases to break are copies of the zoo folders in `tmp_path`.
"""
import json, re, shutil, subprocess, sys
from dataclasses import dataclass, field
from pathlib import Path
import pytest, torch
from conftest import CLI_ENV

from eagle3_workbench.target import zoo_root
ZOO = zoo_root()

# ---- builders: each takes the case folder and leaves in it what the case needs ----
def target(tmp, src='tiny-llama', name='t'):
    "A copy of a zoo target (tiny-llama: 10 layers; tiny-dsv3: 12 layers)."
    return Path(shutil.copytree(ZOO/src, tmp/name))

def draft(tmp, src='tiny-llama-eagle3', name='d'):
    return Path(shutil.copytree(ZOO/src, tmp/name, ignore=shutil.ignore_patterns('training_dump')))

def edit_json(f, fn):
    d = json.loads(Path(f).read_text()); fn(d); Path(f).write_text(json.dumps(d))

def truncate(f, keep=0.5): f.write_bytes(f.read_bytes()[:int(f.stat().st_size * keep)])

def set_ids(ids):
    def fn(d): d.setdefault('eagle_config', {})['eagle_aux_hidden_state_layer_ids'] = ids
    return fn

def pair(tmp, **kw):
    "tiny-llama target t/ and draft d/ (both copied); returns the CLI arguments that name them."
    target(tmp, **kw); draft(tmp)
    return ['--target', 't', '--draft', 'd']

def hook_folder(tmp, records_text):
    (tmp/'dep'/'rank0_pid1').mkdir(parents=True)
    (tmp/'dep'/'rank0_pid1'/'records.jsonl').write_text(records_text)

class Evil:   # a pickled object: a weights_only=True load must refuse it
    pass

# ---- the catalog ----
@dataclass
class Case:
    args: list                    # CLI arguments (paths relative to the case folder, the cwd)
    expect: list                  # substrings the error line must contain
    setup: object = None          # fn(tmp) -> None
    forbid: list = field(default_factory=list)   # substrings it must not contain (e.g. blaming the wrong file)
    argparse: bool = False        # must be argparse's own error (a usage block, then the error line)
    slow: bool = False            # loads models and takes more than a few seconds

def _no_tok(tmp):
    target(tmp); draft(tmp)
    for n in ('tokenizer.json', 'tokenizer_config.json'): (tmp/'t'/n).unlink()

def _bad_tok(tmp):
    target(tmp); draft(tmp); (tmp/'t'/'tokenizer.json').write_text('{"this is": "not a tokenizer"')

def _ids99(tmp):
    draft(tmp, 'tiny-dsv3-eagle3'); edit_json(tmp/'d'/'config.json', set_ids([1, 5, 99]))

def _long_prompt(tmp):
    pair(tmp); (tmp/'long.txt').write_text(' '.join(['def return import class'] * 1500) + '\n')

def _missing_shard(tmp):
    target(tmp)
    (tmp/'t'/'model.safetensors.index.json').write_text(json.dumps(dict(weight_map={'lm_head.weight': 'model-00002-of-00002.safetensors'})))
    draft(tmp)

def _pickled_draft(tmp):
    target(tmp); d = draft(tmp); (d/'model.safetensors').unlink()
    torch.save({'fc.weight': Evil()}, d/'pytorch_model.bin')

def _dump_file(tmp): (tmp/'dump.txt').write_text('not a folder')

def _pass_corrupt(tmp):
    (tmp/'dep'/'TP0_PP0_Rank0_pid1').mkdir(parents=True); (tmp/'dep'/'TP0_PP0_Rank0_pid1'/'Pass00000.pt').write_bytes(b'garbage')

def _dumper_corrupt(tmp):
    (tmp/'dep').mkdir(); (tmp/'dep'/'step=0___rank=0___dump_index=0___name=draft.fc.in.pt').write_bytes(b'garbage')

def _file(name, text='x'):
    def fn(tmp): (tmp/name).write_text(text)
    return fn

T, D = ['--target', 't'], ['--draft', 'd']
FAST_RUN = ['--n-prompts', '1', '--max-new-tokens', '4']

CASES = {
    # configs
    'run-target-folder-empty':          Case(['run', '--target', 't'], ['t/config.json'], lambda t: (t/'t').mkdir(), forbid=['draft=None']),
    'run-target-config-not-json':       Case(['run', '--target', 't'], ['t/config.json', 'not valid JSON'],
                                             lambda t: (target(t)/'config.json').write_text('{"model_type": llama'), forbid=['draft=None']),
    'diagnose-target-config-a-list':    Case(['diagnose', *T, *D], ['t/config.json', 'JSON object'],
                                             lambda t: (pair(t), (t/'t'/'config.json').write_text('[1, 2]'))),
    'run-target-config-no-model-type':  Case(['run', *T, *D], ['t/config.json', 'model_type'],
                                             lambda t: (pair(t), edit_json(t/'t'/'config.json', lambda d: d.pop('model_type')))),
    'run-target-layers-not-int':        Case(['run', *T, *D], ['t/config.json', 'num_hidden_layers'],
                                             lambda t: (pair(t), edit_json(t/'t'/'config.json', lambda d: d.update(num_hidden_layers='ten')))),
    'run-draft-config-no-hidden-size':  Case(['run', *T, *D], ['d/config.json', 'hidden_size'],
                                             lambda t: (pair(t), edit_json(t/'d'/'config.json', lambda d: d.pop('hidden_size')))),
    'run-draft-two-layers':             Case(['run', *T, *D], ['d/config.json', 'num_hidden_layers'],
                                             lambda t: (pair(t), edit_json(t/'d'/'config.json', lambda d: d.update(num_hidden_layers=2)))),
    'run-draft-aux-id-beyond-target':   Case(['run', '--target', 'zoo:tiny-dsv3', *D], ['d/config.json', 'eagle_aux_hidden_state_layer_ids', 'id 99', '12-layer'], _ids99),
    'wiring-draft-config-missing':      Case(['wiring', 'nowhere.json', '--n-layers', '12'], ['nowhere.json']),
    'wiring-draft-config-not-json':     Case(['wiring', 'c.json', '--n-layers', '12'], ['c.json', 'not valid JSON'], _file('c.json', '{"eagle_config": ')),
    'wiring-aux-ids-not-ints':          Case(['wiring', 'c.json', '--n-layers', '12'], ['c.json', 'eagle_aux_hidden_state_layer_ids'],
                                             _file('c.json', json.dumps(dict(eagle_config=dict(eagle_aux_hidden_state_layer_ids=['a', 5, 8]))))),
    'wiring-eagle-config-not-a-dict':   Case(['wiring', 'c.json', '--n-layers', '12'], ['c.json', 'eagle_config'],
                                             _file('c.json', json.dumps(dict(eagle_config='1,5,8')))),
    'wiring-target-no-layer-count':     Case(['wiring', 'zoo:tiny-llama-eagle3', '--target', 't'], ['num_hidden_layers'],
                                             lambda t: edit_json(target(t)/'config.json', lambda d: d.pop('num_hidden_layers'))),
    'wiring-no-layer-count':            Case(['wiring', 'zoo:tiny-llama-eagle3'], ['--n-layers']),
    # weights
    'run-target-weights-truncated':     Case(['run', *T, *D], ['t/model.safetensors', 'truncated'], lambda t: (pair(t), truncate(t/'t'/'model.safetensors'))),
    'run-target-no-weights':            Case(['run', *T, *D], ['t: no weights'], lambda t: (pair(t), (t/'t'/'model.safetensors').unlink())),
    'run-target-missing-shard':         Case(['run', *T, *D], ['model.safetensors.index.json', 'model-00002-of-00002.safetensors'], _missing_shard),
    'run-target-weights-vs-config':     Case(['run', *T, *D], ['t: weights do not match config.json', 'mlp'],
                                             lambda t: (pair(t), edit_json(t/'t'/'config.json', lambda d: d.update(intermediate_size=512)))),
    'run-draft-weights-truncated':      Case(['run', *T, *D], ['d/model.safetensors', 'truncated'], lambda t: (pair(t), truncate(t/'d'/'model.safetensors', 0.9))),
    'run-draft-weights-vs-config':      Case(['run', *T, *D], ['midlayer.mlp', 'config.json'],
                                             lambda t: (pair(t), edit_json(t/'d'/'config.json', lambda d: d.update(intermediate_size=256)))),
    'diagnose-draft-pickled-weights':   Case(['diagnose', *T, *D], ['d/pytorch_model.bin', 'weights_only'], _pickled_draft),
    # tokenizers
    'run-target-without-tokenizer':     Case(['run', *T, *D], ['t: no tokenizer', 'tokenizer.json'], _no_tok, forbid=['TypeError']),
    'diagnose-target-without-tokenizer': Case(['diagnose', *T, *D, '--no-accept'], ['t: no tokenizer', 'tokenizer.json'], _no_tok, forbid=['TypeError']),
    'run-target-tokenizer-corrupt':     Case(['run', *T, *D], ['t/tokenizer.json'], _bad_tok),
    # prompts
    'run-prompts-missing':              Case(['run', '--prompts', 'nowhere.txt'], ['nowhere.txt']),
    'run-prompts-empty':                Case(['run', '--prompts', 'empty.txt'], ['empty.txt', 'no prompts'], _file('empty.txt', '\n\n')),
    'run-prompts-bad-jsonl':            Case(['run', '--prompts', 'p.jsonl'], ['p.jsonl:2', 'prompt'], _file('p.jsonl', '{"prompt": "def f():"}\n{"text": "x"}\n')),
    'run-prompts-not-text':             Case(['run', *T, *D, '--prompts', 'p.jsonl'], ['p.jsonl'], lambda t: (pair(t), _file('p.jsonl', '{"prompt": 5}\n')(t))),
    'run-prompts-a-folder':             Case(['run', '--prompts', 'pdir'], ['pdir'], lambda t: (t/'pdir').mkdir()),
    'run-prompts-not-utf8':             Case(['run', '--prompts', 'p.txt'], ['p.txt'], lambda t: (t/'p.txt').write_bytes(b'\xff\xfe\x00bad\n')),
    'run-prompt-longer-than-target':    Case(['run', *T, *D, '--prompts', 'long.txt'], ['prompt 1', '1024'], _long_prompt),
    # training dumps
    'diagnose-dump-missing':            Case(['diagnose', '--training-dump', 'nowhere'], ['--training-dump nowhere']),
    'diagnose-dump-not-a-folder':       Case(['diagnose', '--training-dump', 'dump.txt'], ['dump.txt'], _dump_file),
    # deployment folders
    'diagnose-deployment-missing':      Case(['diagnose', '--deployment', 'nowhere'], ['nowhere']),
    'diagnose-deployment-empty':        Case(['diagnose', '--deployment', 'dep'], ['dep', 'not a capture folder'], lambda t: (t/'dep').mkdir()),
    'diagnose-deployment-records-not-json': Case(['diagnose', '--deployment', 'dep'], ['dep/rank0_pid1/records.jsonl:1'], lambda t: hook_folder(t, '{"point": \n')),
    'diagnose-deployment-record-fields': Case(['diagnose', '--deployment', 'dep'], ['dep/rank0_pid1/records.jsonl:1'], lambda t: hook_folder(t, '{"point": "draft.fc.in"}\n')),
    'diagnose-deployment-pass-corrupt': Case(['diagnose', '--deployment', 'dep'], ['dep/TP0_PP0_Rank0_pid1/Pass00000.pt', 'corrupt'], _pass_corrupt),
    'diagnose-deployment-dumper-corrupt': Case(['diagnose', '--deployment', 'dep'], ['dump_index=0___name=draft.fc.in.pt', 'corrupt'], _dumper_corrupt),
    # numeric options
    'run-n-prompts-0':                  Case(['run', *T, *D, '--n-prompts', '0'], ['--n-prompts'], pair),
    'run-max-new-tokens-0':             Case(['run', *T, *D, '--max-new-tokens', '0'], ['--max-new-tokens'], pair),
    'run-steps-0':                      Case(['run', *T, *D, '--steps', '0'], ['--steps'], pair),
    'record-steps-negative':            Case(['record', '--out', 'rec', '--steps', '-1'], ['--steps']),
    'run-steps-huge':                   Case(['run', *T, *D, *FAST_RUN, '--steps', '100000'], ['--steps'], pair),
    'run-topk-0':                       Case(['run', *T, *D, '--topk', '0'], ['--topk'], pair),
    'run-num-draft-tokens-1':           Case(['run', *T, *D, '--num-draft-tokens', '1'], ['--num-draft-tokens'], pair),
    'run-top-p-0':                      Case(['run', *T, *D, '--top-p', '0', '--temperature', '1'], ['--top-p'], pair),
    'run-temperature-negative':         Case(['run', *T, *D, '--temperature', '-1'], ['--temperature'], pair),
    'run-steps-not-a-number':           Case(['run', '--steps', 'five'], ['--steps'], argparse=True),
    'run-wiring-index-beyond-target':   Case(['run', *T, *D, '--wiring', '0,2,99'], ['wiring', '99', 'expected 0 .. 10'], pair),
    'diagnose-wiring-wrong-count':      Case(['diagnose', *T, *D, '--wiring', '1,2'], ['wiring [1, 2]', '3 aux chunks'], pair),
    'diagnose-n-prompts-0':             Case(['diagnose', *T, *D, '--n-prompts', '0'], ['--n-prompts'], pair),
    'wiring-n-layers-0':                Case(['wiring', 'zoo:tiny-llama-eagle3', '--n-layers', '0'], ['--n-layers']),
    'report-timeout-0':                 Case(['report', '--out', 'r/report.html', '--timeout', '0'], ['--timeout']),
    # output paths that cannot be written
    'report-out-under-a-file':          Case(['report', '--out', 'f.txt/report.html'], ['f.txt'], _file('f.txt')),
    'zoo-build-out-is-a-file':          Case(['zoo', 'build', '--quick', '--out', 'f.txt'], ['f.txt'], _file('f.txt')),
    'zoo-build-out-under-a-file':       Case(['zoo', 'build', '--quick', '--out', 'f.txt/zoo'], ['f.txt'], _file('f.txt')),
    # report inputs
    'report-target-missing':            Case(['report', '--target', 'nowhere', '--out', 'r/report.html'], ['nowhere']),
    'report-training-dump-missing':     Case(['report', '--training-dump', 'nowhere', '--out', 'r/report.html'], ['nowhere']),
    'report-unknown-parameter':         Case(['report', '-p', 'nosuch', '1', '--out', 'r/report.html'], ['nosuch']),
    # commands and choices
    'zoo-unknown-action':               Case(['zoo', 'frobnicate'], ['frobnicate'], argparse=True),
    'run-unknown-engine':               Case(['run', '--engine', 'tensorrt'], ['--engine'], argparse=True),
    'run-engine-release-not-read':      Case(['run', '--engine', 'sglang==0.4.9'], ['--engine', '0.5.6'], argparse=True),
    'diagnose-engine-bad-version':      Case(['diagnose', '--engine', 'vllm==latest'], ['--engine', 'latest'], argparse=True),
    'wiring-trtllm-layers-other-engine': Case(['wiring', 'zoo:tiny-llama-eagle3', '--n-layers', '10', '--engine', 'sglang', '--trtllm-layers', '1,4,6'],
                                          ['--trtllm-layers', '--engine sglang']),
    'wiring-trtllm-layers-not-ints':    Case(['wiring', 'zoo:tiny-llama-eagle3', '--n-layers', '10', '--trtllm-layers', 'a,b'], ['--trtllm-layers'], argparse=True),
}

def _snapshot(root:Path)->dict:
    return {str(p.relative_to(root)): (p.is_dir(), None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)) for p in root.rglob('*')}

def _new_interpreter(args, cwd)->subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'eagle3_workbench.cli', *args], cwd=cwd, env=CLI_ENV, capture_output=True, text=True, timeout=300)

def _messages(err:str)->list:
    "stderr without progress: tqdm bars (model loading) and diagnose's 'diagnosing Pair(...) on N prompts ...'."
    return [l for l in err.replace('\r', '\n').splitlines() if l.strip() and '%|' not in l and not re.match(r'diagnosing .* \.\.\.$', l)]

@pytest.mark.parametrize('name', ['run-target-weights-vs-config', 'diagnose-draft-pickled-weights', 'wiring-aux-ids-not-ints', 'run-steps-not-a-number'])
def test_forked_is_a_new_interpreter(name, forked_cli, tmp_path):
    "A command forked from the preloaded interpreter says and returns exactly what `python -m eagle3_workbench.cli` says and returns."
    case = CASES[name]
    for d in ('new', 'forked'):
        (tmp_path/d).mkdir()
        if case.setup: case.setup(tmp_path/d)
    a, b = _new_interpreter(case.args, tmp_path/'new'), forked_cli.run(case.args, tmp_path/'forked')
    assert (a.returncode, _messages(a.stderr), a.stdout) == (b.returncode, _messages(b.stderr), b.stdout)
    assert a.returncode == 2 and _messages(a.stderr)

def test_forked_shows_a_traceback_as_an_interpreter_does(forked_cli, tmp_path):
    "An exception that escapes the module ends the child as it ends `python -m`: the traceback on stderr, exit 1 (a forker that hid it would hide the catalog's worst failure)."
    (tmp_path/'boom.py').write_text("import sys\nprint('args', sys.argv[1:])\n1 / int(sys.argv[1])\n")
    a = subprocess.run([sys.executable, '-m', 'boom', '0'], cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True, timeout=60)
    b = forked_cli.run(['0'], tmp_path, module='boom')
    for r in (a, b):
        assert r.returncode == 1 and r.stdout == "args ['0']\n", r
        assert r.stderr.startswith('Traceback') and r.stderr.splitlines()[-1] == 'ZeroDivisionError: division by zero', r.stderr

@pytest.mark.parametrize('case', [pytest.param(c, id=k, marks=[pytest.mark.slow] if c.slow else []) for k, c in CASES.items()])
def test_bad_input(case, tmp_path, forked_cli):
    if case.setup: case.setup(tmp_path)
    before = _snapshot(tmp_path)
    r = forked_cli.run(case.args, tmp_path)
    err = r.stderr
    assert 'Traceback' not in err, err
    assert r.returncode == 2, f"exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {err[-2000:]}"
    lines = _messages(err)   # progress is not a message
    if lines and lines[0].startswith('usage: eagle3-workbench'):   # argparse's usage block (it names the option itself)
        lines = [l for l in lines if not l.startswith(('usage:', ' '))]
    elif case.argparse: pytest.fail(f"expected argparse's usage and error, got:\n{err}")
    assert len(lines) == 1, f"expected one error line, got {len(lines)}:\n{err}"
    line, cmd = lines[0], case.args[0]
    assert line.startswith(f"eagle3-workbench {cmd}: error: "), line
    for s in case.expect: assert s in line, f"{s!r} not named in: {line}"
    for s in case.forbid: assert s not in line, f"{s!r} in: {line}"
    after = _snapshot(tmp_path)
    new = sorted(set(after) - set(before))
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    assert not new and not changed, f"written half-way: new {new}, changed {changed}"
