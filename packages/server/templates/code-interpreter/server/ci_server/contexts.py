"""Contexts: named, long-lived kernels, and the registry that holds them.

A context is {id, language, cwd} and one kernel. Its lock is held by whoever uses the kernel
(an execution, a start, a restart), so executions in one context run one after another. A kernel
that died (a cell called exit, an interrupt that did not take) is started afresh by the next
execution. The registry keeps contexts in creation order and knows each language's default
context: python and javascript exist from start-up, the others are made on first use.

A kernel starts with the sandbox-wide environment of that moment (sandbox_env.py); a context
remembers it, and an execution first sets what was added or changed since (kernels started
before the sandbox was made lack its create-time variables until then).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Optional

from .errors import ApiError, ErrorCode, KernelError
from .kernels import EnvChange, Kernel, KernelOptions
from .languages import Runtimes
from .sandbox_env import SandboxEnv

log = logging.getLogger(__name__)

DEFAULT_LANGUAGES = ("python", "javascript")


class Context:
    def __init__(self, id: str, language: str, cwd: str, runtimes: Runtimes, env: SandboxEnv) -> None:
        self.id = id
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.closed = False
        self._runtimes = runtimes
        self._env = env
        self._applied: dict[str, str] = {}  # the sandbox-wide variables the kernel has
        self.kernel: Optional[Kernel] = None

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def ensure_started(self) -> Kernel:
        """The running kernel, started (or started again) if need be. Call with the lock held."""
        if self.closed:
            raise KernelError(f"context {self.id} was deleted")
        if self.kernel is not None and self.kernel.alive():
            return self.kernel
        if self.kernel is not None:
            self.kernel.shutdown()
            self.kernel = None
        os.makedirs(self.cwd, exist_ok=True)
        base = self._env.current()
        kernel = self._runtimes.kernel(self.language, KernelOptions(cwd=self.cwd, env=dict(base)))
        self._applied = base
        self.kernel = kernel  # visible to kill() while it starts
        try:
            kernel.start()
            if self.closed:
                raise KernelError(f"context {self.id} was deleted")
        except BaseException:
            kernel.shutdown()
            self.kernel = None
            raise
        return kernel

    def env_change(self, requested: dict[str, str]) -> EnvChange:
        """One execution's environment change (call with the lock held, the kernel started): the
        sandbox-wide variables the kernel lacks, which stay, and the execution's own, reverted
        afterwards to their sandbox-wide value (or unset)."""
        base = self._env.current()
        missing = {k: v for k, v in base.items() if self._applied.get(k) != v}
        self._applied = base
        return EnvChange(apply={**missing, **requested}, revert={k: base.get(k) for k in requested})

    def restart(self) -> None:
        """A fresh kernel with the same id: a running cell is killed, its stream ends with an error."""
        if self.kernel is not None:
            self.kernel.kill()
        with self.lock:
            if self.kernel is not None:
                self.kernel.shutdown()
                self.kernel = None
            self.ensure_started()

    def close(self) -> None:
        self.closed = True
        if self.kernel is not None:
            self.kernel.kill()
        with self.lock:
            if self.kernel is not None:
                self.kernel.shutdown()
                self.kernel = None


class Registry:
    def __init__(self, runtimes: Runtimes, env: SandboxEnv, default_cwd: str) -> None:
        self.runtimes = runtimes
        self.env = env
        self.default_cwd = default_cwd
        self._lock = threading.Lock()
        self._contexts: dict[str, Context] = {}
        self._defaults: dict[str, str] = {}
        self._starting: list[threading.Event] = []  # one per default kernel's start, set once it ended

    def start_defaults(self) -> None:
        """Make the python and javascript contexts and start their kernels in the background."""
        for language in DEFAULT_LANGUAGES:
            if self.runtimes.missing(language) is None:
                ctx = self._default(language)
                done = threading.Event()
                self._starting.append(done)
                threading.Thread(target=self._warm, args=(ctx, done), name=f"start-{language}", daemon=True).start()

    def defaults_started(self) -> bool:
        """Whether every default kernel's start has ended (started, or failed and logged)."""
        return all(done.is_set() for done in self._starting)

    @staticmethod
    def _warm(ctx: Context, done: threading.Event) -> None:
        try:
            with ctx.lock:
                try:
                    ctx.ensure_started()
                except KernelError as e:
                    log.warning("the default %s context did not start: %s", ctx.language, e)
        finally:
            done.set()

    def _add(self, language: str, cwd: str) -> Context:
        ctx = Context(str(uuid.uuid4()), language, cwd, self.runtimes, self.env)
        self._contexts[ctx.id] = ctx
        return ctx

    def _default(self, language: str) -> Context:
        with self._lock:
            ctx = self._contexts.get(self._defaults.get(language, ""))
            if ctx is None:
                ctx = self._add(language, self.default_cwd)
                self._defaults[language] = ctx.id
            return ctx

    def create(self, language: Optional[str], cwd: Optional[str]) -> Context:
        """A new context whose kernel is running when this returns."""
        name = self.runtimes.check(language if language is not None else "python")
        cwd = cwd if cwd is not None else self.default_cwd
        try:
            os.makedirs(cwd, exist_ok=True)
        except OSError as e:
            raise ApiError(ErrorCode.BAD_REQUEST, f"cannot use cwd {cwd}: {e.strerror}",
                           "pass an absolute path to a directory that exists or can be created") from e
        ctx = Context(str(uuid.uuid4()), name, cwd, self.runtimes, self.env)
        with ctx.lock:
            try:
                ctx.ensure_started()
            except KernelError as e:
                raise ApiError(ErrorCode.KERNEL_START_FAILED, f"the {name} kernel did not start: {e}") from e
        with self._lock:
            self._contexts[ctx.id] = ctx
        return ctx

    def list(self) -> list[Context]:
        with self._lock:
            return list(self._contexts.values())

    def get(self, id: str) -> Context:
        with self._lock:
            ctx = self._contexts.get(id)
        if ctx is None:
            raise ApiError(ErrorCode.CONTEXT_NOT_FOUND, f"Context {id} not found")
        return ctx

    def target(self, context_id: Optional[str], language: Optional[str]) -> Context:
        """Where an execution runs: the named context, else the language's default (python's if none)."""
        if context_id is not None:
            return self.get(context_id)
        return self._default(self.runtimes.check(language if language is not None else "python"))

    def delete(self, id: str) -> None:
        with self._lock:
            ctx = self._contexts.pop(id, None)
            for language, default in list(self._defaults.items()):
                if default == id:
                    del self._defaults[language]
        if ctx is None:
            raise ApiError(ErrorCode.CONTEXT_NOT_FOUND, f"Context {id} not found")
        ctx.close()

    def restart(self, id: str) -> None:
        ctx = self.get(id)
        try:
            ctx.restart()
        except KernelError as e:
            raise ApiError(ErrorCode.KERNEL_START_FAILED, f"the {ctx.language} kernel did not start: {e}") from e

    def shutdown(self) -> None:
        """Stop every kernel (the server is exiting; running executions are not waited for)."""
        contexts = self.list()
        for ctx in contexts:
            ctx.closed = True
            if ctx.kernel is not None:
                ctx.kernel.kill()
        threads = [threading.Thread(target=ctx.kernel.shutdown, daemon=True) for ctx in contexts if ctx.kernel]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=5)
