"""Dockerfile builds (a directory sent as a tar, its .dockerignore applied), the step cache, context defaults and
the image list. Pulls need a registry: the TypeScript suite's test/images.test.ts runs one."""

from __future__ import annotations

import asyncio
import tempfile
import unittest
from pathlib import Path

from _support import KEY, URL, client, drop, unique

from shellbase import AsyncShellbase, BuildResultEvent, BuildStepDone, BuildStepStart, Dockerignore, Image, InvalidArgumentError

DOCKERFILE = """FROM debian
ARG WHO=world
WORKDIR /srv
COPY app/ ./app/
RUN echo "hello $WHO" > greeting && ls -A app > listing
ENV MODE=test
"""


class BuildTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.tag = unique("py-build")
        self.dir = tempfile.TemporaryDirectory()
        root = Path(self.dir.name)
        (root / "app").mkdir()
        (root / "app" / "main.py").write_text("print('hi')\n")
        (root / "app" / "debug.log").write_text("noise\n")
        (root / ".dockerignore").write_text("**/*.log\n")
        (root / "Dockerfile").write_text(DOCKERFILE)

    def tearDown(self) -> None:
        drop(self.sb.context(self.tag))
        self.dir.cleanup()

    def test_build_then_rebuild_from_the_cache(self) -> None:
        events: list[object] = []
        first = self.sb.build(self.dir.name, self.tag, build_args={"WHO": "python"}, on_event=events.append)
        self.assertEqual(len(first.steps), 6)
        self.assertFalse(any(s.cached for s in first.steps if s.instruction.split("] ", 1)[1].startswith(("COPY", "RUN"))))
        self.assertTrue(any(isinstance(e, BuildStepStart) and e.line == 5 for e in events))
        ctx = self.sb.context(self.tag)
        self.assertEqual(ctx.exec("cat greeting listing; echo $MODE").stdout, "hello python\nmain.py\ntest\n")
        self.assertEqual(ctx.info().defaults, {"env": {"MODE": "test"}, "cwd": "/srv"})
        again = self.sb.build(self.dir.name, self.tag, build_args={"WHO": "python"})
        self.assertTrue(all(s.cached for s in again.steps))
        self.assertEqual(again.version, first.version)
        stream = list(self.sb.build_stream(self.dir.name, self.tag, build_args={"WHO": "other"}))
        done = [e for e in stream if isinstance(e, BuildStepDone)]
        self.assertEqual([d.cached for d in done], [True, True, True, True, False, True], "the new ARG value reruns the RUN")
        self.assertIsInstance(stream[-1], BuildResultEvent)

    def test_defaults_and_bad_dockerfiles(self) -> None:
        ctx = self.sb.context(self.tag)
        ctx.exec("true")
        info = ctx.set_defaults({"env": {"A": "1"}, "cwd": "/tmp"})
        self.assertEqual(info.defaults, {"env": {"A": "1"}, "cwd": "/tmp"})
        self.assertEqual(ctx.exec("pwd; echo $A").stdout, "/tmp\n1\n")
        self.assertIsNone(ctx.set_defaults({}).defaults)
        (Path(self.dir.name) / "Dockerfile").write_text("FROM debian\nRUN true\nBOGUS x\n")
        with self.assertRaises(InvalidArgumentError) as caught:
            self.sb.build(self.dir.name, self.tag)
        self.assertIn("line 3", str(caught.exception))
        self.assertTrue(all(isinstance(i, Image) for i in self.sb.images.list()))

    def test_dockerignore_rules(self) -> None:
        ig = Dockerignore("*.log\n**/tmp\nbuild\n!build/keep\n")
        self.assertEqual([p for p in ["a.log", "sub/a.log", "x/tmp", "build/o", "build/keep"] if ig.ignores(p)], ["a.log", "x/tmp", "build/o"])
        self.assertFalse(ig.prunes("build"))


class AsyncBuildTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_build(self) -> None:
        sb = AsyncShellbase(URL, KEY, timeout=120)
        tag = unique("py-abuild")
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "Dockerfile").write_text("FROM debian\nRUN echo async > /root/a\n")
            try:
                result = await sb.build(d, tag)
                self.assertEqual(result.context, tag)
                self.assertEqual((await sb.context(tag).exec("cat /root/a")).stdout, "async\n")
                events = [e async for e in sb.build_stream(d, tag)]
                self.assertTrue(isinstance(events[-1], BuildResultEvent) and all(s.cached for s in events[-1].steps))
            finally:
                await asyncio.to_thread(drop, sb.sync.context(tag))
