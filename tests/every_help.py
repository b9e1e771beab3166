"""Each script's `--help`, all in one interpreter (imports shared, so about 4 s for all):

    python tests/every_help.py SCRIPT ...

prints one JSON line per script: its exit code (or the exception it raised) and what it printed.
"""

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

for script in sys.argv[1:]:
    printed = io.StringIO()
    sys.argv, sys.path[0] = [script, "--help"], str(Path(script).resolve().parent)
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            runpy.run_path(script, run_name="__main__")
        code = None
    except SystemExit as e:
        code = e.code
    except Exception as e:  # reported, not raised: the other scripts still run
        code = f"{type(e).__name__}: {e}"
    sys.__stdout__.write(json.dumps({"script": script, "code": code,
                                     "printed": printed.getvalue()}) + "\n")
