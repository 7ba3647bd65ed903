"""`python -m bench.profile_server OUT.pstats ARGS...`: run `coloco ARGS...` under a profiler.

CPU time of every thread (the event loop, the writer, the worker) with yappi when it is
installed (`pip install yappi`; not a dependency of the project), else the main thread with
cProfile. The stats are written in pstats format when the process exits (SIGTERM included):
read them with ``python -m pstats OUT.pstats`` (``sort tottime``, ``stats 30``).
"""

from __future__ import annotations

import atexit
import runpy
import signal
import sys
from typing import Any


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    stop: Any
    try:
        import yappi

        yappi.set_clock_type("cpu")
        yappi.start()

        def stop() -> None:
            yappi.stop()
            yappi.get_func_stats().save(out, type="pstat")

    except ImportError:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()

        def stop() -> None:
            profile.disable()
            profile.dump_stats(out)

    atexit.register(stop)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.argv = ["coloco", *args]
    runpy.run_module("coloco_cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
