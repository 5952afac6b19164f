"""Files straight from the layer store: read, write, list, stat, delete, upload_tar, open with a range."""

from __future__ import annotations

import io
import tarfile
import unittest

from _support import client, drop, unique

from shellbase import DirEntry, FileStat, InvalidArgumentError, NotFoundError


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o640
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class FilesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("files"))
        self.ctx.exec("true")

    def tearDown(self) -> None:
        drop(self.ctx)

    def test_write_read_list_stat_delete(self) -> None:
        v1 = self.ctx.files.write("/notes/a b.txt", "first\n", mode=0o600)
        self.assertEqual(self.ctx.info().head, v1)
        self.assertEqual(self.ctx.files.read("/notes/a b.txt"), b"first\n")
        self.assertEqual(self.ctx.files.read_text("notes/a b.txt"), "first\n", "relative paths are from the root")
        self.assertEqual(self.ctx.files.read("/notes/../notes/./a b.txt"), b"first\n", "dot segments resolve on the server")
        self.assertEqual(self.ctx.exec("cat '/notes/a b.txt'").stdout, "first\n", "queries see the write")

        entries = self.ctx.files.list("/notes")
        self.assertEqual([(e.name, e.type, e.mode) for e in entries], [("a b.txt", "file", 0o600)])
        self.assertIsInstance(entries[0], DirEntry)
        stat = self.ctx.files.stat("/notes/a b.txt")
        self.assertIsInstance(stat, FileStat)
        self.assertEqual((stat.type, stat.size, stat.mode), ("file", 6, 0o600))
        self.assertEqual(self.ctx.files.stat("/notes").type, "dir")

        binary = bytes(range(256)) * 300  # larger than one read, every byte value
        v2 = self.ctx.files.write("/notes/blob", binary)
        self.assertEqual(self.ctx.files.read("/notes/blob"), binary)
        self.ctx.files.write("/notes/stream", io.BytesIO(b"from a file object"))
        self.assertEqual(self.ctx.files.read("/notes/stream"), b"from a file object")

        self.assertEqual(self.ctx.files.read("/notes/a b.txt", version=v1), b"first\n")
        with self.assertRaises(NotFoundError):
            self.ctx.files.read("/notes/blob", version=v1)
        self.assertEqual(self.ctx.at(v2).files.read("/notes/blob"), binary)

        with self.assertRaises(InvalidArgumentError) as caught:
            self.ctx.files.delete("/notes")
        self.assertIn("recursive", str(caught.exception))
        v3 = self.ctx.files.delete("/notes/a b.txt")
        with self.assertRaises(NotFoundError):
            self.ctx.files.stat("/notes/a b.txt")
        self.assertEqual(self.ctx.info().head, v3)
        self.ctx.files.delete("/notes", recursive=True)
        with self.assertRaises(NotFoundError):
            self.ctx.files.list("/notes")

    def test_open_streams_and_reads_a_range(self) -> None:
        self.ctx.files.write("/data/letters", b"abcdefghij" * 10_000)
        with self.ctx.files.open("/data/letters", range=(1, 3)) as part:
            self.assertEqual(part.status, 206)
            self.assertEqual(part.read(), b"bcd")
        with self.ctx.files.open("/data/letters") as whole:
            self.assertEqual(whole.headers["x-shellbase-version"], self.ctx.info().head)
            chunks = []
            while chunk := whole.read(4096):
                chunks.append(chunk)
        self.assertEqual(b"".join(chunks), b"abcdefghij" * 10_000)

    def test_upload_tar(self) -> None:
        archive = tar_of({"app/main.py": b"print('hi')\n", "app/lib/util.py": b"X = 1\n"})
        version = self.ctx.files.upload_tar("/srv", archive)
        self.assertEqual(self.ctx.info().head, version)
        self.assertEqual(self.ctx.files.read("/srv/app/main.py"), b"print('hi')\n")
        self.assertEqual(self.ctx.files.stat("/srv/app/lib/util.py").mode, 0o640)
        self.assertEqual(self.ctx.exec("python3 /srv/app/main.py").stdout, "hi\n")
        self.ctx.files.upload_tar("/srv2", io.BytesIO(archive))
        self.assertEqual(sorted(e.name for e in self.ctx.files.list("/srv2/app")), ["lib", "main.py"])
        with self.assertRaises(InvalidArgumentError):
            self.ctx.files.upload_tar("/bad", b"this is not a tar archive" * 100)


if __name__ == "__main__":
    unittest.main()
