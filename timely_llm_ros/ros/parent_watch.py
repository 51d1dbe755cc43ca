"""A node stops when the process that launched it dies, whatever signal killed that process.

Why: ``ros2 launch`` stops its nodes on SIGINT only. On SIGTERM (what ``kill``, ``timeout``,
supervisord and most IDE stop buttons send) or SIGQUIT it cancels its loop and exits, logging
"using SIGTERM can result in orphaned processes" (launch's ``LaunchService``), and on SIGKILL it
cannot do anything. The nodes stay up: a planner keeps sending skills to robots after the operator
stopped the fleet. ``timely-llm fleet`` stops its nodes on SIGINT and SIGTERM, but not when it is
killed.

How: a launcher (fleet.launch.py, ``timely-llm fleet``) puts its own process id in
``TIMELY_STOP_WITH_PARENT`` for each node it starts. :func:`watch_parent`, called by every node's
``main()`` once its signal handlers are in place, asks the Linux kernel to send the node SIGTERM
when its parent dies (``prctl(PR_SET_PDEATHSIG)``); the node then shuts down as on any SIGTERM
(closes its bag, tells its robot to stop). If the launcher died before that call, the node stops at
once. A node started by hand has no such variable and is left alone: a node started in the
background by a script that then exits must keep running. Other systems than Linux: no effect.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

ENV = "TIMELY_STOP_WITH_PARENT"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def parent_env() -> dict[str, str]:
    """The variable a launcher adds to each node's environment: the launcher's own process id."""
    return {ENV: str(os.getpid())}


def watch_parent(environ: Mapping[str, str] | None = None) -> int | None:
    """Follow the launcher named in ``TIMELY_STOP_WITH_PARENT``; return its pid if it is already gone.

    None: nothing to follow (no variable, not Linux) or armed. A launcher that is alive but is not
    this process's parent (launch's ``prefix``, e.g. ``gdb --args``, sits in between) leaves the
    watch on that direct parent. Raises ValueError for a value that is not a process id and OSError
    when the kernel refuses.
    """
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not value:
        return None
    launcher = int(value) if value.isdigit() else 0
    if launcher <= 0:
        raise ValueError(f"{ENV}={value!r} is not a process id")
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() == launcher:
        return None
    try:
        os.kill(launcher, 0)
    except ProcessLookupError:
        return launcher
    except PermissionError:  # alive, another user's
        return None
    return None
