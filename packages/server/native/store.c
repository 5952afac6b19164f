/*
 * sbx-store: the native helper of shellbase's snapshotter (store/snapshotter/btrfs). Store
 * commands only: it never starts a sandbox (that is `sbx`, the runtime's helper).
 *
 *   sbx-store shift DIR OFFSET
 *       Adds OFFSET to every uid and gid below 65536 under DIR (DIR included),
 *       keeping set-id bits; ids already shifted stay, so it can run again.
 *
 *   sbx-store scan DIR
 *       Prints every entry under DIR (an overlay upper directory or layer) as
 *       "TYPE SIZE PATH\0": f file, d directory, O opaque directory, l symlink,
 *       w whiteout, o other. PATH is relative to DIR.
 *
 *   sbx-store apply SRC DST
 *       Applies layer SRC onto the directory DST the way overlayfs would stack
 *       SRC above it, keeping whiteouts and opaque markers (DST stays a layer
 *       in overlay format). Files are reflinked where the file system allows.
 *
 *   sbx-store copy SRC DST
 *       Copies a sparse file keeping its holes, in two threads (copy.c).
 *
 *   sbx-store scratch DIR ROOTID LIMIT_MB, sbx-store limit DIR LIMIT_MB
 *       A scratch subvolume made, and its disk limit set, by ioctl (subvol.c).
 *
 *   sbx-store serve
 *       Makes, limits, scans, clears, syncs and deletes scratches on request, a thread each,
 *       without a process each (serve.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <ftw.h>
#include <grp.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "store.h"



static void die(const char *what) {
  fprintf(stderr, "sbx-store: %s: %s\n", what, strerror(errno));
  exit(125);
}

static unsigned long shift_offset;

static int shift_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag; (void)ftw;
  if (st->st_uid >= 65536 && st->st_gid >= 65536) return 0;
  uid_t uid = st->st_uid < 65536 ? st->st_uid + shift_offset : st->st_uid;
  gid_t gid = st->st_gid < 65536 ? st->st_gid + shift_offset : st->st_gid;
  if (lchown(path, uid, gid) != 0) die(path);
  /* chown clears set-user-id and set-group-id bits: put them back */
  if (!S_ISLNK(st->st_mode) && (st->st_mode & 06000) && chmod(path, st->st_mode & 07777) != 0) die(path);
  return 0;
}

static int cmd_shift(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "sbx-store shift DIR OFFSET\n"); return 2; }
  shift_offset = strtoul(argv[1], NULL, 10);
  if (nftw(argv[0], shift_entry, 64, FTW_PHYS) != 0) die(argv[0]);
  return 0;
}

/* ---- scan ---- */

static int cmd_scan(int argc, char **argv) {
  if (argc != 1) { fprintf(stderr, "sbx-store scan DIR\n"); return 2; }
  struct out o = {0};
  char err[4200];
  int rc = scan_tree(argv[0], &o, err, sizeof err);
  if (rc != SCAN_OK) { fprintf(stderr, "sbx-store: %s\n", err); return rc; }
  if (o.len && fwrite(o.p, 1, o.len, stdout) != o.len) die("stdout");
  if (fflush(stdout) != 0) die("stdout");
  free(o.p);
  return 0;
}

/* ---- apply ---- */

static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) { if (errno == ENOENT) return; die(path); }
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (!d) die(path);
    struct dirent *e;
    char child[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(child, sizeof child, "%s/%s", path, e->d_name);
      remove_tree(child);
    }
    closedir(d);
    if (rmdir(path) != 0) die(path);
  } else if (unlink(path) != 0) die(path);
}

static void copy_xattrs(const char *src, const char *dst) {
  char names[8192], value[8192];
  ssize_t n = llistxattr(src, names, sizeof names);
  for (ssize_t off = 0; n > 0 && off < n; off += strlen(names + off) + 1) {
    ssize_t vn = lgetxattr(src, names + off, value, sizeof value);
    if (vn >= 0 && lsetxattr(dst, names + off, value, vn, 0) != 0) die(dst);
  }
}

static void copy_meta(const char *src, const char *dst, const struct stat *st) {
  if (lchown(dst, st->st_uid, st->st_gid) != 0) die(dst);
  if (!S_ISLNK(st->st_mode) && chmod(dst, st->st_mode & 07777) != 0) die(dst);
  copy_xattrs(src, dst);
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (utimensat(AT_FDCWD, dst, ts, AT_SYMLINK_NOFOLLOW) != 0) die(dst);
}

static void copy_file(const char *src, const char *dst, const struct stat *st) {
  int in = open(src, O_RDONLY | O_CLOEXEC), out;
  if (in < 0) die(src);
  out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) die(dst);
  if (ioctl(out, FICLONE, in) != 0) {
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
      if (write(out, buf, n) != n) die(dst);
    if (n < 0) die(src);
  }
  close(in);
  if (close(out) != 0) die(dst);
  copy_meta(src, dst, st);
}

static void apply_entry(const char *src, const char *dst);

static void apply_children(const char *src, const char *dst) {
  DIR *d = opendir(src);
  if (!d) die(src);
  struct dirent *e;
  char s[PATH_MAX], t[PATH_MAX];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(s, sizeof s, "%s/%s", src, e->d_name);
    snprintf(t, sizeof t, "%s/%s", dst, e->d_name);
    apply_entry(s, t);
  }
  closedir(d);
}

static void apply_entry(const char *src, const char *dst) {
  struct stat st, dt;
  if (lstat(src, &st) != 0) die(src);
  char t = entry_type(src, &st);
  int exists = lstat(dst, &dt) == 0;
  if (t == 'd' && exists && S_ISDIR(dt.st_mode)) {
    /* a plain directory merges with what is below it */
    apply_children(src, dst);
    copy_meta(src, dst, &st);
    return;
  }
  if (exists) remove_tree(dst);
  switch (t) {
  case 'd': case 'O':
    if (mkdir(dst, 0700) != 0) die(dst);
    apply_children(src, dst);
    copy_meta(src, dst, &st);
    /* a directory that replaces a whiteout or a non-directory must not
       merge with what lies below the squashed layers */
    if (exists && lsetxattr(dst, OPAQUE_XATTR, "y", 1, 0) != 0) die(dst);
    break;
  case 'f':
    copy_file(src, dst, &st);
    break;
  case 'l': {
    char target[PATH_MAX];
    ssize_t n = readlink(src, target, sizeof target - 1);
    if (n < 0) die(src);
    target[n] = 0;
    if (symlink(target, dst) != 0) die(dst);
    copy_meta(src, dst, &st);
    break;
  }
  default:
    if (mknod(dst, st.st_mode, st.st_rdev) != 0) die(dst);
    copy_meta(src, dst, &st);
  }
}

static int cmd_apply(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "sbx-store apply SRC DST\n"); return 2; }
  apply_children(argv[0], argv[1]);
  return 0;
}

int cmd_copy(int argc, char **argv); /* copy.c */
int store_scratch(int argc, char **argv); /* subvol.c */
int store_limit(int argc, char **argv); /* subvol.c */

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "scan") == 0) return cmd_scan(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "apply") == 0) return cmd_apply(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "shift") == 0) return cmd_shift(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "copy") == 0) return cmd_copy(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "scratch") == 0) return store_scratch(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "limit") == 0) return store_limit(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return store_serve(argc - 2, argv + 2);
  fprintf(stderr, "usage: sbx-store scan|apply|shift|copy|scratch|limit|serve ...\n");
  return 2;
}
