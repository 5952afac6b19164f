"""Languages: their names, what each needs on this machine, and the kernel that runs it.

  python      ipykernel on this interpreter (python3-ipykernel)
  javascript  kernels/js_kernel.mjs on `node` (nodejs); acorn (node-acorn) for top-level await
              and re-runnable declarations
  typescript  the same kernel, cells transpiled by node-typescript
  bash        a persistent bash
  r           IRkernel through its Jupyter kernel spec (r-cran-irkernel)

Names are trimmed and lower-cased; `js` and `ts` are aliases. `detect()` looks once, at start-up.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from typing import Optional

from .errors import ApiError, ErrorCode
from .kernels import Kernel, KernelOptions

LANGUAGES = ("python", "javascript", "typescript", "bash", "r")
ALIASES = {"js": "javascript", "ts": "typescript"}

# Where Debian (and npm, globally) put Node.js packages.
NODE_PACKAGE_DIRS = ("/usr/share/nodejs", "/usr/lib/nodejs", "/usr/local/lib/node_modules", "/usr/lib/node_modules")


def normalise(language: str) -> str:
    name = language.strip().lower()
    return ALIASES.get(name, name)


def _node_package(name: str) -> Optional[str]:
    for base in NODE_PACKAGE_DIRS:
        if os.path.isfile(os.path.join(base, name, "package.json")):
            return os.path.join(base, name)
    return None


def _r_argv() -> Optional[list[str]]:
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    except ImportError:
        return None
    try:
        spec = KernelSpecManager().get_kernel_spec("ir")
    except NoSuchKernel:
        return None
    if not spec.argv or shutil.which(spec.argv[0]) is None:
        return None
    return list(spec.argv)


@dataclass(frozen=True)
class Runtimes:
    """What this machine can run; None where a piece is missing."""

    python: bool
    node: Optional[str]
    acorn: Optional[str]
    typescript: Optional[str]
    bash: Optional[str]
    r_argv: Optional[list[str]]

    @classmethod
    def detect(cls) -> "Runtimes":
        return cls(
            python=importlib.util.find_spec("ipykernel") is not None,
            node=shutil.which("node") or shutil.which("nodejs"),
            acorn=_node_package("acorn"),
            typescript=_node_package("typescript"),
            bash=shutil.which("bash"),
            r_argv=_r_argv(),
        )

    def missing(self, language: str) -> Optional[str]:
        """Why `language` cannot run here, or None if it can."""
        if language == "python" and not self.python:
            return "ipykernel is not installed (Debian: python3-ipykernel)"
        if language in ("javascript", "typescript") and not self.node:
            return "node is not installed (Debian: nodejs)"
        if language == "typescript" and not self.typescript:
            return "the TypeScript compiler is not installed (Debian: node-typescript)"
        if language == "bash" and not self.bash:
            return "bash is not installed"
        if language == "r" and not self.r_argv:
            return "IRkernel's kernel spec is not installed (Debian: r-cran-irkernel, then IRkernel::installspec())"
        return None

    def available(self) -> list[str]:
        return [lang for lang in LANGUAGES if self.missing(lang) is None]

    def check(self, language: str) -> str:
        """The normalised name of a language this machine runs, or an ApiError."""
        name = normalise(language)
        if name not in LANGUAGES:
            raise ApiError(ErrorCode.UNKNOWN_LANGUAGE, f"unknown language '{language}'",
                           f"use one of {', '.join(self.available())}")
        why = self.missing(name)
        if why is not None:
            raise ApiError(ErrorCode.UNKNOWN_LANGUAGE, f"language '{name}' is not available here: {why}",
                           f"use one of {', '.join(self.available())}")
        return name

    def kernel(self, language: str, options: KernelOptions) -> Kernel:
        if language == "python":
            from .kernels.jupyter import PythonKernel
            return PythonKernel(options)
        if language == "r":
            from .kernels.jupyter import RKernel
            return RKernel(options, self.r_argv or [])
        if language in ("javascript", "typescript"):
            from .kernels.node import NodeKernel
            return NodeKernel(options, self.node or "node", language == "typescript", self.acorn, self.typescript)
        if language == "bash":
            from .kernels.bash import BashKernel
            return BashKernel(options)
        raise ValueError(language)
