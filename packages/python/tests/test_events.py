"""Events (a page, and the Server-Sent Events stream) and webhooks, in both clients."""

from __future__ import annotations

import asyncio
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from _support import KEY, URL, client, closed_port, drop, unique, wait_for

from shellbase import (
    AsyncShellbase,
    Event,
    ExecResult,
    InvalidArgumentError,
    NotFoundError,
    Shellbase,
    UnavailableError,
)

COMMITTED = ["version.committed"]
#: Seconds a test waits for an event before it closes the stream and fails.
EVENT_WITHIN_S = 60.0


def versions(events: list[Event]) -> list[object]:
    return [e.data.get("version") for e in events]


class EventsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("events"))

    def tearDown(self) -> None:
        drop(self.ctx)

    def committed(self, version: str, after: str | None = None) -> list[Event]:
        """The context's version.committed events (after `after`), once the one of `version` is among them."""
        def listed() -> list[Event] | None:
            events = self.sb.events.list(context=self.ctx.name, kinds=COMMITTED, after=after)
            return events if version in versions(events) else None
        return wait_for(f"the version.committed event of {version}", listed, timeout=10)

    def test_a_commit_is_listed_with_its_version(self) -> None:
        r = self.ctx.exec("echo one > /root/one")
        event = next(e for e in self.committed(r.version) if e.data.get("version") == r.version)
        self.assertIsInstance(event, Event)
        self.assertEqual((event.kind, event.context, event.machine), ("version.committed", self.ctx.name, None))
        self.assertTrue(event.id and event.time)
        self.assertEqual(self.sb.events.list(context=self.ctx.name, kinds=["machine.state"]), [])

    def test_the_stream_yields_a_commit_made_after_it_opened_and_after_resumes(self) -> None:
        self.sb.contexts.create(self.ctx.name)  # what creating it reports comes before the stream
        made: list[ExecResult] = []
        with self.sb.events.stream(context=self.ctx.name, kinds=COMMITTED) as feed:
            worker = threading.Thread(target=lambda: made.append(self.ctx.exec("echo two > /root/two")))
            worker.start()
            give_up = threading.Timer(EVENT_WITHIN_S, feed.close)
            give_up.start()
            try:
                event = next(iter(feed), None)
            finally:
                give_up.cancel()
                worker.join()
        self.assertTrue(feed.closed)
        self.assertIsNotNone(event, f"no event within {EVENT_WITHIN_S} s")
        assert event is not None
        self.assertEqual((event.kind, event.context, event.data.get("version")), ("version.committed", self.ctx.name, made[0].version))
        self.assertEqual(feed.last_id, event.id)

        # What happened after the last id seen: listed, and first on a stream opened after it.
        r = self.ctx.exec("echo three > /root/three")
        self.assertEqual(versions(self.committed(r.version, after=event.id)), [r.version])
        with self.sb.events.stream(context=self.ctx.name, kinds=COMMITTED, after=event.id) as again:
            self.assertEqual(again.last_id, event.id)
            resumed = next(again)
        self.assertEqual(resumed.data.get("version"), r.version)

    def test_an_unknown_kind_is_refused(self) -> None:
        with self.assertRaises(InvalidArgumentError):
            self.sb.events.list(kinds=["nope"])  # type: ignore[list-item]
        with self.assertRaises(InvalidArgumentError):
            self.sb.events.stream(kinds=["nope"])  # type: ignore[list-item]


class WebhooksTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()

    def test_a_loopback_url_is_refused_and_nothing_is_stored(self) -> None:
        url = f"http://127.0.0.1:{closed_port()}/{unique('hook')}"
        with self.assertRaises(InvalidArgumentError) as caught:
            self.sb.webhooks.create(url, ["version.committed", "machine.state"], name="local")
        self.assertEqual(caught.exception.details.get("field"), "url")
        self.assertNotIn(url, [w.url for w in self.sb.webhooks.list()])

    def test_an_unknown_webhook_is_not_found(self) -> None:
        calls: list[Callable[[], object]] = [
            lambda: self.sb.webhooks.get("wh_nope"),
            lambda: self.sb.webhooks.deliveries("wh_nope", limit=5),
            lambda: self.sb.webhooks.delete("wh_nope"),
        ]
        for call in calls:
            with self.assertRaises(NotFoundError):
                call()


# A stand-in server for what the real one does not do on demand: frames split over lines, CRLF ends, an error frame.

FRAMES = (
    b": shellbase events\n\n"
    b'id: 5\nevent: version.committed\ndata: {"id":"5","kind":"version.committed","time":"t1","context":"c","data":{"version":"v1"}}\n\n'
    b": keep-alive\r\n\r\n"
    b'id: 6\r\nevent: machine.state\r\ndata:{"id":"6","kind":"machine.state","time":"t2",\r\n'
    b'data: "machine":"m","data":{"state":"running","from":null}}\r\n\r\n'
)


class FakeEvents(BaseHTTPRequestHandler):
    """`GET /v1/events` over HTTP/1.0 (the answer ends with the connection): FRAMES, then per the query's `context`:
    `error` an error frame, `hang` nothing until released."""

    release = threading.Event()
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        FakeEvents.seen.append((self.path, self.headers.get("Accept")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if "context=hang" in self.path:
            self.wfile.write(b": shellbase events\n\n")
            self.wfile.flush()
            FakeEvents.release.wait(30)
            return
        self.wfile.write(FRAMES)
        if "context=error" in self.path:
            self.wfile.write(b'event: error\ndata: {"message":"the store went away"}\n\n')

    def log_message(self, *args: object) -> None:
        pass


class FeedParsingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEvents)
        cls.server.daemon_threads = True
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.sb = Shellbase(f"http://127.0.0.1:{cls.server.server_address[1]}", "k", timeout=10)

    @classmethod
    def tearDownClass(cls) -> None:
        FakeEvents.release.set()
        cls.server.shutdown()
        cls.server.server_close()

    def test_frames_comments_and_the_end(self) -> None:
        with self.sb.events.stream(kinds=["version.committed", "machine.state"], context="c") as feed:
            events = list(feed)
        self.assertEqual([(e.id, e.kind, e.context, e.machine) for e in events], [("5", "version.committed", "c", None), ("6", "machine.state", None, "m")])
        self.assertEqual(events[1].data, {"state": "running", "from": None})
        self.assertEqual(feed.last_id, "6")
        self.assertTrue(feed.closed)
        path, accept = FakeEvents.seen[-1]
        self.assertEqual((path, accept), ("/v1/events?kinds=version.committed%2Cmachine.state&context=c", "text/event-stream"))

    def test_an_error_frame_raises(self) -> None:
        feed = self.sb.events.stream(context="error", after="4")
        got: list[Event] = []
        with self.assertRaises(UnavailableError) as caught:
            for event in feed:
                got.append(event)
        self.assertEqual([e.id for e in got], ["5", "6"])
        self.assertIn("the store went away", caught.exception.message)
        self.assertIn("after='6'", caught.exception.hint or "")
        self.assertTrue(feed.closed)
        self.assertIn("after=4", FakeEvents.seen[-1][0])

    def test_close_from_another_thread_ends_the_loop(self) -> None:
        feed = self.sb.events.stream(context="hang")
        threading.Timer(0.3, feed.close).start()
        self.assertEqual(list(feed), [])
        self.assertTrue(feed.closed)


class AsyncEventsTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.sb = AsyncShellbase(URL, KEY, timeout=120)
        self.ctx = self.sb.context(unique("aevents"))

    async def asyncTearDown(self) -> None:
        drop(client().context(self.ctx.name))

    async def test_stream_list_and_after(self) -> None:
        await self.sb.contexts.create(self.ctx.name)
        async with self.sb.events.stream(context=self.ctx.name, kinds=COMMITTED) as feed:
            commit = asyncio.create_task(self.ctx.exec("echo one > /root/one"))
            event = await asyncio.wait_for(anext(feed), EVENT_WITHIN_S)
        r = await commit
        self.assertEqual((event.kind, event.context, event.data.get("version")), ("version.committed", self.ctx.name, r.version))
        self.assertTrue(feed.closed)
        self.assertEqual(feed.last_id, event.id)
        self.assertIn(event.id, [e.id for e in await self.sb.events.list(context=self.ctx.name, kinds=COMMITTED)])

        r2 = await self.ctx.exec("echo two > /root/two")

        async def after_first() -> list[object] | None:
            found = versions(await self.sb.events.list(context=self.ctx.name, kinds=COMMITTED, after=event.id))
            return found or None
        resumed: list[object] | None = None
        for _ in range(50):
            resumed = await after_first()
            if resumed:
                break
            await asyncio.sleep(0.2)
        self.assertEqual(resumed, [r2.version])

    async def test_cancelling_the_wait_closes_the_stream(self) -> None:
        feed = self.sb.events.stream(context=unique("quiet"))
        with self.assertRaises(TimeoutError):
            await asyncio.wait_for(anext(feed), 0.5)
        self.assertTrue(feed.closed)
        with self.assertRaises(StopAsyncIteration):
            await anext(feed)

    async def test_webhooks_refuse_loopback_and_find_nothing_unknown(self) -> None:
        url = f"http://127.0.0.1:{closed_port()}/{unique('hook')}"
        with self.assertRaises(InvalidArgumentError):
            await self.sb.webhooks.create(url, ["machine.state"])
        self.assertNotIn(url, [w.url for w in await self.sb.webhooks.list()])
        with self.assertRaises(NotFoundError):
            await self.sb.webhooks.get("wh_nope")
        with self.assertRaises(NotFoundError):
            await self.sb.webhooks.deliveries("wh_nope")
        with self.assertRaises(NotFoundError):
            await self.sb.webhooks.delete("wh_nope")


if __name__ == "__main__":
    unittest.main()
