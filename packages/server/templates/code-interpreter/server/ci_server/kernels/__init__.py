"""Kernels: one long-lived interpreter process per context.

A kernel runs cells one at a time, in order; its state (variables, the working directory, anything
the code changed) carries from one cell to the next until it is restarted. The context that owns it
serialises calls: `start`, `execute` and `shutdown` never overlap. `interrupt` and `kill` may be
called from another thread while `execute` runs.

  start()       launch the process in `cwd` with `env`; return once it accepts cells
  execute()     run one cell, calling `emit` with each stream line (results.py) as it comes;
                return once the cell is over. A cell whose process dies ends with an `error`.
  interrupt()   ask the running cell to stop (SIGINT); the kernel stays usable. May be called
                again while the cell runs; a call before the cell began may do nothing
  kill()        stop the process now; a running `execute` returns soon after
  alive()       whether the process is running
  shutdown()    kill the process and release what it held (files, sockets)

Per-execution environment variables (`EnvChange`) are set before the cell and reverted after it,
to the values of `revert` (None: unset).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..results import Event

Emit = Callable[[Event], None]


@dataclass(frozen=True)
class EnvChange:
    apply: dict[str, str] = field(default_factory=dict)
    revert: dict[str, Optional[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.apply)


@dataclass(frozen=True)
class KernelOptions:
    cwd: str
    env: dict[str, str]


class Kernel(ABC):
    def __init__(self, options: KernelOptions) -> None:
        self.options = options

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def execute(self, code: str, env: EnvChange, emit: Emit) -> None: ...

    @abstractmethod
    def interrupt(self) -> None: ...

    @abstractmethod
    def kill(self) -> None: ...

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def shutdown(self) -> None: ...
