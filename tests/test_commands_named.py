"""Every `eagle3-workbench COMMAND --flag` the project prints or tells a reader to type exists: in the package's source
(its messages and docstrings), the chapters' sources and stored outputs, the README and docs/. The commands and their
options are read from the command line's own argparse parser, not from a list kept here."""
import argparse, json, re
from pathlib import Path
import pytest

ROOT = Path(__file__).parent.parent

# The program's name followed by a word; the mention runs on to the end of its code span, line, quote or parenthesis.
MENTION = re.compile(r"eagle3-workbench ([a-z][a-z-]*)([^`\n\"')]*)")
FLAG = re.compile(r'(?<![\w-])--[a-z][a-z0-9-]*')
# The project's name in prose, not a command: "eagle3-workbench loads the target", "the chapters of eagle3-workbench
# cite", "an eagle3-workbench recording manifest".
PROSE = re.compile(r"eagle3-workbench (?:loads|cite|recording manifest)\b")

def texts()->dict:
    "where -> text, for every place a reader meets the program's name: .py files, chapters' cells and outputs, README, docs."
    out = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT/'eagle3_workbench').rglob('*.py'))}
    for p in [ROOT/'README.md', *sorted((ROOT/'docs').rglob('*.md'))]: out[str(p.relative_to(ROOT))] = p.read_text()
    for p in sorted((ROOT/'nbs').glob('*.ipynb')):
        for c in json.loads(p.read_text())['cells']:
            out[f"{p.relative_to(ROOT)} cell {c.get('id')}"] = ''.join(c['source'])
            for i, o in enumerate(c.get('outputs', [])):
                said = [o.get('text', '')] + [o.get('data', {}).get(k, '') for k in ('text/plain', 'text/markdown', 'text/html')]
                out[f"{p.relative_to(ROOT)} cell {c.get('id')} output {i}"] = ''.join(''.join(s) if isinstance(s, list) else s for s in said)
    return out

def mentions(text:str)->list:
    "(command, [flags], zoo action words or None) for each `eagle3-workbench COMMAND ...` in `text` that is no prose."
    out = []
    for m in MENTION.finditer(text):
        if PROSE.match(text, m.start()): continue
        rest = m[2]
        action = rest.split()[0].replace('\\', '').split('|') if m[1] == 'zoo' and rest.split() and re.match(r'[a-z]', rest.split()[0]) else None
        out.append((m[1], FLAG.findall(rest), action))
    return out

def commands()->dict:
    "subcommand -> its parser, from `cli.parser()` itself."
    from eagle3_workbench.cli import parser
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)

def problems(found:dict, cmds:dict)->list:
    "What a reader would type and the program refuses: a command it has not, a flag that command has not, a zoo action it has not."
    out = []
    for where, ms in found.items():
        for cmd, flags, action in ms:
            if cmd not in cmds: out.append(f"{where}: `eagle3-workbench {cmd}`: no such command (the commands: {', '.join(cmds)})"); continue
            opts = cmds[cmd]._option_string_actions
            out += [f"{where}: `eagle3-workbench {cmd} {f}`: {cmd} has no option {f}" for f in flags if f not in opts]
            if action:
                choices = next(a.choices for a in cmds[cmd]._actions if a.dest == 'action')
                out += [f"{where}: `eagle3-workbench zoo {w}`: no such zoo action" for w in action if w not in choices]
    return out

def test_every_command_named_exists():
    found = {w: ms for w, t in texts().items() if (ms := mentions(t))}
    assert sum(map(len, found.values())) >= 40, found   # the README's command table alone names every command
    assert not (bad := problems(found, commands())), '\n'.join(bad)

def test_a_wrong_command_is_found():
    "The checker on made-up texts: a command the parser has not, a flag of another command, a zoo action it has not; prose and real commands pass."
    cmds = commands()
    said = {'a': "ask the doctor (`eagle3-workbench doctor`)", 'b': "eagle3-workbench run --recording DIR --n-layers 4",
            'c': "`eagle3-workbench zoo list\\|path\\|frobnicate`", 'd': "eagle3-workbench loads the target; `eagle3-workbench diagnose --json`",
            'e': "(eagle3-workbench compare --observed FILE --before FILE)"}
    bad = problems({w: mentions(t) for w, t in said.items()}, cmds)
    assert [b.split(':')[0] for b in bad] == ['a', 'b', 'c'], bad
    assert '--n-layers' in bad[1] and '--recording' not in bad[1] and 'frobnicate' in bad[2]
