"""Queries and history: exec's result, at(version), fork, versions, diff, merge, reset, contexts."""

from __future__ import annotations

import unittest

from _support import client, drop, unique

from shellbase import AlreadyExistsError, ConflictError, Context, ExecResult, Mount, NotFoundError


class ExecTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("exec"))

    def tearDown(self) -> None:
        drop(self.ctx)

    def test_result_carries_output_exit_code_version_and_usage(self) -> None:
        r = self.ctx.exec("echo out; echo err >&2; echo data > /root/d; exit 5")
        self.assertIsInstance(r, ExecResult)
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (5, "out\n", "err\n"))
        self.assertFalse(r.ok)
        self.assertTrue(r.committed, "a query commits by default, whatever its exit code")
        self.assertIsNone(r.conflict)
        self.assertNotEqual(r.version, r.base_version)
        self.assertEqual(self.ctx.info().head, r.version)
        self.assertFalse(r.timed_out)
        self.assertFalse(r.oom_killed)
        self.assertGreater(r.usage.wall_ms, 0)
        self.assertGreater(r.usage.bytes_written, 0)
        again = self.ctx.exec(["cat", "/root/d"])
        self.assertEqual((again.exit_code, again.stdout), (0, "data\n"))
        self.assertTrue(again.ok)

    def test_stdin_env_cwd_commit_modes_limits_and_timeout(self) -> None:
        r = self.ctx.exec("cat; echo $GREETING; pwd", stdin="from stdin\n", env={"GREETING": "hello"}, cwd="/tmp")
        self.assertEqual(r.stdout, "from stdin\nhello\n/tmp\n")
        never = self.ctx.exec("echo x > /root/never", commit="never")
        self.assertFalse(never.committed)
        failed = self.ctx.exec("echo x > /root/failed; false", commit="on-success")
        self.assertFalse(failed.committed)
        self.assertEqual(self.ctx.exec("test -e /root/never || test -e /root/failed || echo neither").stdout, "neither\n")
        capped = self.ctx.exec("head -c 5000 /dev/zero | tr '\\0' x", limits={"output_bytes": 100})
        self.assertEqual((len(capped.stdout), capped.truncated), (100, True))
        slow = self.ctx.exec("sleep 30", timeout_ms=500)
        self.assertTrue(slow.timed_out)
        self.assertEqual((slow.exit_code, slow.signal), (137, "SIGKILL"))
        # The result names the limit it met, its value and the tenant's maximum; the message says what to pass.
        assert slow.limit is not None
        self.assertEqual((slow.limit.name, slow.limit.value), ("timeoutMs", 500))
        self.assertGreaterEqual(slow.limit.max, 3_600_000)
        self.assertRegex(slow.timeout_message or "", r"timeoutMs = 500\b.*pass timeout_ms up to .*this tenant's maximum")
        self.assertIsNone(r.timeout_message)

    def test_mounts_read_only_and_writable(self) -> None:
        vol = self.sb.context(unique("vol"))
        try:
            first = vol.exec("echo one > /root/a")
            ro = self.ctx.exec("cat /mnt/v/root/a; echo x > /mnt/v/root/b || echo refused", mounts=[Mount(context=vol.name, path="/mnt/v", read_only=True)])
            self.assertEqual(ro.stdout, "one\nrefused\n")
            assert ro.mounts is not None
            self.assertEqual((ro.mounts[0].base_version, ro.mounts[0].committed), (first.version, False))
            rw = self.ctx.exec("echo two > /mnt/v/root/a", mounts=[{"context": vol.name, "path": "/mnt/v"}])
            assert rw.mounts is not None
            self.assertTrue(rw.mounts[0].committed)
            self.assertEqual(vol.info().head, rw.mounts[0].version)
            self.assertEqual(vol.exec("cat /root/a").stdout, "two\n")
            with self.assertRaises(NotFoundError):
                self.ctx.exec("true", mounts=[Mount(context=unique("missing"), path="/mnt/x")])
        finally:
            drop(vol)

    def test_at_a_version_fork_versions_and_reset(self) -> None:
        first = self.ctx.exec("echo one > /root/n")
        second = self.ctx.exec("echo two > /root/n")
        past = self.ctx.at(first.version)
        self.assertEqual(past.pinned_version, first.version)
        self.assertEqual(past.exec("cat /root/n", commit="never").stdout, "one\n")
        self.assertEqual(past.files.read("/root/n"), b"one\n")
        self.assertEqual(self.ctx.files.read("/root/n"), b"two\n")

        versions = self.ctx.versions()
        self.assertEqual([v.id for v in versions[:2]], [second.version, first.version])
        self.assertEqual(versions[0].parent, first.version)
        self.assertEqual(versions[0].cause.kind, "exec")
        self.assertEqual(versions[0].cause.command, "echo two > /root/n")
        self.assertEqual(versions[0].cause.exit_code, 0)
        self.assertEqual(versions[-1].cause.kind, "image")
        self.assertEqual(len(self.ctx.versions(limit=1)), 1)

        fork = past.fork(unique("fork"))
        try:
            self.assertIsNone(fork.pinned_version)
            self.assertEqual(fork.files.read("/root/n"), b"one\n", "a fork of a pinned handle starts at the pinned version")
            head_fork = self.ctx.fork(unique("fork"))
            self.assertEqual(head_fork.files.read("/root/n"), b"two\n")
            head_fork.delete()
        finally:
            fork.delete()

        reset = self.ctx.reset(first.version)
        self.assertIsInstance(reset, Context)
        self.assertEqual(self.ctx.files.read("/root/n"), b"one\n")
        self.assertEqual(self.ctx.versions()[0].cause.kind, "reset")
        self.assertIn(second.version, [v.id for v in self.ctx.versions()], "the history keeps every version")

    def test_diff_and_merge(self) -> None:
        base = self.ctx.exec("echo base > /root/shared; echo keep > /root/keep")
        fork = self.ctx.fork(unique("merge"))
        try:
            fork.exec("echo theirs > /root/theirs; rm /root/keep")
            diff = fork.diff(from_=base.version)
            self.assertEqual(sorted((c.path, c.kind) for c in diff.changes), [("/root/keep", "deleted"), ("/root/theirs", "added")])
            patch = fork.diff(from_=base.version, path="/root/theirs")
            self.assertIn("+theirs", patch.patch or "")
            own = self.ctx.diff()  # the head against its parent
            self.assertEqual(sorted((c.path, c.kind, c.type) for c in own.changes),
                             [("/root/keep", "added", "file"), ("/root/shared", "added", "file")])
            merged = self.ctx.merge(fork.name)
            self.assertEqual(self.ctx.info().head, merged)
            self.assertEqual(self.ctx.files.read("/root/theirs"), b"theirs\n")

            # Both sides change the same file: a conflict naming the path, and nothing merged.
            self.ctx.exec("echo ours > /root/shared")
            fork.exec("echo other > /root/shared")
            head = self.ctx.info().head
            with self.assertRaises(ConflictError) as caught:
                self.ctx.merge(fork.name)
            self.assertEqual(caught.exception.paths, ["/root/shared"])
            self.assertEqual(caught.exception.status, 409)
            self.assertEqual(caught.exception.code, "conflict")
            self.assertEqual(self.ctx.info().head, head)
        finally:
            fork.delete()


class ContextsTest(unittest.TestCase):
    def test_create_list_get_delete(self) -> None:
        sb = client()
        name = unique("ctx")
        created = sb.contexts.create(name)
        self.assertEqual((created.name, created.image), (name, "debian"))
        self.assertIn(name, [c.name for c in sb.contexts.list()])
        self.assertEqual(sb.contexts.get(name).head, created.head)
        with self.assertRaises(AlreadyExistsError):
            sb.contexts.create(name)
        sb.context(name).exec("echo v > /root/v")
        copy = sb.contexts.create(unique("copy"), from_context=name)
        self.assertEqual(sb.context(copy.name).files.read("/root/v"), b"v\n")
        older = sb.contexts.create(unique("copy"), from_context=name, from_version=created.head)
        self.assertEqual(older.head, created.head)
        for c in (copy, older):
            sb.contexts.delete(c.name)
        sb.contexts.delete(name)
        with self.assertRaises(NotFoundError):
            sb.contexts.get(name)


if __name__ == "__main__":
    unittest.main()


class ExportImportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("export"))
        self.copy = self.sb.context(unique("imported"))

    def tearDown(self) -> None:
        drop(self.ctx)
        drop(self.copy)

    def test_an_archive_round_trip_keeps_version_ids_and_files(self) -> None:
        import io
        import tempfile

        first = self.ctx.exec("echo one > /root/n")
        second = self.ctx.exec("echo two > /root/n")
        with tempfile.TemporaryDirectory() as d:
            path = f"{d}/ctx.sbx"
            self.sb.contexts.export(self.ctx.name, path, history=True)
            made = self.sb.contexts.import_archive(path, as_name=self.copy.name)
        self.assertEqual((made.name, made.head), (self.copy.name, second.version))
        self.assertIn(first.version, [v.id for v in self.copy.versions()])
        self.assertEqual(self.copy.files.read_text("/root/n"), "two\n")
        # Into a binary file; a second import under a taken name is refused.
        buf = io.BytesIO()
        self.sb.contexts.export(self.ctx.name, buf)
        with self.assertRaises(AlreadyExistsError):
            self.sb.contexts.import_archive(buf.getvalue(), as_name=self.copy.name)
