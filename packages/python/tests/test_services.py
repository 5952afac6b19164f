"""Services: define one, wake it through its gateway URL, read its logs, stop it, delete it."""

from __future__ import annotations

import unittest
import urllib.request

from _support import client, drop, unique, wait_for

from shellbase import AlreadyExistsError, NotFoundError, Service


class ServicesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("svc"))
        self.ctx.files.write("/srv/www/index.html", "hello from a service\n")

    def tearDown(self) -> None:
        drop(self.ctx)

    def test_define_wake_logs_stop_delete(self) -> None:
        services = self.ctx.services
        web = services.create("web", "cd /srv/www && exec python3 -m http.server 8000", 8000, idle_timeout_ms=60_000,
                              env={"PYTHONUNBUFFERED": "1"}, limits={"memory_mb": 256})
        self.assertIsInstance(web, Service)
        self.assertEqual((web.name, web.context, web.port, web.state), ("web", self.ctx.name, 8000, "sleeping"))
        self.assertTrue(web.path_url.startswith("http://127.0.0.1:"), web.path_url)
        self.assertRegex(web.url, r"^http://[a-z0-9]+\.localhost:\d+/$")
        self.assertEqual([s.name for s in services.list()], ["web"])
        with self.assertRaises(AlreadyExistsError):
            services.create("web2", ["python3", "-m", "http.server", "8000"], 8000)  # the port is taken in this context

        # The first request wakes it and is held until the port opens.
        with urllib.request.urlopen(f"{web.path_url}index.html", timeout=60) as res:
            self.assertEqual(res.status, 200)
            self.assertEqual(res.read(), b"hello from a service\n")
        self.assertEqual(services.get("web").state, "running")

        def logged() -> str | None:
            text = services.logs("web")
            return text if "GET /index.html" in text else None

        logs = wait_for("the request in the service's log", logged)
        self.assertIn("--- shellbase:", logs)
        self.assertLessEqual(len(services.logs("web", tail=1).splitlines()), 1)

        stopped = services.stop("web")
        self.assertEqual(stopped.state, "sleeping")

        # The run is metered: its wall time, and of it the time it was serving (the start and the request).
        def metered() -> object:
            item = next((i for i in self.sb.usage(group_by="context").items if i.key == self.ctx.name), None)
            return item if item is not None and item.service_seconds > 0 else None

        item = wait_for("the service run's usage row", metered)
        self.assertGreater(item.service_active_seconds, 0)
        self.assertLessEqual(item.service_active_seconds, item.service_seconds)
        services.delete("web")
        with self.assertRaises(NotFoundError):
            services.get("web")
        self.assertEqual(services.list(), [])


if __name__ == "__main__":
    unittest.main()
