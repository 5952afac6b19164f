/*
 * sbx-store's btrfs commands (store.c dispatches to them; `sbx-store serve` runs them too): a
 * scratch subvolume made, and its disk limit set, by ioctl, instead of two runs of btrfs-progs
 * (each ~7 ms of CPU on a small VM, mostly loading its libraries).
 *
 *   sbx-store scratch DIR ROOTID LIMIT_MB
 *       Creates the subvolume DIR (its parent must exist on btrfs) holding `tree/` (owned by
 *       ROOTID, the sandboxes' root), `work/` and `merged/`; a LIMIT_MB above 0 limits what the
 *       subvolume refers to (its qgroup's max_rfer, as `btrfs qgroup limit` does).
 *
 *   sbx-store limit DIR LIMIT_MB
 *       Sets the limit of subvolume DIR.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"

int store_scratch(int argc, char **argv);
int store_limit(int argc, char **argv);

/* What went wrong, into err (the caller's, errlen bytes); returns 1. */
#define fail(what, path) (snprintf(err, errlen, "%s %s: %s", (what), (path), strerror(errno)), 1)


/** A whole number (an id, a count of MiB) from its decimal text, or -1. */
long long whole(const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  return errno || *s == '\0' || *end != '\0' || v < 0 || v > (1LL << 40) ? -1 : v;
}

static int set_limit(int fd, long long limit_mb, const char *dir, char *err, size_t errlen) {
  struct btrfs_ioctl_qgroup_limit_args args;
  memset(&args, 0, sizeof args);
  args.qgroupid = 0; /* the subvolume fd is in */
  args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  args.lim.max_rfer = (unsigned long long)limit_mb << 20;
  return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &args) == 0 ? 0 : fail("qgroup limit", dir);
}

/* Splits DIR into its parent (into parent, 4096 bytes) and the subvolume's name in args; 0, or 1 with err. */
static int subvol_args(const char *dir, char *parent, struct btrfs_ioctl_vol_args *args, char *err, size_t errlen) {
  const char *slash = strrchr(dir, '/');
  const char *name = slash ? slash + 1 : dir;
  if (!slash) strcpy(parent, ".");
  else if (slash == dir) strcpy(parent, "/");
  else snprintf(parent, 4096, "%.*s", (int)(slash - dir), dir);
  memset(args, 0, sizeof *args);
  if (strlen(name) > BTRFS_PATH_NAME_MAX || !*name || !strcmp(name, ".") || !strcmp(name, "..")) {
    errno = EINVAL;
    return fail("subvolume name", dir);
  }
  strcpy(args->name, name);
  return 0;
}

int delete_subvolume(const char *dir, char *err, size_t errlen) {
  char parent[4096];
  struct btrfs_ioctl_vol_args args;
  if (subvol_args(dir, parent, &args, err, errlen) != 0) return 1;
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return fail("open", parent);
  int r = ioctl(pfd, BTRFS_IOC_SNAP_DESTROY, &args) != 0 ? fail("subvolume delete", dir) : 0;
  close(pfd);
  return r;
}

int make_scratch(const char *dir, long long root_id, long long limit_mb, char *err, size_t errlen) {
  if (root_id < 0 || root_id >= 0xffffffffLL || limit_mb < 0) { snprintf(err, errlen, "scratch: bad ROOTID or LIMIT_MB"); return 2; }
  char parent[4096];
  struct btrfs_ioctl_vol_args args;
  if (subvol_args(dir, parent, &args, err, errlen) != 0) return 1;
  const char *name = args.name;
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return fail("open", parent);
  if (ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &args) != 0) { int r = fail("subvolume create", dir); close(pfd); return r; }
  int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = fd < 0 ? fail("open", dir)
    : mkdirat(fd, "tree", 0755) != 0 ? fail("mkdir tree in", dir)
    : fchownat(fd, "tree", (uid_t)root_id, (gid_t)root_id, AT_SYMLINK_NOFOLLOW) != 0 ? fail("chown tree in", dir)
    : mkdirat(fd, "work", 0755) != 0 ? fail("mkdir work in", dir)
    : mkdirat(fd, "merged", 0755) != 0 ? fail("mkdir merged in", dir)
    : limit_mb > 0 ? set_limit(fd, limit_mb, dir, err, errlen) : 0;
  if (fd >= 0) close(fd);
  /* A scratch half made is no scratch: the subvolume goes again. */
  if (r != 0 && ioctl(pfd, BTRFS_IOC_SNAP_DESTROY, &args) != 0) {
    size_t n = strlen(err);
    snprintf(err + n, errlen - n, "; then subvolume delete %s: %s", dir, strerror(errno));
  }
  close(pfd);
  return r;
}

int store_scratch(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "sbx-store scratch DIR ROOTID LIMIT_MB\n"); return 2; }
  char err[4200];
  int r = make_scratch(argv[0], whole(argv[1]), whole(argv[2]), err, sizeof err);
  if (r != 0) fprintf(stderr, "sbx-store: %s\n", err);
  return r;
}

int limit_subvolume(const char *dir, long long limit_mb, char *err, size_t errlen) {
  if (limit_mb <= 0) { snprintf(err, errlen, "limit: bad LIMIT_MB"); return 2; }
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail("open", dir);
  /* On any other directory the limit would fall on the subvolume holding it (the whole store). */
  struct stat st;
  int r = fstat(fd, &st) != 0 ? fail("stat", dir)
    : st.st_ino != SUBVOL_ROOT_INO ? (errno = ENOTDIR, fail("not a subvolume:", dir))
    : set_limit(fd, limit_mb, dir, err, errlen);
  close(fd);
  return r;
}

int store_limit(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "sbx-store limit DIR LIMIT_MB\n"); return 2; }
  char err[4200];
  int r = limit_subvolume(argv[0], whole(argv[1]), err, sizeof err);
  if (r != 0) fprintf(stderr, "sbx-store: %s\n", err);
  return r;
}
