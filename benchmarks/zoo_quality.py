"""Zoo quality: chain accept length per wiring on the held-out prompts, written into the zoo card (ZOO.md).

    python benchmarks/zoo_quality.py [--prompts 24] [--tokens 32]

Greedy chain drafting, speculative_num_steps 5, top-k 1, on the zoo's default-layer pairs (the GPT-OSS-shaped one too), for the trained wiring and the wrong
wirings of the calibration list; every run is also checked lossless against target-only greedy decoding.
"""
import argparse, re, time
from eagle3_workbench.loading import load_pair
from eagle3_workbench.target import zoo_root
from eagle3_workbench.engine import run_prompts
from eagle3_workbench.prompts import read_prompts
from eagle3_workbench.zoo import wrong_wirings, PAIRS, GPTOSS

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--prompts', type=int, default=24); ap.add_argument('--tokens', type=int, default=32)
    a = ap.parse_args()
    prompts = read_prompts(n=a.prompts)
    L = ['## Accept length on held-out prompts', '',
         f"Greedy chain drafting (speculative_num_steps 5, top-k 1), {len(prompts)} held-out prompts x {a.tokens} new tokens; "
         'accept length counts the bonus token (SGLang\'s definition), 95% bootstrap interval over prompts; '
         'per-position acceptance as vLLM reports it. Measured by `benchmarks/zoo_quality.py`.', '']
    for name in [*PAIRS, *GPTOSS]:
        pair = load_pair(f'zoo:{name}')
        L += [f"### {name}", '', '| wiring | resid fed | accept length (95% CI) | per-position acceptance | lossless |', '|---|---|---|---|---|']
        for label, w in wrong_wirings(pair.wiring.resid_layers).items():
            t0 = time.time()
            r = run_prompts(pair, prompts, a.tokens, wiring=w, progress=False)
            s = r.summary
            L.append(f"| {label} | {list(w)} | {s['accept_length']:.2f} ({s['accept_length_ci'][0]:.2f} .. {s['accept_length_ci'][1]:.2f}) | "
                     f"{' / '.join(f'{x:.2f}' for x in s['per_position_acceptance'])} | {r.lossless} |")
            print(name, label, f"{s['accept_length']:.3f}", f"{time.time() - t0:.0f}s", flush=True)
        L.append('')
    card = zoo_root()/'ZOO.md'
    text = re.split(r'\n## Accept length on held-out prompts\n', card.read_text())[0].rstrip('\n')
    card.write_text(text + '\n\n' + '\n'.join(L))
    print('\n'.join(L))

if __name__ == '__main__': main()
