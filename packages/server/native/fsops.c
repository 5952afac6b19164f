/*
 * sbx-spawner --fs [-u USER] OP ARGS: file operations inside a machine, for E2B's envd API
 * (compat/e2b). Started as the user they are for, permissions are the kernel's and relative
 * paths are from the working directory (the agent starts it in the user's home). With -u USER
 * it is started as root: relative paths are from USER's home, the missing directories that
 * mkdir, move and write need are made and given to USER (as envd makes them, also where USER
 * could not make them), and everything else runs with USER's own permissions. USER unknown:
 * exit 3, "E2\n..." on stderr.
 *
 *   stat PATH            one entry (a symlink's own, described as below)
 *   list PATH DEPTH      the entries below PATH, DEPTH levels deep, sorted by name
 *   mkdir PATH           PATH and its missing parents; EEXIST when PATH exists
 *   move SRC DST         rename, DST's missing parents made first; DST's entry
 *   remove PATH          PATH and everything below it; nothing when it is missing
 *   read PATH            the file's bytes on stdout
 *   write PATH [K V]...  stdin into PATH (parents made, truncated), its metadata replaced by
 *                        the pairs K V (xattrs user.e2b.K); its entry
 *
 * An entry is 11 NUL-terminated fields on stdout: kind (f, d or o), size, mode (permission
 * bits), permissions (as Go's FileMode prints them), owner, group, mtime seconds, mtime
 * nanoseconds, absolute path, symlink target, metadata. A symlink is described as envd
 * describes one: the kind and mode of what it resolves to (o and 0 when it resolves to
 * nothing), its own permissions (L...), size, owner and times, and as its target the fully
 * resolved path (its own path when that cannot be resolved). Metadata is the user.e2b.*
 * xattrs (of what a symlink resolves to) as KEY US VALUE pairs separated by RS; a pair with
 * a NUL, US or RS in it is left out.
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
#include <sys/xattr.h>
#include <unistd.h>
#include "spawner.h"

/* The xattr namespace of envd's file metadata. */
#define META "user.e2b."
#define META_LEN (sizeof META - 1)

/* -u: whom the directories made for an operation are given to. */
static const struct user_info *owner;

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

static void field(FILE *out, const char *s) { fwrite(s, 1, strlen(s) + 1, out); }

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

/* The metadata field of ABS (see above): its user.e2b.* xattrs, none where it has no xattrs. */
static void metadata(FILE *out, const char *abs) {
  static char names[64 * 1024], value[64 * 1024];
  ssize_t n = listxattr(abs, names, sizeof names);
  int first = 1;
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
    const char *key = names + i + META_LEN;
    if (strncmp(names + i, META, META_LEN) != 0 || !*key || strpbrk(key, "\x1e\x1f")) continue;
    ssize_t l = getxattr(abs, names + i, value, sizeof value);
    if (l < 0 || memchr(value, 0, (size_t)l) || memchr(value, 0x1e, (size_t)l) || memchr(value, 0x1f, (size_t)l)) continue;
    if (!first) fputc(0x1e, out);
    fputs(key, out);
    fputc(0x1f, out);
    fwrite(value, 1, (size_t)l, out);
    first = 0;
  }
  fputc(0, out);
}

static const char *kind_of(mode_t m) { return S_ISREG(m) ? "f" : S_ISDIR(m) ? "d" : "o"; }

int fs_entry(FILE *out, const char *abs) {
  struct stat st, to;
  if (lstat(abs, &st) != 0) return -1;
  char num[64], perm[32], owner_name[256], group[256], target[PATH_MAX] = "";
  struct user_info u;
  const char *kind = kind_of(st.st_mode);
  unsigned mode = st.st_mode & 07777;
  if (S_ISLNK(st.st_mode)) {
    if (realpath(abs, target) && stat(target, &to) == 0) { kind = kind_of(to.st_mode); mode = to.st_mode & 07777; }
    else { snprintf(target, sizeof target, "%s", abs); kind = "o"; mode = 0; }
  }
  field(out, kind);
  snprintf(num, sizeof num, "%lld", (long long)st.st_size); field(out, num);
  snprintf(num, sizeof num, "%u", mode); field(out, num);
  permissions(st.st_mode, perm); field(out, perm);
  if (user_by_uid(st.st_uid, &u) == 0) snprintf(owner_name, sizeof owner_name, "%s", u.name); else snprintf(owner_name, sizeof owner_name, "%u", (unsigned)st.st_uid);
  field(out, owner_name);
  field(out, group_name(st.st_gid, group, sizeof group));
  snprintf(num, sizeof num, "%lld", (long long)st.st_mtim.tv_sec); field(out, num);
  snprintf(num, sizeof num, "%ld", st.st_mtim.tv_nsec); field(out, num);
  field(out, abs);
  field(out, target);
  metadata(out, abs);
  return 0;
}

static int entry(const char *abs) { return fs_entry(stdout, abs); }

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

/* mkdir -p; the last component too unless `parents_only`. Those it makes are given to `owner` (-u). */
static int make_dirs(const char *abs, int parents_only) {
  char at[PATH_MAX];
  snprintf(at, sizeof at, "%s", abs);
  size_t end = strlen(at);
  if (parents_only) { char *slash = strrchr(at, '/'); end = slash ? (size_t)(slash - at) : 0; }
  for (size_t i = 1; i <= end; i++) {
    if (i < end && at[i] != '/') continue;
    char keep = at[i];
    at[i] = 0;
    if (mkdir(at, 0777) == 0) { if (owner && chown(at, owner->uid, owner->gid) != 0) return -1; }
    else if (errno != EEXIST) return -1;
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

/* Replaces FD's metadata (its user.e2b.* xattrs) with the N strings of KV, keys and values in turn. */
static int set_metadata(int fd, char **kv, int n) {
  static char names[64 * 1024];
  ssize_t len = flistxattr(fd, names, sizeof names);
  if (len < 0) return errno == ENOTSUP && n == 0 ? 0 : -1;
  for (ssize_t i = 0; i < len; i += (ssize_t)strlen(names + i) + 1)
    if (strncmp(names + i, META, META_LEN) == 0 && fremovexattr(fd, names + i) != 0) return -1;
  for (int i = 0; i + 1 < n; i += 2) {
    char name[512];
    if (snprintf(name, sizeof name, META "%s", kv[i]) >= (int)sizeof name) { errno = ERANGE; return -1; }
    if (fsetxattr(fd, name, kv[i + 1], strlen(kv[i + 1]), 0) != 0) return -1;
  }
  return 0;
}

/* -u: from here on, the operation has USER's own permissions. */
static int drop_to(const struct user_info *u) {
  struct user_info again;
  return u ? become_user(u->name, &again) : 0;
}

int fs_main(int argc, char **argv) {
  struct user_info u;
  if (argc > 2 && strcmp(argv[1], "-u") == 0) {
    if (user_by_name(argv[2], &u) != 0) { fprintf(stderr, "E%d\nno user %s\n", ENOENT, argv[2]); return 3; }
    if (chdir(u.home) != 0 && chdir("/") != 0) return failed(errno, u.home);
    owner = &u;
    argc -= 2;
    argv += 2;
  }
  if (argc < 3) { fprintf(stderr, "usage: sbx-spawner --fs [-u USER] stat|list|mkdir|move|remove|read|write PATH [ARG]...\n"); return 2; }
  const char *op = argv[1];
  char abs[PATH_MAX], dst[PATH_MAX];
  if (absolute_path(argv[2], abs, sizeof abs) != 0) return failed(errno, argv[2]);
  int makes_dirs = strcmp(op, "mkdir") == 0 || strcmp(op, "move") == 0 || strcmp(op, "write") == 0;
  if (!makes_dirs && drop_to(owner) != 0) return failed(errno, owner->name);
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
    if (make_dirs(abs, 0) != 0 || drop_to(owner) != 0) return failed(errno, abs);
    return entry(abs) == 0 ? 0 : failed(errno, abs);
  }
  if (strcmp(op, "move") == 0) {
    if (argc < 4 || absolute_path(argv[3], dst, sizeof dst) != 0) return failed(argc < 4 ? EINVAL : errno, "destination");
    struct stat st;
    if (lstat(abs, &st) != 0) return failed(errno, abs);
    if (owner && (make_dirs(dst, 1) != 0 || drop_to(owner) != 0)) return failed(errno, dst);
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
    if (make_dirs(abs, 1) != 0 || drop_to(owner) != 0) return failed(errno, abs);
    int fd = open(abs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || copy(0, fd) != 0 || set_metadata(fd, argv + 3, argc - 3) != 0 || close(fd) != 0) return failed(errno, abs);
    return entry(abs) == 0 ? 0 : failed(errno, abs);
  }
  return failed(EINVAL, op);
}
