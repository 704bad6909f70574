# JupyterLab started from here with `jupyter lab --config=jupyter_server_config.py` saves the chapters in nbs/ as the
# tests expect: cells whose source is unchanged keep their stored outputs, so running a chapter leaves `git status`
# clean (scripts/clean_on_save.py says how; scripts/store_outputs.py refreshes the stored outputs).
import sys
from pathlib import Path
_root = Path(__file__).resolve().parent
sys.path.insert(0, str(_root/'scripts'))
from clean_on_save import hook_for
c.ContentsManager.pre_save_hook = hook_for(_root/'nbs')
