"""What both SGLang check scripts need of a server: JSON over HTTP, and a server that is started, awaited and stopped."""
import json, os, signal, subprocess, time, urllib.request
from contextlib import contextmanager
from pathlib import Path

def http_json(url:str, payload=None, timeout:float=60):
    "GET `url` (POST `payload` as JSON when given) and return the decoded JSON answer."
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=timeout) as f: return json.loads(f.read() or b'null')

@contextmanager
def running_server(argv:list, # the server's command line
                   log:Path, # where its stdout and stderr go
                   ready_url:str, # answers once the server is up
                   timeout:float, # seconds to wait for ready_url
                   env:dict|None=None):
    "Start the server in a process group of its own, wait until `ready_url` answers, and stop the whole group on exit."
    with open(log, 'w') as lf:
        proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        t0 = time.time()
        while True:
            if proc.poll() is not None: raise RuntimeError(f"the server exited with status {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.time() - t0 > timeout: raise RuntimeError(f"the server was not ready after {timeout} s:\n{log.read_text()[-4000:]}")
            try: http_json(ready_url, timeout=5); break
            except Exception: time.sleep(3)
        print(f"server ready after {time.time() - t0:.0f} s", flush=True)
        yield proc
    finally:
        try: os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError: pass
        try: proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL); proc.wait(timeout=30)
