"""Two concurrent writers of one file: one commits, the other reports the conflict (or retries over it)."""

from __future__ import annotations

import asyncio
import threading
import unittest

from _support import KEY, URL, client, drop, unique

from shellbase import AsyncShellbase, ExecResult, OnConflict

# Both start from the same head (the sleep outlasts the other's start); the first to end commits.
WRITE = "sleep 1.5; echo {who} > /root/shared"


class ConcurrentWritersTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("writers"))
        self.base = self.ctx.exec("echo base > /root/shared").version

    def tearDown(self) -> None:
        drop(self.ctx)

    def two_threads(self, on_conflict: OnConflict) -> list[ExecResult]:
        barrier = threading.Barrier(2)
        results: dict[str, ExecResult] = {}
        errors: list[BaseException] = []

        def write(who: str) -> None:
            try:
                barrier.wait(timeout=30)
                results[who] = self.ctx.exec(WRITE.format(who=who), on_conflict=on_conflict)
            except BaseException as e:  # reported by the test thread
                errors.append(e)

        threads = [threading.Thread(target=write, args=(who,)) for who in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(errors, [])
        return [results["a"], results["b"]]

    def assert_one_conflict(self, results: list[ExecResult]) -> None:
        self.assertEqual([r.base_version for r in results], [self.base, self.base], "both ran over the same head")
        committed = [r for r in results if r.committed]
        refused = [r for r in results if not r.committed]
        self.assertEqual((len(committed), len(refused)), (1, 1), results)
        loser = refused[0]
        assert loser.conflict is not None
        self.assertEqual(loser.conflict.paths, ["/root/shared"])
        self.assertFalse(loser.ok)
        self.assertEqual(loser.exit_code, 0, "the command itself succeeded")
        self.assertNotEqual(loser.conflict.version, committed[0].version, "the refused work is kept as its own version")
        winner = "a" if committed[0] is results[0] else "b"
        self.assertEqual(self.ctx.files.read("/root/shared"), f"{winner}\n".encode())
        self.assertEqual(self.ctx.info().head, committed[0].version)

    def test_two_threads_one_conflict(self) -> None:
        self.assert_one_conflict(self.two_threads("fail"))

    def test_two_threads_retry_both_commit(self) -> None:
        results = self.two_threads("retry")
        self.assertTrue(all(r.committed and r.conflict is None for r in results), results)
        self.assertEqual(sorted(r.retries for r in results), [0, 1])
        last = max(results, key=lambda r: r.retries)
        self.assertEqual(self.ctx.info().head, last.version)
        self.assertEqual(self.ctx.files.read("/root/shared"), b"a\n" if last is results[0] else b"b\n")

    def test_two_async_tasks_one_conflict(self) -> None:
        async def main() -> list[ExecResult]:
            actx = AsyncShellbase(URL, KEY).context(self.ctx.name)
            return list(await asyncio.gather(actx.exec(WRITE.format(who="a")), actx.exec(WRITE.format(who="b"))))

        self.assert_one_conflict(asyncio.run(main()))


if __name__ == "__main__":
    unittest.main()
