/*
 * sbx views --dir DIR: read-only views of mounted contexts' versions, for warm sandboxes
 * (runtime/bwrap/views.ts drives it; warm-mount.c binds them).
 *
 * A view is a version's layers mounted once as a read-only overlay (the options of a read-only
 * `--overlay`: sbx.c) at DIR/KEY, in a mount namespace of this process's own: the host's mount
 * table never holds it, and this process's end (it dies with its parent) takes every view with
 * it. A warm sandbox's outer enters this namespace, clones the view (open_tree) and attaches the
 * clone in the sandbox: a clone costs less than an overlay's set-up and tear-down per sandbox.
 * The namespace is the host's as a slave: later host mounts (a store mounted again) reach it.
 *
 * Commands on stdin, one a line, fields separated by tabs; one answer each on stdout:
 *   m KEY CHDIR LOWER   mount LOWER (paths relative to CHDIR) at DIR/KEY   ->  ok m KEY | err m KEY WHY
 *   u KEY               unmount DIR/KEY and remove it                      ->  ok u KEY | err u KEY WHY
 * KEY is 1-64 characters of [0-9a-f]. Standard input's end ends the process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static int good_key(const char *k) {
  size_t n = strlen(k);
  if (n == 0 || n > 64) return 0;
  for (size_t i = 0; i < n; i++) if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'f'))) return 0;
  return 1;
}

static void answer(const char *cmd, const char *key, int err) {
  if (err) printf("err %s %s %s\n", cmd, key, strerror(err));
  else printf("ok %s %s\n", cmd, key);
  fflush(stdout);
}

static int mount_view(const char *at, const char *chdir_to, const char *lower) {
  static char opts[16384];
  if (strchr(lower, ',') || (size_t)snprintf(opts, sizeof opts, "lowerdir=%s,redirect_dir=off,index=off,metacopy=off", lower) >= sizeof opts) return EINVAL;
  if (mkdir(at, 0700) != 0 && errno != EEXIST) return errno;
  if (chdir(chdir_to) != 0) return errno;
  int r = mount("overlay", at, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts) == 0 ? 0 : errno;
  if (chdir("/") != 0 && !r) r = errno;
  if (r) rmdir(at);
  return r;
}

int cmd_views(int argc, char **argv) {
  if (argc != 2 || strcmp(argv[0], "--dir") != 0 || argv[1][0] != '/') { fprintf(stderr, "sbx views --dir DIR\n"); return 125; }
  const char *dir = argv[1];
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1) return 125;
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) { perror("sbx views: mount namespace"); return 125; }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) { perror(dir); return 125; }
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, stdin)) > 0) {
    if (line[n - 1] == '\n') line[n - 1] = '\0';
    char *f[4] = {0};
    int nf = 0;
    for (char *p = line, *tab; nf < 4 && p; p = tab ? tab + 1 : NULL) {
      tab = strchr(p, '\t');
      if (tab) *tab = '\0';
      f[nf++] = p;
    }
    const char *key = nf > 1 ? f[1] : "-";
    const char *cmd = strcmp(f[0], "m") == 0 || strcmp(f[0], "u") == 0 ? f[0] : "-";
    if (nf < 2 || !good_key(key)) { answer(cmd, key, EINVAL); continue; }
    char at[4096];
    if ((size_t)snprintf(at, sizeof at, "%s/%s", dir, key) >= sizeof at) { answer(cmd, key, ENAMETOOLONG); continue; }
    if (cmd[0] == 'm' && nf == 4) answer(cmd, key, mount_view(at, f[2], f[3]));
    else if (cmd[0] == 'u' && nf == 2) {
      int r = umount2(at, MNT_DETACH) == 0 ? 0 : errno;
      rmdir(at);
      answer(cmd, key, r);
    } else answer(cmd, key, EINVAL);
  }
  free(line);
  return 0;
}
