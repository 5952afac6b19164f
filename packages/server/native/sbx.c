/*
 * sbx: the native helper of shellbase's runtime. Sandbox commands only (the
 * snapshotter's store commands are `sbx-store`, store.c):
 *
 *   sbx run [--cgroup FILE]... [--userns BASE:COUNT] [--nofile N] [--seccomp-fd N]
 *           [--chdir DIR --lower L --upper U --work W --merged M [--overlay SPEC]...] -- PROGRAM ARGS...
 *       Joins the given cgroups (by writing "0" to each FILE, a v1 `tasks` or a
 *       v2 `cgroup.procs` file), asks to be SIGKILLed when its parent (the
 *       server) dies, enters a private mount namespace, mounts the overlay
 *       there and execs PROGRAM (bubblewrap). The overlay mount lives only in
 *       that namespace, so it vanishes with the sandbox, even after a crash.
 *       Without the overlay options it only joins cgroups and sets limits.
 *       Each --overlay SPEC (`TARGET,lowerdir=…[,upperdir=…,workdir=…]`, at most
 *       16) mounts another overlay at M/TARGET after the first (a mounted
 *       context: mount_overlay_at), read-only when it has no upper directory;
 *       a symlink on the way to TARGET refuses the sandbox.
 *       Relative paths in L, U and W are resolved from DIR, which keeps the
 *       mount options of long layer chains inside one page. With --userns,
 *       PROGRAM runs as uid/gid 0 of a new user namespace that maps ids
 *       0..COUNT-1 to BASE..BASE+COUNT-1 on the host (after the mount: the
 *       overlay is mounted with the host's privileges). --nofile caps open
 *       files per process (soft and hard). --seccomp-fd leaves the compiled
 *       filter (filter.c, compiled at build time by seccomp.c) open as fd N for `bwrap --seccomp N`.
 *
 *   sbx userns BASE:COUNT -- PROGRAM ARGS...
 *       Only the user namespace of `run --userns`, then execs PROGRAM.
 *
 *   sbx warm --connect SOCKET --id ID --userns BASE:COUNT --nofile N --base DIR
 *       A sandbox made ahead of its query, waiting for its job (warm.c).
 *
 *   sbx views --dir DIR
 *       Read-only views of mounted contexts' versions, in a mount namespace of
 *       its own, that warm sandboxes bind (views.c).
 *
 *   sbx dial SOCKET in|out|both -- PROGRAM ARGS...
 *       Connects to the Unix socket SOCKET, makes the connection PROGRAM's stdin,
 *       stdout or both, and execs PROGRAM in a session of its own (util/dialer.ts).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <grp.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "filter.h"

int cmd_warm(int argc, char **argv); /* warm.c */
int cmd_views(int argc, char **argv); /* views.c */
void clear_volatile_marker(const char *work);
int mount_overlay_at(const char *merged, const char *spec, const char **what);

static void die(const char *what) {
  fprintf(stderr, "sbx: %s: %s\n", what, strerror(errno));
  exit(125);
}

static void write_file(const char *path, const char *data) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die(path);
  if (write(fd, data, strlen(data)) < 0) die(path);
  close(fd);
}

static int write_map(const char *path, const char *map) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, map, strlen(map));
  close(fd);
  return n == (ssize_t)strlen(map) ? 0 : -1;
}

static void keep_parent(void) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
  if (getppid() == 1) exit(125); /* the server is already gone */
}

/* Moves this process into a new user namespace as its uid/gid 0, mapped to
   BASE.. on the host. A process cannot write its own maps beyond its own id,
   so a short-lived child, still privileged outside, writes them. */
static void enter_userns(unsigned long base, unsigned long count) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die("pipe");
  pid_t parent = getpid(), child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    char c, path[64], map[64];
    close(p[1]);
    if (read(p[0], &c, 1) != 1) _exit(1);
    snprintf(map, sizeof map, "0 %lu %lu\n", base, count);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)parent);
    if (write_map(path, map) != 0) _exit(2);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)parent);
    if (write_map(path, map) != 0) _exit(3);
    _exit(0);
  }
  close(p[0]);
  if (unshare(CLONE_NEWUSER) != 0) die("unshare user namespace");
  if (write(p[1], "x", 1) != 1) die("pipe");
  close(p[1]);
  int status;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    errno = EPERM;
    die("write uid_map/gid_map");
  }
  if (setresgid(0, 0, 0) != 0) die("setresgid");
  if (setgroups(0, NULL) != 0) die("setgroups");
  if (setresuid(0, 0, 0) != 0) die("setresuid");
  keep_parent(); /* a change of credentials clears the parent-death signal */
}

static int parse_userns(const char *spec, unsigned long *base, unsigned long *count) {
  char *end;
  *base = strtoul(spec, &end, 10);
  if (*end != ':') return -1;
  *count = strtoul(end + 1, &end, 10);
  return (*end || *count == 0) ? -1 : 0;
}

static int cmd_userns(int argc, char **argv) {
  unsigned long base, count;
  if (argc < 3 || strcmp(argv[1], "--") != 0) { fprintf(stderr, "sbx userns BASE:COUNT -- PROGRAM...\n"); return 125; }
  if (parse_userns(argv[0], &base, &count) != 0) { fprintf(stderr, "sbx: bad BASE:COUNT %s\n", argv[0]); return 125; }
  keep_parent();
  enter_userns(base, count);
  execvp(argv[2], &argv[2]);
  die(argv[2]);
  return 125;
}

/*
 * The overlay is mounted `volatile`: syncs inside the sandbox and its unmount do not flush the
 * store (a query's writes become durable at its commit). Such a mount leaves a marker in the work
 * directory that refuses the next mount over it; it is cleared before each mount, so a reused
 * work directory (a pooled scratch) mounts again. A scratch never survives a crash, so a marker
 * a crash left never meets a mount.
 */
void clear_volatile_marker(const char *work) {
  static const char *const parts[] = {"/work/incompat/volatile/dirty", "/work/incompat/volatile", "/work/incompat"};
  char path[4096];
  for (int k = 0; k < 3; k++) {
    if ((size_t)snprintf(path, sizeof path, "%s%s", work, parts[k]) >= sizeof path) die("work path too long");
    if ((k == 0 ? unlink(path) : rmdir(path)) != 0 && errno != ENOENT) die(path);
  }
}

/*
 * The directory `rel` beneath the merged tree `merged`, opened O_PATH refusing every symlink,
 * magic link and file system crossing on the way (the context's tree is the tenant's: a link there
 * must not move a mount out of it): where a mounted context is attached. -1 with errno and `*what`
 * naming the path that failed.
 */
int open_mount_point(const char *merged, const char *rel, const char **what) {
  int root = open(merged, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) { *what = merged; return -1; }
  struct open_how how = {
    .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
  };
  int at = (int)syscall(SYS_openat2, root, rel, &how, sizeof how);
  int saved = errno;
  close(root);
  errno = saved;
  *what = rel;
  return at;
}

/*
 * A further overlay inside the merged tree `merged` (a context mounted into a sandbox): SPEC is
 * `TARGET,OPTIONS` with TARGET relative to `merged` and OPTIONS the overlay's lowerdir and, when
 * writable, upperdir and workdir. TARGET is resolved beneath `merged` refusing every symlink (the
 * context's tree is the tenant's: a link there must not move the mount out of it), and the overlay
 * mounted on what was found, nosuid and nodev, read-only without an upper directory. -1 with
 * errno and `*what` naming the step when it fails.
 */
int mount_overlay_at(const char *merged, const char *spec, const char **what) {
  static char rel[4096], opts[16384], fdpath[64];
  const char *comma = strchr(spec, ',');
  *what = spec;
  if (!comma || comma == spec || spec[0] == '/') { errno = EINVAL; return -1; }
  if ((size_t)snprintf(rel, sizeof rel, "%.*s", (int)(comma - spec), spec) >= sizeof rel) { errno = ENAMETOOLONG; return -1; }
  const char *rest = comma + 1, *up = strstr(rest, "upperdir="), *wk = strstr(rest, "workdir=");
  /* Exactly the options shellbase writes, in its order: lowerdir first, each once (no option can
     come from a path: shellbase's mount paths hold no comma). */
  if (strncmp(rest, "lowerdir=", 9) != 0 || strstr(rest + 1, "lowerdir=") || (up && strstr(up + 1, "upperdir=")) || (wk && strstr(wk + 1, "workdir="))) {
    errno = EINVAL;
    return -1;
  }
  if ((size_t)snprintf(opts, sizeof opts, "%s,redirect_dir=off,index=off,metacopy=off%s", rest, up ? ",volatile" : "") >= sizeof opts) { errno = ENAMETOOLONG; return -1; }
  if (up && wk) {
    char work[4096];
    const char *start = wk + strlen("workdir="), *end = strchr(start, ',');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= sizeof work) { errno = ENAMETOOLONG; return -1; }
    memcpy(work, start, n);
    work[n] = '\0';
    clear_volatile_marker(work);
  } else if (up || wk) { errno = EINVAL; return -1; }
  int at = open_mount_point(merged, rel, what);
  if (at < 0) return -1;
  snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", at);
  int r = mount("overlay", fdpath, "overlay", MS_NOSUID | MS_NODEV | (up ? 0 : MS_RDONLY), opts);
  int saved = errno;
  close(at);
  errno = saved;
  return r;
}

#define MAX_OVERLAYS 16

static int cmd_run(int argc, char **argv) {
  const char *chdir_to = NULL, *lower = NULL, *upper = NULL, *work = NULL, *merged = NULL;
  const char *overlays[MAX_OVERLAYS];
  int no = 0;
  unsigned long ns_base = 0, ns_count = 0;
  int i;
  for (i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) { i++; break; }
    if (i + 1 >= argc) { fprintf(stderr, "sbx: %s needs a value\n", argv[i]); return 125; }
    /* "0" names the writer itself. Written to a v1 `tasks` file it moves this
       (single-threaded) process without the kernel's global threadgroup lock,
       whose slow path costs ~10 ms when no migration happened recently. */
    if (strcmp(argv[i], "--cgroup") == 0) write_file(argv[++i], "0\n");
    else if (strcmp(argv[i], "--chdir") == 0) chdir_to = argv[++i];
    else if (strcmp(argv[i], "--lower") == 0) lower = argv[++i];
    else if (strcmp(argv[i], "--upper") == 0) upper = argv[++i];
    else if (strcmp(argv[i], "--work") == 0) work = argv[++i];
    else if (strcmp(argv[i], "--merged") == 0) merged = argv[++i];
    else if (strcmp(argv[i], "--overlay") == 0) {
      if (no == MAX_OVERLAYS) { fprintf(stderr, "sbx: more than %d overlays\n", MAX_OVERLAYS); return 125; }
      overlays[no++] = argv[++i];
    } else if (strcmp(argv[i], "--userns") == 0) {
      if (parse_userns(argv[++i], &ns_base, &ns_count) != 0) { fprintf(stderr, "sbx: bad --userns %s\n", argv[i]); return 125; }
    } else if (strcmp(argv[i], "--seccomp-fd") == 0) {
      int want = atoi(argv[++i]), fd = sandbox_filter_fd();
      if (fd < 0 || want < 3) { errno = EINVAL; die("seccomp filter"); }
      if (fd != want && (dup2(fd, want) != want || close(fd) != 0)) die("dup2 seccomp");
    } else if (strcmp(argv[i], "--nofile") == 0) {
      unsigned long n = strtoul(argv[++i], NULL, 10);
      struct rlimit rl = {.rlim_cur = n, .rlim_max = n};
      if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit nofile");
    } else { fprintf(stderr, "sbx: unknown option %s\n", argv[i]); return 125; }
  }
  int overlay = chdir_to || lower || upper || work || merged;
  if ((overlay && (!chdir_to || !lower || !upper || !work || !merged)) || i >= argc) {
    fprintf(stderr, "sbx run: missing arguments\n");
    return 125;
  }
  keep_parent();
  if (!overlay) { /* cgroups and limits only (QEMU of machines, which bwrap then confines) */
    if (ns_count) enter_userns(ns_base, ns_count);
    execvp(argv[i], &argv[i]);
    die(argv[i]);
  }
  if (unshare(CLONE_NEWNS) != 0) die("unshare");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("make / private");
  if (chdir(chdir_to) != 0) die(chdir_to);
  size_t len = strlen(lower) + strlen(upper) + strlen(work) + 128;
  char *opts = malloc(len);
  if (!opts) die("malloc");
  snprintf(opts, len, "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off,volatile",
           lower, upper, work);
  clear_volatile_marker(work);
  if (mount("overlay", merged, "overlay", 0, opts) != 0) die("mount overlay");
  free(opts);
  for (int k = 0; k < no; k++) {
    const char *what;
    if (mount_overlay_at(merged, overlays[k], &what) != 0) die(what);
  }
  if (chdir("/") != 0) die("chdir /");
  if (ns_count) enter_userns(ns_base, ns_count);
  execvp(argv[i], &argv[i]);
  die(argv[i]);
  return 125;
}

/*
 * sbx dial SOCKET in|out|both -- PROGRAM...: a program whose stdin, stdout or both are a
 * connection to the Unix socket SOCKET (the server listens there for this one program), in a
 * session and process group of its own (the server stops it as a group). Started by the
 * spawner, it lets the server stream to and from a program without forking itself.
 */
static int cmd_dial(int argc, char **argv) {
  if (argc < 4 || strcmp(argv[2], "--") != 0) { fprintf(stderr, "sbx dial SOCKET in|out|both -- PROGRAM...\n"); return 125; }
  int in = strcmp(argv[1], "in") == 0 || strcmp(argv[1], "both") == 0;
  int out = strcmp(argv[1], "out") == 0 || strcmp(argv[1], "both") == 0;
  if (!in && !out) { fprintf(stderr, "sbx dial: bad direction %s\n", argv[1]); return 125; }
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(argv[0]) >= sizeof addr.sun_path) { fprintf(stderr, "sbx dial: socket path too long\n"); return 125; }
  strcpy(addr.sun_path, argv[0]);
  if (setsid() < 0) die("setsid");
  keep_parent();
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  if (connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) die(argv[0]);
  if ((in && dup2(s, 0) != 0) || (out && dup2(s, 1) != 1)) die("dup2");
  close(s);
  execvp(argv[3], &argv[3]);
  die(argv[3]);
  return 125;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "run") == 0) return cmd_run(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "userns") == 0) return cmd_userns(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "warm") == 0) return cmd_warm(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "views") == 0) return cmd_views(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "dial") == 0) return cmd_dial(argc - 2, argv + 2);
  fprintf(stderr, "usage: sbx run|userns|warm|views|dial ...\n");
  return 2;
}
