"""Admin calls: tenants and their keys, usage, garbage collection, and the raw request escape hatch."""

from __future__ import annotations

import unittest

from _support import URL, client, unique, wait_for

from shellbase import ApiKey, BackupResult, ForbiddenError, GcResult, InvalidArgumentError, Shellbase, Tenant, UnauthorizedError, Usage


class TenantsTest(unittest.TestCase):
    def test_tenants_keys_rotation_and_revocation(self) -> None:
        admin = client()
        name = unique("tenant")
        created = admin.tenants.create(name, {"contexts": 5, "concurrent_queries": 3})
        self.assertIsInstance(created.tenant, Tenant)
        self.assertEqual((created.tenant.name, created.tenant.admin), (name, False))
        self.assertEqual(created.tenant.quotas, {"contexts": 5, "concurrentQueries": 3}, "snake_case quota names are sent as the API's")
        self.assertTrue(created.api_key.startswith("sb_"), "the key is shown once, here")
        listed = {t.name: t for t in admin.tenants.list()}
        self.assertIn(name, listed)
        self.assertTrue(listed["admin"].admin)

        first = Shellbase(URL, created.api_key)
        first.context("work").exec("echo tenant > /root/t")
        rotated = admin.tenants.create_key(name)
        self.assertIsInstance(rotated.key, ApiKey)
        self.assertIsNone(rotated.key.revoked_at)
        second = Shellbase(URL, rotated.api_key)
        self.assertEqual(second.context("work").files.read("/root/t"), b"tenant\n", "both keys reach the tenant's data")

        keys = admin.tenants.list_keys(name)
        self.assertEqual(len(keys), 2)
        self.assertIn(rotated.key.id, [k.id for k in keys])
        old = next(k for k in keys if k.id != rotated.key.id)
        admin.tenants.revoke_key(name, old.id)
        with self.assertRaises(UnauthorizedError):
            first.contexts.list()
        self.assertEqual([c.name for c in second.contexts.list()], ["work"])
        self.assertIsNotNone(next(k for k in admin.tenants.list_keys(name) if k.id == old.id).revoked_at)
        with self.assertRaises(ForbiddenError):
            second.tenants.create(unique("nope"))

        # Usage: the tenant sees its own; the admin names the tenant.
        own = second.usage(group_by="context")
        self.assertIsInstance(own, Usage)
        self.assertEqual([(i.key, i.queries) for i in own.items], [("work", 1)])
        self.assertEqual(own.total.queries, 1)
        self.assertGreater(own.total.bytes_stored, 0)
        by_admin = admin.usage(tenant=name, group_by="kind")
        self.assertEqual([(i.key, i.queries) for i in by_admin.items], [("query", 1)])
        self.assertEqual(admin.usage(tenant=name, from_="2000-01-01T00:00:00Z", to="2000-01-02T00:00:00Z").total.queries, 0)
        with self.assertRaises(ForbiddenError):
            second.usage(tenant="admin")

        admin.tenants.revoke(name)
        with self.assertRaises(UnauthorizedError):
            second.contexts.list()
        self.assertTrue(all(k.revoked_at for k in admin.tenants.list_keys(name)))


class AdminTest(unittest.TestCase):
    def test_gc(self) -> None:
        result = client().gc()
        self.assertIsInstance(result, GcResult)
        self.assertGreaterEqual(result.versions_dropped, 0)
        self.assertGreaterEqual(result.ms, 0)

    def test_backup(self) -> None:
        import shutil
        import tempfile

        target = tempfile.mkdtemp(prefix="shellbase-py-backup-")
        try:
            phases: list[str] = []
            result = client().backup(target, keep=1, on_progress=lambda p: phases.append(str(p["phase"])))
            self.assertIsInstance(result, BackupResult)
            self.assertEqual(result.copied, result.layers)
            self.assertIn("metadata", phases)
            again = client().backup(target, keep=1)
            self.assertEqual(again.removed["backups"] if again.removed else None, [result.id])
            with self.assertRaises(InvalidArgumentError):
                client().backup("relative/dir")
        finally:
            shutil.rmtree(target, ignore_errors=True)

    def test_usage_of_the_caller(self) -> None:
        sb = client()
        ctx = sb.context(unique("usage"))
        ctx.exec("echo x > /root/x")
        try:
            item = wait_for("the query's row", lambda: next((i for i in sb.usage(group_by="context").items if i.key == ctx.name), None))
            self.assertEqual(item.queries, 1)
            self.assertGreater(item.wall_ms, 0)
            self.assertGreater(item.bytes_stored, 0)
            self.assertGreaterEqual(sb.usage().total.queries, 1)
        finally:
            ctx.delete()

    def test_request_and_json_reach_any_route(self) -> None:
        sb = client()
        doc = sb.json("GET", "/v1/openapi.json")
        paths = doc.get("paths")
        assert isinstance(paths, dict)
        self.assertIn("/v1/contexts/{name}/exec", paths)
        with sb.request("GET", "/healthz") as res:
            self.assertEqual(res.status, 200)
            self.assertIsInstance(res.json(), dict)


if __name__ == "__main__":
    unittest.main()
