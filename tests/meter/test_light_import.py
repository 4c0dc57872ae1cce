"""The supervisor and the guard import the meter: it must not pull in torch or matplotlib."""
import json
import subprocess
import sys


def test_meter_trace_summary_import_light(repo_root):
    code = ("import sys, json, stageload.meter, stageload.trace, stageload.summary; "
            "print(json.dumps([m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=repo_root, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
