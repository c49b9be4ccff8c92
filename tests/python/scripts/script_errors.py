"""How the test scripts end on a Loom error: one line `loom-error {"kind": ..., "fields": ...}` on
stderr before the traceback, so that a test reads the error's fields (conftest.loom_errors)
rather than the words of its message."""
import json
import sys

import loom


def run_reporting_errors(main):
    """Calls main(); a loom.Error it raises is reported as above, then raised on."""
    try:
        main()
    except loom.Error as error:
        print("loom-error " + json.dumps({"kind": type(error).__name__, "fields": error.fields}),
              file=sys.stderr, flush=True)
        raise
