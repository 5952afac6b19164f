"""Services over plain TCP through the API: one connection (`services.stream`) and a local port that tunnels
each of its connections (`services.connect`), sync and async; the service wakes for each."""

from __future__ import annotations

import asyncio
import socket
import unittest
from typing import ClassVar

from _support import KEY, URL, client, drop, unique, wait_for

from shellbase import AsyncShellbase, ContextHandle, NotFoundError, Service, Shellbase, ShellbaseError, UnauthorizedError

#: A python3 TCP echo server (a stand-in for a database): each line comes back upper-cased.
ECHO = """\
import socketserver
class H(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line.upper()); self.wfile.flush()
class S(socketserver.ThreadingMixIn, socketserver.TCPServer): allow_reuse_address = True; daemon_threads = True
S(('127.0.0.1', 5432), H).serve_forever()
"""
WAIT_S = 60.0


def talk(sock: socket.socket, line: bytes) -> bytes:
    """Sends a line and reads the answer's line."""
    sock.settimeout(WAIT_S)
    sock.sendall(line)
    with sock.makefile("rb") as answer:
        return answer.readline()


def define_echo(sb: Shellbase, name: str) -> Service:
    ctx = sb.context(name)
    ctx.files.write("/root/echo.py", ECHO)
    return ctx.services.create(name="db", command="python3 /root/echo.py", port=5432, idle_timeout_ms=2_000,
                               access="key", network={"egress": "none"})


class TunnelTest(unittest.TestCase):
    # One service for the class: each test wakes it again.
    sb: ClassVar[Shellbase]
    name: ClassVar[str]
    db: ClassVar[Service]
    ctx: ClassVar[ContextHandle]

    @classmethod
    def setUpClass(cls) -> None:
        cls.sb = client()
        cls.name = unique("tcp")
        cls.db = define_echo(cls.sb, cls.name)
        cls.ctx = cls.sb.context(cls.name)

    @classmethod
    def tearDownClass(cls) -> None:
        drop(cls.ctx)

    def test_the_service_keeps_its_access_and_network(self) -> None:
        self.assertEqual((self.db.access, self.db.network), ("key", {"egress": "none"}))
        self.assertEqual(self.ctx.services.get("db").access, "key")
        self.assertIsNone(self.db.share, "its own context only")
        self.assertEqual(self.ctx.services.share("db", "tenant").share, "tenant")
        self.assertEqual(self.ctx.services.share("db", [self.name]).share, [self.name])
        self.assertIsNone(self.ctx.services.share("db", None).share)

    def test_stream_is_one_connection_that_wakes_the_service(self) -> None:
        with self.ctx.services.stream("db") as sock:
            self.assertIsInstance(sock, socket.socket)
            self.assertEqual(talk(sock, b"select 1\n"), b"SELECT 1\n")
            self.assertEqual(self.ctx.services.get("db").state, "running")
            self.assertEqual(talk(sock, b"again\n"), b"AGAIN\n")
        with self.sb.tunnel(f"/v1/contexts/{self.name}/services/db/connect") as raw:
            self.assertEqual(talk(raw, b"raw\n"), b"RAW\n")

    def test_non_101_answers_are_typed_errors(self) -> None:
        with self.assertRaises(NotFoundError) as caught:
            self.ctx.services.stream("nope")
        self.assertEqual(caught.exception.status, 404)
        self.assertIn("service", caught.exception.message)
        with self.assertRaises(UnauthorizedError):
            Shellbase(URL, "sb_not_a_key").context(self.name).services.stream("db")

    def test_connect_tunnels_each_local_connection(self) -> None:
        with self.ctx.services.connect("db") as tunnel:
            self.assertEqual(tunnel.host, "127.0.0.1")
            for i in range(3):
                with socket.create_connection((tunnel.host, tunnel.port), timeout=WAIT_S) as conn:
                    self.assertEqual(talk(conn, f"select {i}\n".encode()), f"SELECT {i}\n".encode())
            # Two at once: each has its own tunnel.
            with socket.create_connection((tunnel.host, tunnel.port)) as a, socket.create_connection((tunnel.host, tunnel.port)) as b:
                self.assertEqual((talk(a, b"a\n"), talk(b, b"b\n")), (b"A\n", b"B\n"))
            held = socket.create_connection((tunnel.host, tunnel.port))
            self.assertEqual(talk(held, b"held\n"), b"HELD\n")
        # Closing the tunnel stopped listening and cut the connection it held.
        held.settimeout(WAIT_S)
        self.assertEqual(held.recv(10), b"")
        held.close()
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection((tunnel.host, tunnel.port), timeout=5).close()
        wait_for("the service asleep once its connections closed", lambda: self.ctx.services.get("db").state == "sleeping")

    def test_a_tunnel_that_cannot_open_closes_its_connection_and_reports(self) -> None:
        errors: list[ShellbaseError] = []
        with self.ctx.services.connect("nope", port=0, on_error=errors.append) as tunnel:
            with socket.create_connection((tunnel.host, tunnel.port), timeout=WAIT_S) as conn:
                self.assertEqual(conn.recv(10), b"")
        self.assertEqual([type(e) for e in errors], [NotFoundError])


class AsyncTunnelTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.name = unique("atcp")
        await asyncio.to_thread(define_echo, client(), self.name)
        self.sb = AsyncShellbase(URL, KEY, timeout=120)
        self.ctx = self.sb.context(self.name)

    async def asyncTearDown(self) -> None:
        drop(client().context(self.name))

    async def test_stream_and_connect(self) -> None:
        reader, writer = await self.ctx.services.stream("db")
        try:
            writer.write(b"select 1\n")
            self.assertEqual(await asyncio.wait_for(reader.readline(), WAIT_S), b"SELECT 1\n")
        finally:
            writer.close()
        with self.assertRaises(NotFoundError):
            await self.ctx.services.stream("nope")
        raw_reader, raw_writer = await self.sb.tunnel(f"/v1/contexts/{self.name}/services/db/connect")
        raw_writer.write(b"raw\n")
        self.assertEqual(await asyncio.wait_for(raw_reader.readline(), WAIT_S), b"RAW\n")
        raw_writer.close()

        async with await self.ctx.services.connect("db") as tunnel:
            self.assertEqual(tunnel.host, "127.0.0.1")

            async def ask(line: bytes) -> bytes:
                r, w = await asyncio.open_connection(tunnel.host, tunnel.port)
                try:
                    w.write(line)
                    return await asyncio.wait_for(r.readline(), WAIT_S)
                finally:
                    w.close()

            self.assertEqual(await asyncio.gather(ask(b"one\n"), ask(b"two\n"), ask(b"three\n")), [b"ONE\n", b"TWO\n", b"THREE\n"])
            held_reader, held_writer = await asyncio.open_connection(tunnel.host, tunnel.port)
            held_writer.write(b"held\n")
            self.assertEqual(await asyncio.wait_for(held_reader.readline(), WAIT_S), b"HELD\n")
        self.assertEqual(await asyncio.wait_for(held_reader.read(), WAIT_S), b"", "closing the tunnel cut what it held")
        held_writer.close()
        with self.assertRaises(ConnectionRefusedError):
            await asyncio.open_connection(tunnel.host, tunnel.port)

    async def test_a_tunnel_that_cannot_open_reports(self) -> None:
        errors: list[ShellbaseError] = []
        async with await self.ctx.services.connect("nope", on_error=errors.append) as tunnel:
            r, w = await asyncio.open_connection(tunnel.host, tunnel.port)
            self.assertEqual(await asyncio.wait_for(r.read(), WAIT_S), b"")
            w.close()
        self.assertEqual([type(e) for e in errors], [NotFoundError])


if __name__ == "__main__":
    unittest.main()
