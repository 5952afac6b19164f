/*
 * The inner of a warm sandbox (warm.c): pid 1 of its namespaces. Ahead of use it becomes uid 0
 * of the id map the outer wrote, brings up loopback, sets the hostname and builds, on a tmpfs at
 * BASE, the /proc, /dev and /tmp that bubblewrap 0.8 builds for `--proc /proc --dev /dev --perms 1777 --tmpfs
 * /tmp` (same file systems, flags, modes, nodes and links). Given its job, it moves them onto the
 * overlay the outer mounted, pivots into it, makes the binds, enters a new cgroup namespace (the
 * outer has moved it into the query's cgroups by then, so the command sees its cgroup as `/`),
 * and vforks the command: new session, clean environment, no_new_privs, the sandbox's
 * capabilities, the seccomp filter, exec. Like bubblewrap's pid 1, it then drops every
 * capability and takes the filter itself, reaps until the command ends and exits with its
 * status, which ends the pid namespace and whatever is left in it.
 */
#define _GNU_SOURCE
#include "handover.h"
#include "warm.h"
#include "filter.h"
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char base_proc[4096], base_dev[4096], base_tmp[4096];

static void at(char *out, const char *base, const char *rest) {
  if ((size_t)snprintf(out, 4096, "%s%s", base, rest) >= 4096) { errno = ENAMETOOLONG; warm_die(base); }
}

static void mnt(const char *src, const char *dst, const char *type, unsigned long flags, const char *data) {
  if (mount(src, dst, type, flags, data) != 0) warm_die(dst);
}

/* A bind mount, remounted with its source's flags plus `add` (bubblewrap's bind_mount()). */
static void remount(const char *dst, unsigned long add) {
  struct statvfs sv;
  if (statvfs(dst, &sv) != 0) warm_die(dst);
  unsigned long keep = sv.f_flag & (ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME | ST_NODIRATIME | ST_RELATIME);
  mnt(NULL, dst, NULL, MS_BIND | MS_REMOUNT | keep | add, NULL);
}

static void bind_over(const char *src, const char *dst, unsigned long add) {
  mnt(src, dst, NULL, MS_BIND | MS_REC, NULL);
  remount(dst, add);
}

static void make_dev(const char *dev) {
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  static const char *const links[][2] = {
    {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
    {"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"}, {"ptmx", "pts/ptmx"},
  };
  char p[4096], host[64];
  mnt("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    at(p, dev, "/");
    strcat(p, nodes[i]);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0) warm_die(p);
    close(fd);
    snprintf(host, sizeof host, "/dev/%s", nodes[i]);
    bind_over(host, p, MS_NOSUID);
  }
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    at(p, dev, "/");
    strcat(p, links[i][0]);
    if (symlink(links[i][1], p) != 0) warm_die(p);
  }
  at(p, dev, "/shm");
  if (mkdir(p, 0755) != 0) warm_die(p);
  at(p, dev, "/pts");
  if (mkdir(p, 0755) != 0) warm_die(p);
  mnt("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620");
}

static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) warm_die("loopback");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) warm_die("loopback up");
  close(s);
}

/* Everything ahead of the job; then the inner waits. */
static void prepare(int go, const char *base) {
  char c;
  if (warm_read_full(go, &c, 1) != 0) _exit(125); /* the outer is gone */
  if (setresgid(0, 0, 0) != 0 || setgroups(0, NULL) != 0 || setresuid(0, 0, 0) != 0) warm_die("become root");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) warm_die("prctl");
  struct pollfd pf = {.fd = go, .events = POLLIN};
  if (poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR))) _exit(125); /* the outer died before the prctl */
  mnt(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
  if (sethostname("sandbox", 7) != 0) warm_die("sethostname");
  loopback_up();
  mnt("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
  at(base_proc, base, "/proc");
  at(base_dev, base, "/dev");
  at(base_tmp, base, "/tmp");
  if (mkdir(base_proc, 0755) != 0 || mkdir(base_dev, 0755) != 0 || mkdir(base_tmp, 0755) != 0) warm_die(base);
  mnt("proc", base_proc, "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL);
  make_dev(base_dev);
  mnt("tmpfs", base_tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"); /* bwrapArgs: --perms 1777 --tmpfs /tmp */
}

/* The directory NAME at the top of ROOT, symlinks resolved inside ROOT; made when missing. */
static int in_root(int root, const char *name) {
  struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, root, name, &how, sizeof how);
  if (fd < 0 && errno == ENOENT && mkdirat(root, name, 0755) == 0) fd = (int)syscall(SYS_openat2, root, name, &how, sizeof how);
  if (fd < 0) warm_die(name);
  return fd;
}

static void move_onto(const char *from, int root, const char *name) {
  int to = in_root(root, name);
  if (move_mount(AT_FDCWD, from, to, "", MOVE_MOUNT_T_EMPTY_PATH) != 0) warm_die(from);
  close(to);
}

/* Parents of a bind's target (mode 0700, as bubblewrap makes them) and the mount point itself. */
static void mount_point(const char *target, int dir) {
  char p[4096];
  if ((size_t)snprintf(p, sizeof p, "%s", target) >= sizeof p) { errno = ENAMETOOLONG; warm_die(target); }
  for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    struct stat st;
    if (lstat(p, &st) != 0 && mkdir(p, 0700) != 0) warm_die(p);
    *s = '/';
  }
  struct stat st;
  if (lstat(p, &st) == 0) return; /* an existing file (/etc/hosts) is not touched: no copy-up */
  if (dir) { if (mkdir(p, 0755) != 0) warm_die(p); }
  else {
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0) warm_die(p);
    close(fd);
  }
}

#define MAX_BINDS 64
struct bind_op { int src; int dir; int ro; const char *target; };
#define MAX_HANDS 8

static const struct { const char *name; int cap; } CAPS[] = {
  {"CAP_CHOWN", CAP_CHOWN}, {"CAP_DAC_OVERRIDE", CAP_DAC_OVERRIDE}, {"CAP_FOWNER", CAP_FOWNER},
  {"CAP_FSETID", CAP_FSETID}, {"CAP_KILL", CAP_KILL}, {"CAP_SETGID", CAP_SETGID},
  {"CAP_SETUID", CAP_SETUID}, {"CAP_SETPCAP", CAP_SETPCAP}, {"CAP_SETFCAP", CAP_SETFCAP},
  {"CAP_NET_BIND_SERVICE", CAP_NET_BIND_SERVICE}, {"CAP_SYS_CHROOT", CAP_SYS_CHROOT},
};

static uint64_t cap_bit(const char *name) {
  for (size_t i = 0; i < sizeof CAPS / sizeof *CAPS; i++) if (strcmp(CAPS[i].name, name) == 0) return 1ull << CAPS[i].cap;
  errno = EINVAL;
  warm_die(name);
}

/* The command's process is a vfork child: it shares pid 1's memory until its exec, so it writes
   its failures with one write(2) from the stack (no stdio, heap or locale) and ends with _exit. */
static void child_say(const char *a, const char *b, const char *c) {
  const char *desc = strerrordesc_np(errno);
  const char *parts[] = {a, b, c, ": ", desc ? desc : "unknown error", "\n"};
  char buf[1024];
  size_t n = 0;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    for (const char *p = parts[i]; *p && n < sizeof buf - 1; p++) buf[n++] = *p;
  if (n == sizeof buf - 1) buf[n++] = '\n';
  (void)!write(2, buf, n);
}

static void __attribute__((noreturn)) child_die(const char *what) {
  child_say("sbx: ", what, "");
  _exit(125);
}

/* The command's process: bubblewrap's last steps before its exec. */
static void __attribute__((noreturn)) exec_command(const char *cwd, char **argv, uint64_t caps) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* The command's own failures read as bubblewrap words them, so both paths answer alike. */
  if (chdir(cwd) != 0) { child_say("bwrap: Can't chdir to ", cwd, ""); _exit(1); }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_die("no_new_privs");
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2] = {
    {.effective = (uint32_t)caps, .permitted = (uint32_t)caps, .inheritable = (uint32_t)caps},
    {.effective = (uint32_t)(caps >> 32), .permitted = (uint32_t)(caps >> 32), .inheritable = (uint32_t)(caps >> 32)},
  };
  if (syscall(SYS_capset, &h, d) != 0) child_die("capset");
  for (int c = 0; c < 64; c++)
    if ((caps >> c) & 1 && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) != 0) child_die("ambient capabilities");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, sandbox_filter()) != 0) child_die("seccomp");
  execvp(argv[0], argv); /* searches the PATH of `environ`: the command's, set by pid 1 */
  child_say("bwrap: execvp ", argv[0], "");
  _exit(1);
}

/* pid 1 from here on only reaps; like bubblewrap's, it holds no capability, has no_new_privs and
   the seccomp filter, so nothing the command reaches (/proc/1) is less confined than it is. */
static void confine_self(void) {
  sigset_t chld; /* and, as in bubblewrap's, SIGCHLD blocked: wait() takes it instead */
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct none[2] = {{0}, {0}};
  if (syscall(SYS_capset, &h, none) != 0) warm_die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) warm_die("no_new_privs");
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, sandbox_filter()) != 0) warm_die("seccomp");
}

static void __attribute__((noreturn)) exit_as(int status) {
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
}

/* pid 1 with hand-over ports: reaps, and hands each accepted connection to its socket, until the
   command ends. SIGCHLD stays blocked (as in bubblewrap's pid 1) and is read from a signalfd. */
static void __attribute__((noreturn)) serve_hands(pid_t cmd, int n, const int *fds, const char *const *paths) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) warm_die("signalfd");
  struct pollfd p[MAX_HANDS + 1];
  for (int k = 0; k < n; k++) p[k] = (struct pollfd){.fd = fds[k], .events = POLLIN};
  p[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
  for (;;) {
    int status;
    pid_t done;
    while ((done = waitpid(-1, &status, WNOHANG)) > 0) if (done == cmd) exit_as(status);
    if (done < 0 && errno == ECHILD) _exit(1);
    if (poll(p, (nfds_t)n + 1, -1) < 0) continue;
    if (p[n].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {}
    }
    for (int k = 0; k < n; k++) {
      if (!(p[k].revents & POLLIN)) continue;
      int c = accept4(fds[k], NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      handover_send(c, paths[k]); /* on failure the connection closes: the client sees it end */
      close(c);
    }
  }
}

static void run_job(int go) {
  struct warm_job job;
  int cg_fds[WARM_MAX_CGROUPS], ncg;
  if (warm_recv_job(go, &job, cg_fds, &ncg) != 0) _exit(0); /* let go unused */
  /* Taken. The set-up below goes on while the outer tells the pool; the command starts only after
   * its "g" (warm.c), never before. */
  if (write(go, "j", 1) != 1) _exit(0);
  /* Into the query's v1 cgroups, by this thread's own move (warm-mount.c says why "0"). */
  for (int k = 0; k < ncg; k++) {
    if (write(cg_fds[k], "0", 1) != 1) warm_die("join the query's cgroup");
    close(cg_fds[k]);
  }
  const char *chdir_to = NULL, *merged = NULL, *cwd = "/";
  struct bind_op binds[MAX_BINDS];
  int nb = 0, i, nh = 0, hand_fds[MAX_HANDS];
  const char *hand_paths[MAX_HANDS];
  uint64_t caps = 0;
  char **env = calloc((size_t)job.argc + 1, sizeof *env);
  int ne = 0;
  if (!env) warm_die("calloc");
  for (i = 0; i < job.argc; i++) {
    const char *k = job.argv[i];
    if (strcmp(k, "--") == 0) { i++; break; }
    if (i + 1 >= job.argc) { errno = EINVAL; warm_die(k); }
    const char *v = job.argv[++i];
    if (strcmp(k, "--chdir") == 0) chdir_to = v;
    else if (strcmp(k, "--merged") == 0) merged = v;
    else if (strcmp(k, "--cwd") == 0) cwd = v;
    else if (strcmp(k, "--cap-add") == 0) caps |= cap_bit(v);
    else if (strcmp(k, "--setenv") == 0) {
      if (i + 1 >= job.argc) { errno = EINVAL; warm_die(k); }
      size_t len = strlen(v) + strlen(job.argv[i + 1]) + 2;
      env[ne] = malloc(len);
      if (!env[ne]) warm_die("malloc");
      snprintf(env[ne++], len, "%s=%s", v, job.argv[++i]);
    } else if (strcmp(k, "--hand") == 0) {
      /* PORT>SOCKET: listening from now on, in this network namespace; SOCKET is resolved in the sandbox's root. */
      char *hv = job.argv[i], *gt = strchr(hv, '>');
      if (!gt || nh == MAX_HANDS) { errno = EINVAL; warm_die(v); }
      *gt = 0;
      hand_fds[nh] = handover_listen(hv);
      if (hand_fds[nh] < 0) warm_die(hv);
      hand_paths[nh++] = gt + 1;
    } else if (strcmp(k, "--bind") == 0 || strcmp(k, "--ro-bind") == 0) {
      if (i + 1 >= job.argc || nb == MAX_BINDS) { errno = EINVAL; warm_die(k); }
      /* A detached copy, attachable after the pivot (a plain bind's source must be in our tree). */
      struct stat st;
      int fd = open_tree(AT_FDCWD, v, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
      if (fd < 0 || fstat(fd, &st) != 0) warm_die(v);
      binds[nb++] = (struct bind_op){.src = fd, .dir = S_ISDIR(st.st_mode), .ro = k[2] == 'r', .target = job.argv[++i]};
    }
    /* --cgroup, --lower, --upper, --work, --overlay: the outer's */
  }
  if (i >= job.argc || !chdir_to || !merged) { errno = EINVAL; warm_die("job"); }
  char **argv = &job.argv[i];

  char root_path[4096];
  if ((size_t)snprintf(root_path, sizeof root_path, "%s/%s", chdir_to, merged) >= sizeof root_path) { errno = ENAMETOOLONG; warm_die(merged); }
  int root = open(merged[0] == '/' ? merged : root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) warm_die(root_path);
  move_onto(base_proc, root, "proc");
  move_onto(base_dev, root, "dev");
  move_onto(base_tmp, root, "tmp");
  if (fchdir(root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) warm_die("pivot_root");
  close(root);
  for (int b = 0; b < nb; b++) {
    mount_point(binds[b].target, binds[b].dir);
    if (move_mount(binds[b].src, "", AT_FDCWD, binds[b].target, MOVE_MOUNT_F_EMPTY_PATH) != 0) warm_die(binds[b].target);
    close(binds[b].src);
    remount(binds[b].target, MS_NOSUID | MS_NODEV | (binds[b].ro ? MS_RDONLY : 0));
  }
  if (unshare(CLONE_NEWCGROUP) != 0) warm_die("cgroup namespace");
  if (setsid() < 0) warm_die("setsid");
  /* The command's environment, set here rather than in the child (pid 1 reads no variable after). */
  environ = env;
  char c;
  if (warm_read_full(go, &c, 1) != 0 || c != 'g') _exit(0); /* the outer is gone: nothing ran */
  close(go);
  /* vfork: pid 1's pages are neither copied nor torn down again; it waits for the exec. */
  pid_t cmd = vfork();
  if (cmd < 0) warm_die("vfork");
  if (cmd == 0) exec_command(cwd, argv, caps);
  confine_self();
  if (nh == 0) {
    for (;;) {
      int status;
      pid_t p = wait(&status);
      if (p < 0 && errno == EINTR) continue;
      if (p < 0) _exit(1);
      if (p == cmd) exit_as(status);
    }
  }
  serve_hands(cmd, nh, hand_fds, hand_paths);
}

void warm_inner(int go, int ready, const char *base) {
  prepare(go, base);
  if (write(ready, "r", 1) != 1) _exit(125);
  close(ready);
  run_job(go);
  _exit(1);
}
