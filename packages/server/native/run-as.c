/*
 * sbx-user: runs a program as one of the image's users, as a Dockerfile's
 * USER does. Built static, it is bind-mounted into the sandbox (below its
 * private /tmp) and runs first, as the sandbox's root.
 *
 *   sbx-user UID GID GROUPS -- PROGRAM ARGS...
 *
 * GROUPS is a comma-separated list of supplementary group ids, or `-` for
 * none. Sets them, then the real, effective and saved gid and uid (so the
 * program keeps no capability), and execs PROGRAM, searched on PATH. Exit code
 * 125 means it could not (the sandbox's set-up failed, not the program).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_GROUPS 64

static int fail(const char *what) {
  fprintf(stderr, "sbx-user: %s: %s\n", what, strerror(errno));
  return 125;
}

static int parse_id(const char *s, unsigned *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *s == '\0' || *end != '\0' || v > 65535) return -1;
  *out = (unsigned)v;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 6 || strcmp(argv[4], "--") != 0) {
    fprintf(stderr, "usage: sbx-user UID GID GROUPS -- PROGRAM ARGS...\n");
    return 125;
  }
  unsigned uid, gid;
  if (parse_id(argv[1], &uid) || parse_id(argv[2], &gid)) { errno = EINVAL; return fail("uid or gid"); }
  gid_t groups[MAX_GROUPS];
  size_t n = 0;
  if (strcmp(argv[3], "-") != 0) {
    char *list = argv[3];
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
      unsigned g;
      if (n == MAX_GROUPS || parse_id(tok, &g)) { errno = EINVAL; return fail("groups"); }
      groups[n++] = g;
    }
  }
  if (setgroups(n, groups) != 0) return fail("setgroups");
  if (setresgid(gid, gid, gid) != 0) return fail("setresgid");
  if (setresuid(uid, uid, uid) != 0) return fail("setresuid");
  /* A change of credentials clears the parent-death signal: ask for it again. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return fail("prctl");
  execvp(argv[5], &argv[5]);
  fprintf(stderr, "sbx-user: %s: %s\n", argv[5], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
