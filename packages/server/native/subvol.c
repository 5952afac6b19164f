/*
 * sbx-store's btrfs commands (store.c dispatches to them): a scratch subvolume made, and its disk
 * limit set, by ioctl in one short process, instead of two runs of btrfs-progs (each ~7 ms of CPU
 * on a small VM, mostly loading its libraries).
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
#include <libgen.h>
#include <linux/btrfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

int store_scratch(int argc, char **argv);
int store_limit(int argc, char **argv);

static int fail(const char *what, const char *path) {
  fprintf(stderr, "sbx-store: %s %s: %s\n", what, path, strerror(errno));
  return 1;
}

/* A subvolume's root directory always has this inode number (BTRFS_FIRST_FREE_OBJECTID). */
enum { SUBVOL_ROOT_INO = 256 };

/** A whole number (an id, a count of MiB) from its decimal text, or -1. */
static long long whole(const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  return errno || *s == '\0' || *end != '\0' || v < 0 || v > (1LL << 40) ? -1 : v;
}

static int set_limit(int fd, long long limit_mb, const char *dir) {
  struct btrfs_ioctl_qgroup_limit_args args;
  memset(&args, 0, sizeof args);
  args.qgroupid = 0; /* the subvolume fd is in */
  args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  args.lim.max_rfer = (unsigned long long)limit_mb << 20;
  return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &args) == 0 ? 0 : fail("qgroup limit", dir);
}

int store_scratch(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "sbx-store scratch DIR ROOTID LIMIT_MB\n"); return 2; }
  const char *dir = argv[0];
  long long root_id = whole(argv[1]), limit_mb = whole(argv[2]);
  if (root_id < 0 || root_id >= 0xffffffffLL || limit_mb < 0) { fprintf(stderr, "sbx-store scratch: bad ROOTID or LIMIT_MB\n"); return 2; }
  char *a = strdup(dir), *b = strdup(dir);
  if (!a || !b) return fail("memory for", dir);
  const char *parent = dirname(a), *name = basename(b);
  struct btrfs_ioctl_vol_args args;
  memset(&args, 0, sizeof args);
  if (strlen(name) > BTRFS_PATH_NAME_MAX || !strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "/")) {
    errno = EINVAL;
    return fail("subvolume name", dir);
  }
  strcpy(args.name, name);
  int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return fail("open", parent);
  if (ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &args) != 0) return fail("subvolume create", dir);
  int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int r = fd < 0 ? fail("open", dir)
    : mkdirat(fd, "tree", 0755) != 0 ? fail("mkdir tree in", dir)
    : fchownat(fd, "tree", (uid_t)root_id, (gid_t)root_id, AT_SYMLINK_NOFOLLOW) != 0 ? fail("chown tree in", dir)
    : mkdirat(fd, "work", 0755) != 0 ? fail("mkdir work in", dir)
    : mkdirat(fd, "merged", 0755) != 0 ? fail("mkdir merged in", dir)
    : limit_mb > 0 ? set_limit(fd, limit_mb, dir) : 0;
  if (fd >= 0) close(fd);
  /* A scratch half made is no scratch: the subvolume goes again. */
  if (r != 0 && ioctl(pfd, BTRFS_IOC_SNAP_DESTROY, &args) != 0) fail("subvolume delete", dir);
  close(pfd);
  return r;
}

int store_limit(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "sbx-store limit DIR LIMIT_MB\n"); return 2; }
  long long limit_mb = whole(argv[1]);
  if (limit_mb <= 0) { fprintf(stderr, "sbx-store limit: bad LIMIT_MB\n"); return 2; }
  int fd = open(argv[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail("open", argv[0]);
  /* On any other directory the limit would fall on the subvolume holding it (the whole store). */
  struct stat st;
  if (fstat(fd, &st) != 0) return fail("stat", argv[0]);
  if (st.st_ino != SUBVOL_ROOT_INO) { errno = ENOTDIR; return fail("not a subvolume:", argv[0]); }
  int r = set_limit(fd, limit_mb, argv[0]);
  close(fd);
  return r;
}
