"""Error mapping: every API error code has its class, with message, hint and details; connection failures say where."""

from __future__ import annotations

import os
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from _support import KEY, URL, client, closed_port, drop, unique

from shellbase import (
    AlreadyExistsError,
    ConflictError,
    FailedPreconditionError,
    ForbiddenError,
    InternalError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    QuotaError,
    Shellbase,
    ShellbaseConnectionError,
    ShellbaseError,
    UnauthorizedError,
    UnavailableError,
)
from shellbase.errors import ERROR_CLASSES, error_from_body

STATUS = {
    "invalid_argument": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404, "already_exists": 409, "conflict": 409,
    "payload_too_large": 413, "limit_exceeded": 429, "failed_precondition": 412, "unavailable": 503, "internal": 500,
}


class ErrorMappingTest(unittest.TestCase):
    def test_every_code_has_its_class(self) -> None:
        self.assertEqual(set(ERROR_CLASSES), set(STATUS), "the codes of packages/protocol/src/errors.ts")
        for code, status in STATUS.items():
            err = error_from_body({"code": code, "message": "m", "hint": "h", "details": {"paths": ["/a"]}}, status)
            self.assertIs(type(err), ERROR_CLASSES[code])
            self.assertEqual((err.code, err.status, err.message, err.hint, err.details), (code, status, "m", "h", {"paths": ["/a"]}))
            self.assertEqual(str(err), "m (h)")
        self.assertIs(QuotaError, LimitExceededError)
        unknown = error_from_body({"code": "from_the_future", "message": "m"}, 500)
        self.assertIsInstance(unknown, InternalError)

    def test_server_errors_arrive_typed_with_hints_and_details(self) -> None:
        sb = client()
        with self.assertRaises(NotFoundError) as nf:
            sb.contexts.get(unique("missing"))
        self.assertEqual((nf.exception.status, nf.exception.code), (404, "not_found"))
        self.assertIn("does not exist", nf.exception.message)

        with self.assertRaises(InvalidArgumentError) as bad:
            sb.context(unique("bad")).exec("true", timeout_ms=-5)
        self.assertEqual(bad.exception.status, 400)
        self.assertIsNotNone(bad.exception.hint)
        self.assertIn("timeoutMs", bad.exception.hint or "")
        self.assertIn(bad.exception.hint or "", str(bad.exception))

        name = unique("dup")
        sb.contexts.create(name)
        try:
            with self.assertRaises(AlreadyExistsError):
                sb.contexts.create(name)
        finally:
            sb.contexts.delete(name)

        with self.assertRaises(NotFoundError):
            sb.machines.get("m_does_not_exist").info()
        with self.assertRaises(UnauthorizedError) as unauth:
            Shellbase(URL, "sb_not_a_key").contexts.list()
        self.assertEqual(unauth.exception.status, 401)
        with self.assertRaises(FailedPreconditionError) as pre:
            sb.tenants.create_key("admin")  # the admin's own key lives in admin.key
        self.assertEqual(pre.exception.status, 412)
        self.assertIsInstance(pre.exception, ShellbaseError)

    def test_quota_and_forbidden_for_a_tenant(self) -> None:
        admin = client()
        tenant = unique("quota")
        created = admin.tenants.create(tenant, {"contexts": 1})
        try:
            sb = Shellbase(URL, created.api_key)
            sb.context("first").exec("true")
            with self.assertRaises(QuotaError) as over:
                sb.context("second").exec("true")
            self.assertEqual((over.exception.status, over.exception.quota), (429, "contexts"))
            self.assertEqual(over.exception.details.get("limit"), 1)
            self.assertIsNotNone(over.exception.hint)
            with self.assertRaises(ForbiddenError):
                sb.tenants.list()
            admin_ctx = admin.context(unique("admins"))
            admin_ctx.exec("true")
            try:
                with self.assertRaises(NotFoundError, msg="another tenant's context is not found, never forbidden"):
                    sb.context(admin_ctx.name).info()
            finally:
                admin_ctx.delete()
        finally:
            admin.tenants.revoke(tenant)

    def test_conflict_error_carries_paths_and_version(self) -> None:
        err = error_from_body({"code": "conflict", "message": "m", "details": {"paths": ["/x"], "version": "v_1"}}, 409)
        assert isinstance(err, ConflictError)
        self.assertEqual((err.paths, err.version), (["/x"], "v_1"))


class ConnectionTest(unittest.TestCase):
    def test_a_refused_connection_names_the_url_and_the_option(self) -> None:
        url = f"http://127.0.0.1:{closed_port()}"
        with self.assertRaises(ShellbaseConnectionError) as caught:
            Shellbase(url, "k").contexts.list()
        err = caught.exception
        self.assertIsInstance(err, UnavailableError)
        self.assertIsInstance(err, ConnectionError)
        self.assertIn(f"cannot reach the shellbase server at {url} (from the url option)", err.message)
        self.assertIn("ECONNREFUSED", err.message)
        self.assertEqual(err.details, {"url": url, "source": "the url option"})
        self.assertEqual(err.hint, "check the url option")

    def test_the_url_from_the_environment_is_named_so(self) -> None:
        url = f"http://127.0.0.1:{closed_port()}"
        with mock.patch.dict(os.environ, {"SHELLBASE_URL": url}):
            sb = Shellbase(api_key="k")
            self.assertEqual((sb.url, sb.url_source), (url, "SHELLBASE_URL"))
            with self.assertRaises(ShellbaseConnectionError) as caught:
                sb.context("x").exec("true")
        self.assertIn(f"at {url} (from SHELLBASE_URL)", str(caught.exception))
        self.assertIn("SHELLBASE_URL names a running shellbase server", caught.exception.hint or "")

    def test_the_default_url(self) -> None:
        with mock.patch.dict(os.environ, {"SHELLBASE_URL": ""}):
            sb = Shellbase(api_key="k")
        self.assertEqual((sb.url, sb.url_source), ("http://127.0.0.1:7070", "the default"))
        with self.assertRaises(InvalidArgumentError):
            Shellbase("ftp://example", "k")

    def test_the_key_comes_from_the_environment_then_the_admin_key_file(self) -> None:
        with mock.patch.dict(os.environ, {"SHELLBASE_URL": URL, "SHELLBASE_API_KEY": KEY}):
            self.assertIsInstance(Shellbase().contexts.list(), list)
        with tempfile.TemporaryDirectory() as home:
            Path(home, "admin.key").write_text(KEY + "\n")
            with mock.patch.dict(os.environ, {"SHELLBASE_URL": URL, "SHELLBASE_API_KEY": "", "SHELLBASE_HOME": home}):
                sb = Shellbase()
                ctx = sb.context(unique("keyfile"))
                self.assertEqual(ctx.exec("echo ok").stdout, "ok\n")
                drop(ctx)
            with mock.patch.dict(os.environ, {"SHELLBASE_URL": URL, "SHELLBASE_API_KEY": "", "SHELLBASE_HOME": os.path.join(home, "none")}):
                with self.assertRaises(UnauthorizedError):
                    Shellbase().contexts.list()


if __name__ == "__main__":
    unittest.main()
