"""Process-group helpers shared by the kernels: every kernel runs in a session of its own, so a
signal reaches the interpreter and whatever it started."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Optional


def signal_group(proc: Optional[subprocess.Popen], sig: int) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.send_signal(sig)


def stop_group(proc: Optional[subprocess.Popen], grace: float = 1.0) -> None:
    """SIGTERM the group, then SIGKILL whatever is left after `grace` seconds; reap the leader."""
    if proc is None:
        return
    if proc.poll() is None:
        signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while children it started still hold the group.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
