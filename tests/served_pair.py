"The zoo pair as the engines served it in tests/fixtures/sglang-spec and vllm-spec: its draft with a case's config edit, the prompt ids, the settings."
import json, shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT/'eagle3_workbench'/'zoo_data'
SETTINGS = dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)   # a chain of 3, as both engines served it

def draft_copy(tmp:Path, edit)->Path:
    "The zoo draft with a case's config edit, as the scripts served it: None (as shipped), ('top', ids) or ('nested', ids)."
    d = tmp/'draft'
    shutil.copytree(ZOO/'tiny-llama-eagle3', d)
    if edit is not None:
        cfg = json.loads((d/'config.json').read_text())
        where, ids = edit
        if where == 'top': cfg['eagle_aux_hidden_state_layer_ids'] = ids
        else: cfg['eagle_config'] = {'eagle_aux_hidden_state_layer_ids': ids, 'use_aux_hidden_state': True}
        (d/'config.json').write_text(json.dumps(cfg))
    return d

def zoo_prompt_ids(n:int=8)->list:
    "The zoo's first `n` held-out prompts, tokenised as `eagle3-workbench run` does (the target's tokenizer, no special tokens)."
    from eagle3_workbench.loading import load_tokenizer
    from eagle3_workbench.prompts import read_prompts
    tok = load_tokenizer(ZOO/'tiny-llama')
    return [tok(p, add_special_tokens=False)['input_ids'] for p in read_prompts(None, n)]
