"""A machine round trip: create from a context, exec, files, expose, pause/resume, snapshot, fork, restore, commit, delete.

Machines boot under software emulation on hosts without KVM: the first machine of a version builds
its template (a minute or more), and every call is slower, so the client waits without a timeout.
At most one machine and one copy (a fork, then a restore) run at once.
"""

from __future__ import annotations

import asyncio
import time
import unittest
import urllib.error
import urllib.request

from _support import KEY, URL, client, drop, unique, wait_for

from shellbase import AsyncShellbase, FailedPreconditionError, Machine, MachineExitEvent, MachineHandle, NotFoundError, OutputEvent, PtyExit


def http_get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as res:
            return res.read() if res.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


class MachineRoundTripTest(unittest.TestCase):
    def test_round_trip(self) -> None:
        sb = client(timeout=None)
        ctx = sb.context(unique("machine"))
        ctx.files.write("/root/from-context.txt", "from the context\n")
        started = time.monotonic()
        m = sb.machines.create(context=ctx.name, memory_mb=512, network={"egress": "none"})
        copies: list[MachineHandle] = []
        snapshot: str | None = None
        try:
            print(f"\n  machine {m.id} created in {time.monotonic() - started:.0f} s", flush=True)
            info = m.info()
            self.assertIsInstance(info, Machine)
            self.assertEqual((info.state, info.context, info.memory_mb, info.network), ("running", ctx.name, 512, {"egress": "none"}))
            # Its egress proxy refuses every connection under "none".
            self.assertEqual(m.exec("curl -s -o /dev/null -w '%{http_code}' http://example.com/").stdout, "403")
            self.assertIn(m.id, [x.id for x in sb.machines.list()])

            r = m.exec("cat /root/from-context.txt; echo pid1=$(cat /proc/1/comm); echo err >&2; exit 3")
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "from the context\npid1=systemd\n", "err\n"))
            self.assertFalse(r.timed_out)
            self.assertEqual(m.exec(["sh", "-c", "cat; echo $X"], stdin="in\n", env={"X": "y"}, cwd="/tmp").stdout, "in\ny\n")
            events = list(m.exec_stream(["bash", "-c", "echo one; sleep 0.3; echo two >&2"]))
            self.assertEqual(events[:2], [OutputEvent("stdout", "one\n"), OutputEvent("stderr", "two\n")])
            last = events[-1]
            assert isinstance(last, MachineExitEvent)
            self.assertEqual(last.exit_code, 0)

            m.files.write("/srv/data/hello.txt", "hello machine", mode=0o600)
            self.assertEqual(m.files.read("/srv/data/hello.txt"), b"hello machine")
            self.assertEqual(m.files.read_text("srv/data/hello.txt"), "hello machine")
            self.assertEqual(m.files.list("/srv"), ["data/"])
            self.assertEqual(m.exec("stat -c %a /srv/data/hello.txt").stdout, "600\n")

            # A guest port on a gateway URL.
            m.exec("mkdir -p /srv/www && echo served > /srv/www/index.html && cd /srv/www && setsid -f python3 -m http.server 8080 >/dev/null 2>&1")
            port = m.expose(8080)
            self.assertTrue(port.path_url.startswith("http://127.0.0.1:"), port.path_url)
            self.assertEqual(wait_for("the guest's web server", lambda: http_get(f"{port.path_url}index.html"), timeout=120, interval=1), b"served\n")
            self.assertIn(8080, [p.port for p in m.info().ports])

            self.assertEqual(m.pause().state, "paused")
            with self.assertRaises(FailedPreconditionError):
                m.exec("true")
            self.assertEqual(m.resume().state, "running")
            # A machine without a display (not of the desktop image) has no screen to capture or drive.
            with self.assertRaises(FailedPreconditionError):
                m.screen()
            with self.assertRaises(FailedPreconditionError):
                m.click(5, 5)

            # Hibernated on request, its console log read without waking it; the next exec wakes it.
            m.exec("echo console-marker-py > /dev/console")
            self.assertEqual(m.hibernate().state, "hibernated")
            tail = m.console(tail=50)
            self.assertIn("console-marker-py", tail.lines)
            self.assertEqual(m.info().state, "hibernated")
            self.assertEqual(m.exec("echo awake").stdout, "awake\n")

            # An interactive shell on a terminal: its size, its output, its exit code.
            with m.pty(cols=70, rows=20) as pty:
                pty.write("stty size; echo py-$((1+2)); stty -echo; echo paste-$((2+2)); cat > /root/paste; echo bytes=$(wc -c < /root/paste); exit 5\n")
                shown = b""
                while b"paste-4" not in shown:
                    chunk = pty.read()
                    self.assertTrue(chunk, shown)
                    shown += chunk
                # More than one message may hold (1 MiB): written in pieces, counted by cat.
                pty.write(("y" * 1023 + "\n") * 1536)
                pty.write("\x04")
                shown += b"".join(pty)
            self.assertIn(b"20 70", shown)
            self.assertIn(b"py-3", shown)
            self.assertIn(b"bytes=1572864", shown)
            self.assertEqual(pty.exit, PtyExit(5))

            snapshot = m.snapshot()
            self.assertIn(snapshot, [s.id for s in sb.machines.snapshots()])

            # A fork has the machine's memory and disk; its changes are its own.
            copies = m.fork(1)
            self.assertEqual(len(copies), 1)
            fork = copies[0]
            self.assertEqual(fork.exec("cat /srv/data/hello.txt").stdout, "hello machine")
            fork.files.write("/srv/data/fork.txt", "fork only")
            self.assertNotIn("fork.txt", m.files.list("/srv/data"))
            fork.delete()
            copies = []
            with self.assertRaises(NotFoundError):
                fork.info()

            copies = sb.machines.restore(snapshot, 1)
            self.assertEqual(copies[0].files.read("/srv/data/hello.txt"), b"hello machine")
            copies[0].delete()
            copies = []
            sb.machines.delete_snapshot(snapshot)
            snapshot = None

            # The async client reaches the same machine.
            async def from_async() -> str:
                am = AsyncShellbase(URL, KEY).machines.get(m.id)
                return (await am.exec("echo async")).stdout

            self.assertEqual(asyncio.run(from_async()), "async\n")

            version = m.commit(ctx.name)
            self.assertEqual(ctx.info().head, version)
            self.assertEqual(ctx.versions()[0].cause.kind, "machine")
            self.assertEqual(ctx.files.read("/srv/data/hello.txt"), b"hello machine")
            self.assertEqual(ctx.exec("cat /srv/www/index.html").stdout, "served\n")

            self.assertEqual(m.stop().state, "stopped")
        finally:
            for copy in copies:
                copy.delete()
            if snapshot is not None:
                sb.machines.delete_snapshot(snapshot)
            m.delete()
            drop(ctx)
        with self.assertRaises(NotFoundError):
            m.info()
        self.assertNotIn(m.id, [x.id for x in sb.machines.list()])


if __name__ == "__main__":
    unittest.main()
