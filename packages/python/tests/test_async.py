"""The asyncio client: the same surface as the synchronous one, and cancellation that stops queries."""

from __future__ import annotations

import asyncio
import inspect
import unittest

from _support import KEY, URL, client, drop, query_usage, unique, wait_for

import shellbase
from shellbase import AsyncShellbase, ExitEvent, NotFoundError, OutputEvent, Shellbase

LONG = "echo started; sleep 30; echo finished > /root/finished"
STOPPED_WITHIN_S = 15.0

# Calls that send nothing (handles) stay plain functions; exec_stream and events.stream return async iterators.
NOT_COROUTINES = {"Shellbase.context", "context.at", "machines.get", "context.exec_stream", "machine.exec_stream", "Shellbase.build_stream",
                  "events.stream"}


def public(obj: object) -> dict[str, object]:
    return {n: getattr(obj, n) for n in dir(obj) if not n.startswith("_")}


class SurfaceTest(unittest.TestCase):
    def test_async_client_mirrors_the_sync_one(self) -> None:
        sync = Shellbase("http://127.0.0.1:1", "k")
        aio = AsyncShellbase("http://127.0.0.1:1", "k")
        pairs: list[tuple[str, object, object]] = [
            ("Shellbase", sync, aio),
            ("contexts", sync.contexts, aio.contexts),
            ("tenants", sync.tenants, aio.tenants),
            ("machines", sync.machines, aio.machines),
            ("images", sync.images, aio.images),
            ("events", sync.events, aio.events),
            ("webhooks", sync.webhooks, aio.webhooks),
            ("context", sync.context("c"), aio.context("c")),
            ("context.files", sync.context("c").files, aio.context("c").files),
            ("context.services", sync.context("c").services, aio.context("c").services),
            ("context.network", sync.context("c").network, aio.context("c").network),
            ("machine", sync.machines.get("m"), aio.machines.get("m")),
            ("machine.files", sync.machines.get("m").files, aio.machines.get("m").files),
        ]
        for where, s, a in pairs:
            s_members, a_members = public(s), public(a)
            self.assertEqual(sorted(set(s_members) - set(a_members)), [], f"{where}: missing from the async client")
            for name, member in s_members.items():
                amember = a_members[name]
                if not inspect.ismethod(member) or not inspect.ismethod(amember):
                    self.assertFalse(inspect.ismethod(member) or inspect.ismethod(amember), f"{where}.{name}: a method on one side only")
                    continue
                self.assertEqual(list(inspect.signature(member).parameters), list(inspect.signature(amember).parameters),
                                 f"{where}.{name}: parameters differ")
                self.assertEqual(inspect.iscoroutinefunction(amember), f"{where}.{name}" not in NOT_COROUTINES, f"{where}.{name}")

    def test_exports(self) -> None:
        for name in shellbase.__all__:
            self.assertTrue(hasattr(shellbase, name), name)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.sb = AsyncShellbase(URL, KEY, timeout=120)
        self.ctx = self.sb.context(unique("async"))

    async def asyncTearDown(self) -> None:
        drop(client().context(self.ctx.name))

    async def assert_stopped(self) -> None:
        sync = client()
        item = await asyncio.to_thread(wait_for, "the stopped query's usage row", lambda: query_usage(sync, self.ctx.name), timeout=STOPPED_WITHIN_S)
        self.assertLess(item.wall_ms, STOPPED_WITHIN_S * 1000)
        with self.assertRaises(NotFoundError):
            await self.ctx.files.stat("/root/finished")

    async def test_exec_files_history(self) -> None:
        r = await self.ctx.exec("echo hi; echo one > /root/n")
        self.assertEqual((r.exit_code, r.stdout, r.committed), (0, "hi\n", True))
        v = await self.ctx.files.write("/root/n", "two\n")
        self.assertEqual(await self.ctx.files.read("/root/n"), b"two\n")
        self.assertEqual(await self.ctx.at(r.version).files.read_text("/root/n"), "one\n")
        self.assertEqual((await self.ctx.files.stat("/root/n")).size, 4)
        self.assertIn("n", [e.name for e in await self.ctx.files.list("/root")])
        versions = await self.ctx.versions()
        self.assertEqual(versions[0].id, v)
        fork = await self.ctx.fork(unique("afork"))
        try:
            await fork.exec("echo three > /root/n")
            self.assertEqual([c.path for c in (await fork.diff(from_=v)).changes], ["/root/n"])
            merged = await self.ctx.merge(fork.name)
            self.assertEqual((await self.ctx.info()).head, merged)
        finally:
            await fork.delete()
        await self.ctx.reset(r.version)
        self.assertEqual(await self.ctx.files.read("/root/n"), b"one\n")
        response = await self.ctx.files.open("/root/n", range=(0, 1))
        async with response:
            self.assertEqual(await response.read(), b"on")
        self.assertIn(self.ctx.name, [c.name for c in await self.sb.contexts.list()])
        self.assertGreaterEqual((await self.sb.usage()).total.queries, 1)

    async def test_stream_events(self) -> None:
        stream = self.ctx.exec_stream(["bash", "-c", "echo a; sleep 0.5; echo b >&2"])
        events = [e async for e in stream]
        self.assertEqual(events[:2], [OutputEvent("stdout", "a\n"), OutputEvent("stderr", "b\n")])
        self.assertIsInstance(events[-1], ExitEvent)
        self.assertIs(stream.exit, events[-1])
        self.assertTrue(stream.closed)
        with self.assertRaises(NotFoundError):
            async for _ in self.ctx.exec_stream("true", version="v_does_not_exist"):
                pass

    async def test_breaking_out_of_an_async_stream_stops_the_query(self) -> None:
        async for event in self.ctx.exec_stream(LONG):
            self.assertEqual(event, OutputEvent("stdout", "started\n"))
            break
        await self.assert_stopped()

    async def test_aclose_stops_the_query(self) -> None:
        async with self.ctx.exec_stream(LONG) as stream:
            self.assertEqual((await anext(stream)).type, "stdout")
        self.assertTrue(stream.closed)
        await self.assert_stopped()

    async def test_cancelling_a_task_stops_its_query(self) -> None:
        task = asyncio.create_task(self.ctx.exec(LONG))
        await asyncio.sleep(1.5)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await self.assert_stopped()

    async def test_a_timeout_around_a_stream_stops_the_query(self) -> None:
        seen: list[str] = []
        with self.assertRaises(TimeoutError):
            async with asyncio.timeout(2):
                async for event in self.ctx.exec_stream(LONG):
                    seen.append(event.type)
        self.assertEqual(seen, ["stdout"])
        await self.assert_stopped()


if __name__ == "__main__":
    unittest.main()
