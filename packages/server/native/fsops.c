/*
 * sbx-spawner --fs OP ARGS: file operations inside a machine, run by the
 * agent as the user they are for (so permissions are the kernel's), with
 * relative paths from the working directory (the agent starts it in the
 * user's home).
 *
 *   stat PATH            one entry (symlinks not followed)
 *   list PATH DEPTH      the entries below PATH, DEPTH levels deep, sorted by name
 *   mkdir PATH           PATH and its missing parents; EEXIST when PATH exists
 *   move SRC DST         rename, DST's missing parents made first; DST's entry
 *   remove PATH          PATH and everything below it; nothing when it is missing
 *   read PATH            the file's bytes on stdout
 *   write PATH           stdin into PATH (parents made, truncated); its entry
 *
 * An entry is 10 NUL-terminated fields on stdout: kind (f, d, l or o), size,
 * mode (permission bits), permissions (as Go's FileMode prints them), owner,
 * group, mtime seconds, mtime nanoseconds, absolute path, symlink target.
 * A failure is exit 1 with "E<errno>\n<message>" on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "spawner.h"

static int failed(int err, const char *what) {
  fprintf(stderr, "E%d\n%s: %s\n", err, what, strerror(err));
  return 1;
}

int absolute_path(const char *path, char *out, size_t len) {
  char joined[PATH_MAX * 2];
  if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
  else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    snprintf(joined, sizeof joined, "%s/%s", cwd, path);
  }
  /* Lexical: "." and empty segments go, ".." drops the segment before it (never above /). */
  size_t n = 0;
  out[0] = 0;
  for (char *save = NULL, *seg = strtok_r(joined, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
    if (strcmp(seg, ".") == 0) continue;
    if (strcmp(seg, "..") == 0) { while (n > 0 && out[n - 1] != '/') n--; if (n > 0) n--; out[n] = 0; continue; }
    size_t l = strlen(seg);
    if (n + l + 2 > len) { errno = ENAMETOOLONG; return -1; }
    out[n++] = '/';
    memcpy(out + n, seg, l + 1);
    n += l;
  }
  if (n == 0) snprintf(out, len, "/");
  return 0;
}

static void field(const char *s) { fwrite(s, 1, strlen(s) + 1, stdout); }

static void permissions(mode_t m, char *out) {
  size_t n = 0;
  if (S_ISDIR(m)) out[n++] = 'd';
  if (S_ISLNK(m)) out[n++] = 'L';
  if (S_ISBLK(m) || S_ISCHR(m)) out[n++] = 'D';
  if (S_ISFIFO(m)) out[n++] = 'p';
  if (S_ISSOCK(m)) out[n++] = 'S';
  if (m & S_ISUID) out[n++] = 'u';
  if (m & S_ISGID) out[n++] = 'g';
  if (S_ISCHR(m)) out[n++] = 'c';
  if (m & S_ISVTX) out[n++] = 't';
  if (n == 0) out[n++] = '-';
  const char *rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) out[n++] = (m & (1 << (8 - i))) ? rwx[i] : '-';
  out[n] = 0;
}

/* Prints the entry of ABS (already absolute); errno on failure. */
static int entry(const char *abs) {
  struct stat st;
  if (lstat(abs, &st) != 0) return -1;
  char num[64], perm[32], owner[256], group[256], target[PATH_MAX] = "";
  struct user_info u;
  field(S_ISREG(st.st_mode) ? "f" : S_ISDIR(st.st_mode) ? "d" : S_ISLNK(st.st_mode) ? "l" : "o");
  snprintf(num, sizeof num, "%lld", (long long)st.st_size); field(num);
  snprintf(num, sizeof num, "%u", (unsigned)(st.st_mode & 07777)); field(num);
  permissions(st.st_mode, perm); field(perm);
  if (user_by_uid(st.st_uid, &u) == 0) snprintf(owner, sizeof owner, "%s", u.name); else snprintf(owner, sizeof owner, "%u", (unsigned)st.st_uid);
  field(owner);
  field(group_name(st.st_gid, group, sizeof group));
  snprintf(num, sizeof num, "%lld", (long long)st.st_mtim.tv_sec); field(num);
  snprintf(num, sizeof num, "%ld", st.st_mtim.tv_nsec); field(num);
  field(abs);
  if (S_ISLNK(st.st_mode)) { ssize_t l = readlink(abs, target, sizeof target - 1); target[l > 0 ? l : 0] = 0; }
  field(target);
  return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int list(const char *dir, int depth) {
  struct dirent **names;
  int n = scandir(dir, &names, NULL, by_name);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) {
    const char *name = names[i]->d_name;
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
      char child[PATH_MAX * 2];
      snprintf(child, sizeof child, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name);
      struct stat st;
      if (entry(child) == 0 && depth > 1 && lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) list(child, depth - 1);
    }
    free(names[i]);
  }
  free(names);
  return 0;
}

/* mkdir -p; the last component too unless `parents_only`. */
static int make_dirs(const char *abs, int parents_only) {
  char at[PATH_MAX];
  snprintf(at, sizeof at, "%s", abs);
  size_t end = strlen(at);
  if (parents_only) { char *slash = strrchr(at, '/'); end = slash ? (size_t)(slash - at) : 0; }
  for (size_t i = 1; i <= end; i++) {
    if (i < end && at[i] != '/') continue;
    char keep = at[i];
    at[i] = 0;
    if (mkdir(at, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(at, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    at[i] = keep;
  }
  return 0;
}

static int remove_one(const char *p, const struct stat *st, int kind, struct FTW *ftw) {
  (void)st; (void)ftw;
  return (kind == FTW_DP ? rmdir(p) : unlink(p)) == 0 || errno == ENOENT ? 0 : -1;
}

static int copy(int from, int to) {
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(from, chunk, sizeof chunk);
    if (n == 0) return 0;
    if (n < 0) { if (errno == EINTR) continue; return -1; }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, chunk + off, (size_t)(n - off));
      if (w < 0) { if (errno == EINTR) continue; return -1; }
      off += w;
    }
  }
}

int fs_main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: sbx-spawner --fs stat|list|mkdir|move|remove|read|write PATH [ARG]\n"); return 2; }
  const char *op = argv[1];
  char abs[PATH_MAX], dst[PATH_MAX];
  if (absolute_path(argv[2], abs, sizeof abs) != 0) return failed(errno, argv[2]);
  if (strcmp(op, "stat") == 0) return entry(abs) == 0 ? 0 : failed(errno, abs);
  if (strcmp(op, "list") == 0) {
    struct stat st;
    if (stat(abs, &st) != 0) return failed(errno, abs);
    if (!S_ISDIR(st.st_mode)) return failed(ENOTDIR, abs);
    return list(abs, argc > 3 ? atoi(argv[3]) : 1) == 0 ? 0 : failed(errno, abs);
  }
  if (strcmp(op, "mkdir") == 0) {
    struct stat st;
    if (lstat(abs, &st) == 0) return failed(EEXIST, abs);
    return make_dirs(abs, 0) == 0 && entry(abs) == 0 ? 0 : failed(errno, abs);
  }
  if (strcmp(op, "move") == 0) {
    if (argc < 4 || absolute_path(argv[3], dst, sizeof dst) != 0) return failed(argc < 4 ? EINVAL : errno, "destination");
    struct stat st;
    if (lstat(abs, &st) != 0) return failed(errno, abs);
    if (rename(abs, dst) != 0 && (errno != ENOENT || make_dirs(dst, 1) != 0 || rename(abs, dst) != 0)) return failed(errno, dst);
    return entry(dst) == 0 ? 0 : failed(errno, dst);
  }
  if (strcmp(op, "remove") == 0) {
    struct stat st;
    if (lstat(abs, &st) != 0) return errno == ENOENT ? 0 : failed(errno, abs);
    if (!S_ISDIR(st.st_mode)) return unlink(abs) == 0 ? 0 : failed(errno, abs);
    return nftw(abs, remove_one, 64, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : failed(errno, abs);
  }
  if (strcmp(op, "read") == 0) {
    int fd = open(abs, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return failed(errno, abs);
    if (S_ISDIR(st.st_mode)) return failed(EISDIR, abs);
    return copy(fd, 1) == 0 ? 0 : failed(errno, abs);
  }
  if (strcmp(op, "write") == 0) {
    if (make_dirs(abs, 1) != 0) return failed(errno, abs);
    int fd = open(abs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || copy(0, fd) != 0 || close(fd) != 0) return failed(errno, abs);
    return entry(abs) == 0 ? 0 : failed(errno, abs);
  }
  return failed(EINVAL, op);
}
