"""`python3 -m ci_server --port 49999 --host 0.0.0.0`: the code interpreter's HTTP server.

The sandbox-wide environment variables are this process's own environment (read once at start)
and those of the file `--env-file` names (sandbox_env.py: the sandbox's create-time variables,
read again when it changes); per-execution `env_vars` are reverted to them afterwards.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from .api import Server
from .contexts import Registry
from .languages import Runtimes
from .sandbox_env import ENV_FILE, SandboxEnv

log = logging.getLogger("ci_server")


class _Stop(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ci_server", description="E2B-compatible code interpreter server")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=49999)
    parser.add_argument("--cwd", default="/home/user", help="working directory of contexts that name none")
    parser.add_argument("--env-file", default=ENV_FILE, help="the sandbox-wide variables set after start-up (JSON)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    runtimes = Runtimes.detect()
    registry = Registry(runtimes, SandboxEnv(dict(os.environ), args.env_file), os.path.normpath(args.cwd))
    server = Server((args.host, args.port), registry)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    registry.start_defaults()
    host, port = server.server_address[:2]
    log.info("listening on %s:%d; languages: %s", host, port, ", ".join(runtimes.available()))
    try:
        server.serve_forever(poll_interval=0.5)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.server_close()
        registry.shutdown()
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
