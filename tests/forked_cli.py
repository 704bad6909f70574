"""`python -m eagle3_workbench.cli ARGS` many times over, without paying the same imports each time.

Most of a failing command's few seconds go to importing torch and transformers, the same in every run. Here one
interpreter imports them once and forks a child per command; the child runs the module as `python -m` does (`runpy`,
as `__main__`, with `sys.argv`), in its own working directory, with its own stdout and stderr files, and its exit
status is the command's. `test_bad_inputs.test_forked_is_a_new_interpreter` checks that a command run this way prints
and returns exactly what it does in a new interpreter, which also catches anything an import prints."""
import json, os, select, signal, subprocess, sys, tempfile
from pathlib import Path

PRELOAD = ('torch', 'transformers', 'eagle3_workbench.cli', 'eagle3_workbench.loading', 'eagle3_workbench.engine',
           'eagle3_workbench.doctor', 'transformers.models.llama.modeling_llama', 'transformers.models.deepseek_v3.modeling_deepseek_v3')

SERVER = r'''
import importlib, json, os, runpy, sys, traceback
for m in sys.argv[1:]: importlib.import_module(m)
sys.argv = sys.argv[:1]
print('ready', flush=True)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:   # the command: nothing of it stays in the server
        code = 1
        try:
            os.chdir(req['cwd'])
            for fd, path in ((0, os.devnull), (1, req['out']), (2, req['err'])):
                f = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.dup2(f, fd); os.close(f)
            sys.argv, sys.path[0:0] = ['-m', *req['args']], [os.getcwd()]   # as `python -m` sets them
            sys.modules.pop(req['module'], None)   # `python -m` runs it as __main__ without importing it first
            try: runpy.run_module(req['module'], run_name='__main__', alter_sys=True); code = 0
            except SystemExit as e:   # as the interpreter ends on SystemExit
                if e.code is None: code = 0
                elif isinstance(e.code, int): code = e.code
                else: print(e.code, file=sys.stderr); code = 1
            except BaseException: traceback.print_exc(); code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush(); os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
'''

class ForkedCLI:
    "A preloaded interpreter that runs `eagle3_workbench.cli` commands in forked children: `run(args, cwd)` -> CompletedProcess."
    def __init__(self, env:dict):
        self.tmp = Path(tempfile.mkdtemp(prefix='e3w-forked-'))
        self.log = open(self.tmp/'server.err', 'w')
        self.p = subprocess.Popen([sys.executable, '-c', SERVER, *PRELOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, env=env, start_new_session=True)
        assert self._reply(300) == 'ready', (self.tmp/'server.err').read_text()[-3000:]

    def _reply(self, timeout:float)->str:
        if not select.select([self.p.stdout], [], [], timeout)[0]:
            self.close(); raise subprocess.TimeoutExpired('forked eagle3-workbench', timeout)
        return self.p.stdout.readline().strip()

    def run(self, args:list, cwd, timeout:float=300, module:str='eagle3_workbench.cli')->subprocess.CompletedProcess:
        "`python -m MODULE ARGS` in `cwd`, forked."
        out, err = self.tmp/'out', self.tmp/'err'
        self.p.stdin.write(json.dumps(dict(module=module, args=[str(a) for a in args], cwd=str(cwd), out=str(out), err=str(err))) + '\n')
        self.p.stdin.flush()
        code = json.loads(self._reply(timeout))
        return subprocess.CompletedProcess(args, code, out.read_text(), err.read_text())

    def close(self):
        if self.p.poll() is None: os.killpg(self.p.pid, signal.SIGKILL); self.p.wait()
        self.log.close()
        import shutil; shutil.rmtree(self.tmp, ignore_errors=True)
