"""The code interpreter server (E2B protocol) that runs inside a sandbox; see README.md."""
