"""Engine overhead: one draft + verify cycle (`Session.step`) against the time spent inside the models' forwards."""
from __future__ import annotations
import gc, time
from common import zoo, pair, ratios, med, spread, row, g

TITLE = 'cycle overhead'
QUESTION = 'How much of one draft + verify cycle is the workbench itself, beyond the target and draft forwards it runs?'

SETTINGS = {'chain (steps 5, topk 1)': dict(speculative_num_steps=5, speculative_eagle_topk=1),
            'tree (steps 5, topk 4, 8 draft tokens)': dict(speculative_num_steps=5, speculative_eagle_topk=4, speculative_num_draft_tokens=8)}

class ForwardClock:
    "Wall time spent inside the root forward of each model, from forward pre/post hooks."
    def __init__(self, **models):
        self.total = {k: 0.0 for k in models}; self.calls = {k: 0 for k in models}; self._t0 = {}; self._h = []
        self.log = []  # (model, seconds) per call, in order
        for k, m in models.items():
            self._h.append(m.register_forward_pre_hook(self._pre(k)))
            self._h.append(m.register_forward_hook(self._post(k)))
    def _pre(self, k):
        def f(m, args): self._t0[k] = time.perf_counter()
        return f
    def _post(self, k):
        def f(m, args, out):
            dt = time.perf_counter() - self._t0.pop(k)
            self.total[k] += dt; self.calls[k] += 1; self.log.append((k, dt))
        return f
    def snapshot(self): return dict(self.total), dict(self.calls)
    def remove(self):
        for h in self._h: h.remove()

# from a cProfile of the tree setting on the zoo pair (15 cycles): most of the time outside the forwards is spent in
# Session.draft's per-node expand(); appended to the note when the target is missed
NOTE = {'tree (steps 5, topk 4, 8 draft tokens)':
        "; a cProfile puts most of it in Session.draft's per-node expand() (softmax and top-k, to_target_ids over the "
        "whole draft vocabulary, a full target-vocabulary distribution and top-3 alternatives per node)"}

def run(quick:bool=False)->dict:
    p = pair('tiny-dsv3')
    reps = 6 if quick else 40
    prompts = zoo().prompts()
    sessions = {}
    from eagle3_workbench.engine import Session
    for label, kw in SETTINGS.items(): sessions[label] = [Session(p, **kw), 0]
    def fresh(label):
        s, i = sessions[label]
        s.extend(prompts[i % len(prompts)]); sessions[label][1] = i + 1
    for label in sessions: fresh(label)
    clock = ForwardClock(target=p.target, draft=p.draft)
    res = {label: dict(step=[], fwd=[], tgt=[], drf=[], calls=[], accepted=[], phases={}) for label in sessions}
    try:
        for r in range(reps + 2):  # 2 warm-up cycles per setting
            order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
            for label in order:
                s = sessions[label][0]
                if len(s.tokens) + 2 * s.settings.speculative_num_steps + 4 > s.max_positions: fresh(label)
                gc.collect(); en = gc.isenabled(); gc.disable()
                try:
                    (a, ca) = clock.snapshot(); n0 = len(clock.log); t0 = time.perf_counter()
                    st = s.step()
                    t1 = time.perf_counter(); (b, cb) = clock.snapshot()
                finally:
                    if en: gc.enable()
                if r < 2: continue
                d = res[label]
                d['step'].append(t1 - t0)
                d['tgt'].append(b['target'] - a['target']); d['drf'].append(b['draft'] - a['draft'])
                d['fwd'].append(d['tgt'][-1] + d['drf'][-1])
                d['calls'].append((cb['target'] - ca['target'], cb['draft'] - ca['draft']))
                d['accepted'].append(st.verify.accepted)
                # forwards per phase: draft = every draft call but the last; verify = the target call;
                # draft_extend_after_verify = the last draft call
                calls = clock.log[n0:]
                drafts = [t for k, t in calls if k == 'draft']
                inside = {'draft': sum(drafts[:-1]), 'verify': sum(t for k, t in calls if k == 'target'),
                          'draft_extend_after_verify': drafts[-1]}
                for ph, sec in {**st.draft.seconds, **st.verify.seconds}.items():
                    d['phases'].setdefault(ph, []).append(sec - inside.get(ph, 0.0))
    finally:
        clock.remove()
    rows = []
    for label, d in res.items():
        rr = ratios(d['step'], d['fwd'])
        x = med(rr)
        over = [a - b for a, b in zip(d['step'], d['fwd'])]
        calls = d['calls'][0]
        ph = {k: med(v, 1e3) for k, v in d['phases'].items()}
        why = (f"time outside the forwards: {g(med(over, 1e3))} ms per cycle, by phase (ms): "
               + ', '.join(f"{k} {g(v)}" for k, v in ph.items()))
        if x > 1.2: why = f"the models are tiny ({g(med(d['fwd'], 1e3))} ms of forwards per cycle), so the engine's fixed Python work weighs; " + why
        rows += [
            row(f"{label}: Session.step", med(d['step'], 1e3), 'ms', spread(d['step'], 1e3, ' ms'),
                note=f"{calls[0]} target + {calls[1]} draft forwards per cycle; median accepted {med(d['accepted']):g}"),
            row(f"{label}: sum of model forwards", med(d['fwd'], 1e3), 'ms', spread(d['fwd'], 1e3, ' ms'),
                note=f"target {g(med(d['tgt'], 1e3))} ms, draft {g(med(d['drf'], 1e3))} ms"),
            row(f"{label}: step / forwards", x, 'x', spread(rr), '<= 1.2x', x <= 1.2, why + (NOTE.get(label, '') if x > 1.2 else '')),
        ]
    return dict(title=TITLE, question=QUESTION, rows=rows,
                setup=f"pair {p.target_path} + {p.draft_path}, greedy; {reps} cycles per setting, the two settings alternating "
                      f"cycle by cycle (after 2 warm-up cycles each); forward time from pre/post hooks on the target's and the "
                      f"draft's root modules; a session is re-extended with the next zoo prompt before it runs out of positions.")
