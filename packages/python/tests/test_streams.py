"""Streaming: events as they happen, and that leaving a stream early (or a client timeout) stops the query."""

from __future__ import annotations

import time
import unittest

from _support import client, drop, query_usage, unique, wait_for

from shellbase import ExitEvent, NotFoundError, OutputEvent, ShellbaseTimeoutError

# A query that would run 30 s: stopped early, the ledger shows a much shorter run, and sooner than 30 s.
LONG = "echo started; echo progress >&2; echo partial > /root/partial; sleep 30; echo finished > /root/finished"
STOPPED_WITHIN_MS = 15_000


class StreamTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("stream"))

    def tearDown(self) -> None:
        drop(self.ctx)

    def assert_stopped(self) -> None:
        """The query ended long before its 30 s (the ledger row is written when it ends) and did not finish."""
        item = wait_for("the stopped query's usage row", lambda: query_usage(self.sb, self.ctx.name), timeout=STOPPED_WITHIN_MS / 1000)
        self.assertEqual(item.queries, 1)
        self.assertLess(item.wall_ms, STOPPED_WITHIN_MS)
        with self.assertRaises(NotFoundError):
            self.ctx.files.stat("/root/finished")

    def test_events_arrive_as_written_then_exit(self) -> None:
        started = time.monotonic()
        seen: list[tuple[str, str, float]] = []
        stream = self.ctx.exec_stream(["bash", "-c", "echo one; echo err >&2; sleep 1; echo two; exit 4"])
        for event in stream:
            seen.append((event.type, event.data if isinstance(event, OutputEvent) else "", time.monotonic() - started))
        self.assertEqual([(t, d) for t, d, _ in seen], [("stdout", "one\n"), ("stderr", "err\n"), ("stdout", "two\n"), ("exit", "")])
        self.assertLess(seen[0][2], seen[2][2] - 0.5, "the first line came before the command slept")
        self.assertIsInstance(stream.exit, ExitEvent)
        assert stream.exit is not None
        self.assertEqual(stream.exit.exit_code, 4)
        self.assertTrue(stream.closed)

    def test_stream_commits_like_exec(self) -> None:
        with self.ctx.exec_stream("echo saved > /root/s; echo done") as stream:
            events = list(stream)
        last = events[-1]
        assert isinstance(last, ExitEvent)
        self.assertTrue(last.committed)
        self.assertEqual(self.ctx.info().head, last.version)
        self.assertEqual(self.ctx.files.read("/root/s"), b"saved\n")

    def test_breaking_out_of_a_stream_stops_the_query(self) -> None:
        for event in self.ctx.exec_stream(LONG):
            self.assertEqual(event, OutputEvent("stdout", "started\n"))
            break
        self.assert_stopped()

    def test_closing_a_stream_stops_the_query(self) -> None:
        stream = self.ctx.exec_stream(LONG)
        self.assertEqual(next(stream), OutputEvent("stdout", "started\n"))
        stream.close()
        self.assertTrue(stream.closed)
        self.assertEqual(list(stream), [])
        self.assert_stopped()

    def test_a_client_timeout_stops_the_query(self) -> None:
        started = time.monotonic()
        with self.assertRaises(ShellbaseTimeoutError) as caught:
            self.ctx.exec(LONG, timeout=1.5)
        self.assertLess(time.monotonic() - started, 10)
        self.assertIsInstance(caught.exception, TimeoutError)
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertIn(self.sb.url, str(caught.exception))
        self.assert_stopped()

    def test_a_stream_waits_at_most_timeout_for_each_event(self) -> None:
        stream = self.ctx.exec_stream(LONG, timeout=1.5)
        self.assertEqual(next(stream).type, "stdout")
        self.assertEqual(next(stream).type, "stderr")
        with self.assertRaises(ShellbaseTimeoutError):
            next(stream)
        self.assertTrue(stream.closed)
        self.assert_stopped()

    def test_errors_before_the_stream_are_raised_at_the_call(self) -> None:
        with self.assertRaises(NotFoundError):
            self.ctx.exec_stream("true", version="v_does_not_exist")


if __name__ == "__main__":
    unittest.main()
