/*
 * Users and groups from /etc/passwd and /etc/group, read with fgetpwent and
 * fgetgrent: the binary is static, so the NSS modules getpwnam would load are
 * out of reach (and a guest's files are all there is to ask).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "spawner.h"

static void fill(const struct passwd *pw, struct user_info *u) {
  u->uid = pw->pw_uid;
  u->gid = pw->pw_gid;
  snprintf(u->name, sizeof u->name, "%s", pw->pw_name);
  snprintf(u->home, sizeof u->home, "%s", pw->pw_dir && pw->pw_dir[0] ? pw->pw_dir : "/");
  snprintf(u->shell, sizeof u->shell, "%s", pw->pw_shell && pw->pw_shell[0] ? pw->pw_shell : "/bin/sh");
}

/* The entry NAME (or, NAME null, the one of UID); -1 with ENOENT when there is none. */
static int find(const char *name, uid_t uid, struct user_info *u) {
  FILE *f = fopen("/etc/passwd", "re");
  if (!f) return -1;
  struct passwd *pw;
  int found = 0;
  while (!found && (pw = fgetpwent(f))) {
    if (name ? strcmp(pw->pw_name, name) == 0 : pw->pw_uid == uid) { fill(pw, u); found = 1; }
  }
  fclose(f);
  if (!found) { errno = ENOENT; return -1; }
  return 0;
}

int user_by_name(const char *name, struct user_info *u) { return find(name, 0, u); }
int user_by_uid(uid_t uid, struct user_info *u) { return find(NULL, uid, u); }

const char *group_name(gid_t gid, char *buf, size_t len) {
  snprintf(buf, len, "%u", (unsigned)gid);
  FILE *f = fopen("/etc/group", "re");
  if (!f) return buf;
  struct group *g;
  while ((g = fgetgrent(f))) if (g->gr_gid == gid) { snprintf(buf, len, "%s", g->gr_name); break; }
  fclose(f);
  return buf;
}

int become_user(const char *name, struct user_info *u) {
  if (find(name, 0, u) != 0) return -1;
  gid_t groups[256];
  size_t n = 0;
  groups[n++] = u->gid;
  FILE *f = fopen("/etc/group", "re");
  if (f) {
    struct group *g;
    while ((g = fgetgrent(f)) && n < 256) {
      if (g->gr_gid == u->gid) continue;
      for (char **m = g->gr_mem; m && *m; m++) if (strcmp(*m, name) == 0) { groups[n++] = g->gr_gid; break; }
    }
    fclose(f);
  }
  if (setgroups(n, groups) != 0 || setgid(u->gid) != 0 || setuid(u->uid) != 0) return -1;
  return 0;
}
