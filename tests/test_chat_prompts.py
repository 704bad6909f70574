"""Prompts as users send them: chat files (OpenAI `messages`, ShareGPT `conversations`) rendered by the target tokenizer's
chat template, as a chat server renders a request, through the command line (`run`, `record`) as a user runs it.
The expectation is transformers' own `apply_chat_template` on the same messages, and the raw-prompt run of its text."""
import json
import pytest
from eagle3_workbench.testing import chat_target, CHAT_TEMPLATE
from eagle3_workbench.prompts import read_prompts, render_chats

CONTENT = ['def add(a, b):\n    return', 'for i in range(10):\n    print(']

@pytest.fixture
def cli(forked_cli, tmp_path):
    return lambda *args, timeout=600: forked_cli.run(list(args), tmp_path, timeout)

def _files(d):
    "The same two prompts as OpenAI messages (with a system turn), as ShareGPT conversations (with the recorded reply), and raw."
    oa = [{'messages': [{'role': 'system', 'content': 'Complete the code.'}, {'role': 'user', 'content': c}]} for c in CONTENT]
    sg = [{'conversations': [{'from': 'system', 'value': 'Complete the code.'}, {'from': 'human', 'value': c}, {'from': 'gpt', 'value': 'x'}]}
          for c in CONTENT]
    for name, rows in (('openai.jsonl', oa), ('sharegpt.jsonl', sg), ('raw.jsonl', [{'prompt': c} for c in CONTENT])):
        (d/name).write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return d/'openai.jsonl', d/'sharegpt.jsonl', d/'raw.jsonl'

def test_both_shapes_render_as_transformers_applies_the_template(tmp_path):
    from transformers import AutoTokenizer
    t = chat_target(tmp_path/'t')
    tok = AutoTokenizer.from_pretrained(t)
    assert tok.chat_template == CHAT_TEMPLATE
    oa, sg, _ = _files(tmp_path)
    want = [tok.apply_chat_template([{'role': 'system', 'content': 'Complete the code.'}, {'role': 'user', 'content': c}],
                                    add_generation_prompt=True, tokenize=False) for c in CONTENT]
    assert render_chats(read_prompts(oa), tok) == want and render_chats(read_prompts(sg), tok) == want   # ShareGPT's reply dropped
    assert all(w.endswith('assistant\n') and c in w for w, c in zip(want, CONTENT))

def test_run_on_chats_equals_run_on_their_rendered_text(cli, tmp_path):
    "`run --prompts chats.jsonl` runs what the template renders: the same answer as raw prompts holding that text, another than the bare content."
    from transformers import AutoTokenizer
    t = chat_target(tmp_path/'t')
    tok = AutoTokenizer.from_pretrained(t)
    oa, sg, raw = _files(tmp_path)
    rendered = tmp_path/'rendered.jsonl'
    rendered.write_text(''.join(json.dumps({'prompt': p}) + '\n' for p in render_chats(read_prompts(oa), tok)))
    args = ['--target', t, '--draft', 'zoo:tiny-llama-eagle3', '--max-new-tokens', 8, '--json']
    out = {}
    for f in (oa, sg, rendered, raw):
        r = cli('run', *args, '--prompts', f)
        assert r.returncode == 0, r.stderr
        out[f.name] = {k: v for k, v in json.loads(r.stdout).items() if 'second' not in k}   # times aside
    assert out['openai.jsonl'] == out['rendered.jsonl'] == out['sharegpt.jsonl']
    assert out['raw.jsonl'] != out['openai.jsonl']   # the template is applied, not the bare content run

def _said(err:str)->list:
    "stderr's lines but the loading progress bars."
    return [l for l in err.replace('\r', '\n').splitlines() if l.strip() and '%|' not in l]

def test_chats_without_a_template_are_refused_naming_the_file(cli, tmp_path):
    "The zoo's tokenizer has no chat template: one line naming the prompt file and the target, exit 2, before any decoding or file written."
    oa, _, raw = _files(tmp_path)
    for cmd in (['run'], ['diagnose'], ['record', '--out', tmp_path/'rec']):
        r = cli(*cmd, '--target', 'zoo:tiny-llama', '--prompts', oa, '--json')
        said = _said(r.stderr)
        assert r.returncode == 2 and r.stdout == '' and len(said) == 1, (cmd, r.stderr)
        assert f"{oa}: chat prompts" in said[0] and 'zoo:tiny-llama has a tokenizer without a chat template' in said[0], said
    assert not (tmp_path/'rec').exists()
    bad = tmp_path/'bad.jsonl'
    bad.write_text(json.dumps({'conversations': [{'from': 'narrator', 'value': 'x'}]}) + '\n')
    r = cli('run', '--target', 'zoo:tiny-llama', '--prompts', bad)
    assert r.returncode == 2 and f"{bad}:1: conversations[0].from 'narrator'" in r.stderr

def test_record_keeps_the_rendered_prompt(cli, tmp_path):
    "A recording of chat prompts holds the template's tokens: the sequence starts with the rendered text's ids."
    from transformers import AutoTokenizer
    from eagle3_workbench.recording import open_recording
    t = chat_target(tmp_path/'t')
    tok = AutoTokenizer.from_pretrained(t)
    oa, _, _ = _files(tmp_path)
    r = cli('record', '--target', t, '--out', tmp_path/'rec', '--prompts', oa, '--max-new-tokens', 4, '--json')
    assert r.returncode == 0, r.stderr
    rec = open_recording(tmp_path/'rec')
    for i, text in enumerate(render_chats(read_prompts(oa), tok)):
        ids = tok(text, add_special_tokens=False)['input_ids']
        assert rec.sequences[i]['prompt_tokens'] == len(ids) and rec.tokens(i)[:len(ids)].tolist() == ids
