"""Egress policies: a context's own (set, get, clear, inherited by forks), a query's narrowing, a tenant's, and
the audit log. Nothing here reaches past the server: refused connections are refused by name."""

from __future__ import annotations

import unittest

from _support import KEY, URL, client, drop, unique

from shellbase import (
    AllowEgress,
    AsyncShellbase,
    ContextNetwork,
    ForbiddenError,
    InvalidArgumentError,
    NetworkConnection,
    NetworkPolicy,
    Shellbase,
    Tenant,
)

NONE: NetworkPolicy = {"egress": "none"}
PUBLIC: NetworkPolicy = {"egress": "public"}
#: Names under .invalid (RFC 2606) resolve nowhere: the proxy refuses them by the policy alone.
ALLOWED: AllowEgress = {"egress": "allow", "domains": ["api.example.invalid", "*.wild.example.invalid"]}
#: As the server keeps it.
ALLOWED_SORTED: AllowEgress = {"egress": "allow", "domains": sorted(ALLOWED["domains"])}
PROXY_VARIABLES = "env | grep -ci proxy"


class ContextNetworkTest(unittest.TestCase):
    def setUp(self) -> None:
        self.sb = client()
        self.ctx = self.sb.context(unique("net"))
        self.sb.contexts.create(self.ctx.name)

    def tearDown(self) -> None:
        drop(self.ctx)

    def test_set_get_clear_and_forks_inherit(self) -> None:
        before = self.ctx.network.get()
        self.assertIsInstance(before, ContextNetwork)
        self.assertEqual(before, ContextNetwork(policy=None, effective=PUBLIC), "the test server's default is public")
        self.assertIsNone(self.ctx.info().network)

        sorted_domains = ALLOWED_SORTED
        self.assertEqual(self.ctx.network.set(ALLOWED), ContextNetwork(policy=sorted_domains, effective=sorted_domains))
        self.assertEqual(self.ctx.network.get().policy, sorted_domains)
        self.assertEqual(self.ctx.info().network, sorted_domains)
        self.assertEqual(self.sb.contexts.get(self.ctx.name).network, sorted_domains)

        fork = self.ctx.fork(unique("netfork"))
        try:
            self.assertEqual(fork.network.get().policy, sorted_domains, "a fork inherits its context's policy")
            self.assertEqual(fork.network.clear(), ContextNetwork(policy=None, effective=PUBLIC))
            self.assertEqual(self.ctx.network.get().policy, sorted_domains, "clearing the fork's leaves the context's")
        finally:
            drop(fork)

    def test_bad_policies_are_invalid_arguments_that_change_nothing(self) -> None:
        for bad in ({"egress": "allow", "domains": ["*"]}, {"egress": "allow", "domains": []}, {"egress": "everything"}):
            with self.assertRaises(InvalidArgumentError) as caught:
                self.ctx.network.set(bad)  # type: ignore[arg-type]
            self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_argument"), bad)
        with self.assertRaises(InvalidArgumentError):
            self.ctx.exec("true", network={"egress": "allow", "domains": ["*"]})
        self.assertIsNone(self.ctx.network.get().policy)

    def test_a_query_without_egress_has_no_proxy(self) -> None:
        with_egress = self.ctx.exec(PROXY_VARIABLES, commit="never")
        self.assertNotEqual(with_egress.stdout, "0\n", "a query under the default policy has its proxy variables")
        r = self.ctx.exec(PROXY_VARIABLES, commit="never", network=NONE)
        self.assertEqual((r.exit_code, r.stdout), (1, "0\n"), r.stderr)
        self.assertIsNone(r.usage.egress_bytes, "a query without egress has no egress session")
        self.assertIsNone(r.usage.ingress_bytes)
        events = list(self.ctx.exec_stream(PROXY_VARIABLES, commit="never", network=NONE))
        self.assertEqual([(e.type, getattr(e, "data", None)) for e in events[:-1]], [("stdout", "0\n")])

    def test_a_query_may_only_narrow_its_context(self) -> None:
        self.ctx.network.set(NONE)
        self.assertEqual(self.ctx.exec(PROXY_VARIABLES, commit="never").stdout, "0\n")
        with self.assertRaises(ForbiddenError) as caught:
            self.ctx.exec("true", network=PUBLIC)
        self.assertEqual(caught.exception.status, 403)
        self.assertIn("wider than", caught.exception.message)

    def test_the_log_lists_refused_connections_with_their_reason(self) -> None:
        self.assertEqual(self.ctx.network.log(), [], "a new context's log is empty")
        self.ctx.network.set(ALLOWED)
        fetch = "import urllib.request as u\ntry: u.urlopen('http://other.example.invalid/x')\nexcept Exception as e: print(e.code)"
        r = self.ctx.exec(["python3", "-c", fetch], commit="never")
        self.assertEqual(r.stdout, "403\n", r.stderr)
        log = self.ctx.network.log(limit=10)
        self.assertTrue(log and all(isinstance(c, NetworkConnection) for c in log), log)
        refused = next(c for c in log if c.host == "other.example.invalid")
        self.assertEqual((refused.allowed, refused.kind, refused.port), (False, "query", 80))
        self.assertIn("does not allow other.example.invalid", refused.reason or "")


class TenantNetworkTest(unittest.TestCase):
    def test_a_tenants_policy_applies_to_its_contexts(self) -> None:
        admin = client()
        name = unique("nettenant")
        created = admin.tenants.create(name, None, NONE)
        self.assertEqual(created.tenant.network, NONE)
        tenant = Shellbase(URL, created.api_key, timeout=120)
        ctx = tenant.context("work")
        try:
            self.assertEqual(ctx.exec(PROXY_VARIABLES, commit="never").stdout, "0\n")
            with self.assertRaises(ForbiddenError):
                ctx.network.set(PUBLIC)
            widened = admin.tenants.set_network(name, PUBLIC)
            self.assertIsInstance(widened, Tenant)
            self.assertEqual(widened.network, PUBLIC)
            self.assertNotEqual(ctx.exec(PROXY_VARIABLES, commit="never").stdout, "0\n")
            updated = admin.tenants.update(name, {"quotas": {"contexts": 7}})
            self.assertEqual((updated.quotas, updated.network), ({"contexts": 7}, PUBLIC), "what a change leaves out stays")
            self.assertIsNone(admin.tenants.set_network(name, None).network, "None: the server's default again")
            self.assertEqual(next(t for t in admin.tenants.list() if t.name == name).quotas, {"contexts": 7})
        finally:
            admin.tenants.revoke(name)


class AsyncNetworkTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.sb = AsyncShellbase(URL, KEY, timeout=120)
        self.ctx = self.sb.context(unique("anet"))
        await self.sb.contexts.create(self.ctx.name)

    async def asyncTearDown(self) -> None:
        drop(client().context(self.ctx.name))

    async def test_network_round_trip_and_exec_without_egress(self) -> None:
        self.assertEqual(await self.ctx.network.get(), ContextNetwork(policy=None, effective=PUBLIC))
        self.assertEqual(await self.ctx.network.set(NONE), ContextNetwork(policy=NONE, effective=NONE))
        self.assertEqual((await self.ctx.exec(PROXY_VARIABLES, commit="never")).stdout, "0\n")
        self.assertEqual(await self.ctx.network.log(limit=5), [])
        self.assertEqual((await self.ctx.network.clear()).policy, None)
        r = await self.ctx.exec(PROXY_VARIABLES, commit="never", network=NONE)
        self.assertEqual(r.stdout, "0\n")
        events = [e async for e in self.ctx.exec_stream(PROXY_VARIABLES, commit="never", network=NONE)]
        self.assertEqual(getattr(events[0], "data", None), "0\n")
        with self.assertRaises(InvalidArgumentError):
            await self.ctx.network.set({"egress": "allow", "domains": ["*"]})


if __name__ == "__main__":
    unittest.main()
