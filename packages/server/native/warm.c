/*
 * sbx warm: a sandbox made ahead of its query (runtime/bwrap/warm-pool.ts drives it).
 *
 *   sbx warm --connect SOCKET --id ID --userns BASE:COUNT --nofile N --base DIR
 *
 * Ahead of use, two processes: this one (the "outer", host root, in no new namespace) and its
 * child (the "inner", pid 1 of new user, pid, net, ipc, uts and mount namespaces, uid 0 of the
 * sandboxes' id map, loopback up, hostname `sandbox`, and a tmpfs on DIR holding the sandbox's
 * /proc, /dev and /tmp, made as bubblewrap makes them). The seccomp filter is at hand (built in
 * at build time). The outer
 * then connects to SOCKET, says "ID\n" and waits for one job:
 *
 *   u32 length (little-endian), then NUL-terminated strings:
 *   [--cgroup FILE]... --chdir DIR --lower L --upper U --work W --merged M
 *   [--overlay SPEC | --view TARGET,PID,PATH]...
 *   [--bind SRC DST | --ro-bind SRC DST]... [--setenv K V]... --cwd DIR -- PROGRAM ARGS...
 *
 * The outer puts both processes into the cgroups (the inner joins a v1 cgroup itself, through the
 * open file handed over with the job), enters the inner's mount namespace, mounts the overlay
 * there as `sbx run` does (warm-mount.c), and hands the job to the inner, which moves
 * /proc, /dev and /tmp onto it, makes the binds, pivots into it, enters a new cgroup namespace
 * and starts the command as bubblewrap would (warm-inner.c). The outer exits with the command's
 * status. The inner answers the job with "j" and starts the command only after the outer's "g",
 * which the outer writes after "s" on SOCKET; so a sandbox that ends without that byte never
 * started its command (the pool then runs it the ordinary way), a member killed before the take
 * included. A closed SOCKET before a job (the pool let the sandbox go) ends both processes; either
 * one's death kills the other (parent-death signals) and with the inner the whole pid namespace.
 * Each sandbox takes one job: it is never reused.
 */
#define _GNU_SOURCE
#include "warm.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

void warm_die(const char *what) {
  fprintf(stderr, "sbx: %s: %s\n", what, strerror(errno));
  exit(125);
}

int warm_read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t r = write(fd, (const char *)buf + put, n - put);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    put += (size_t)r;
  }
  return 0;
}

/* Splits a job's NUL-terminated strings into an argv-like array (owned by the job's buffer). */
static char **split(char *buf, uint32_t len, int *count) {
  int n = 0;
  for (uint32_t i = 0; i < len; i++) if (buf[i] == '\0') n++;
  char **v = calloc((size_t)n + 1, sizeof *v);
  if (!v) warm_die("calloc");
  char *p = buf;
  for (int k = 0; k < n; k++) { v[k] = p; p += strlen(p) + 1; }
  *count = n;
  return v;
}

/* The job's strings, `len` bytes of them, read from `fd`. */
static int read_job_body(int fd, uint32_t len, struct warm_job *job) {
  if (len == 0 || len > WARM_MAX_JOB) { errno = E2BIG; warm_die("job"); }
  char *buf = malloc(len + 1);
  if (!buf) warm_die("malloc");
  if (warm_read_full(fd, buf, len) != 0) return -1;
  buf[len] = '\0';
  if (buf[len - 1] != '\0') { errno = EINVAL; warm_die("job"); }
  memset(job, 0, sizeof *job);
  job->raw = buf;
  job->raw_len = len;
  job->argv = split(buf, len, &job->argc);
  return 0;
}

int warm_read_job(int fd, struct warm_job *job) {
  uint32_t len;
  if (warm_read_full(fd, &len, 4) != 0) return -1;
  return read_job_body(fd, len, job);
}

int warm_send_job(int fd, const struct warm_job *job, const int *fds, int n) {
  uint32_t len = job->raw_len;
  char ctl[CMSG_SPACE(sizeof(int) * WARM_MAX_CGROUPS)];
  struct iovec iov = {.iov_base = &len, .iov_len = 4};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    memset(ctl, 0, sizeof ctl);
    m.msg_control = ctl;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
  }
  ssize_t r;
  while ((r = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR);
  if (r <= 0) return -1;
  /* The length's other bytes, if the first send took only part of it, then the strings. */
  if ((size_t)r < 4 && write_full(fd, (char *)&len + r, 4 - (size_t)r) != 0) return -1;
  return write_full(fd, job->raw, len);
}

int warm_recv_job(int fd, struct warm_job *job, int *fds, int *n) {
  uint32_t len;
  char ctl[CMSG_SPACE(sizeof(int) * WARM_MAX_CGROUPS)];
  struct iovec iov = {.iov_base = &len, .iov_len = 4};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
  ssize_t r;
  *n = 0;
  while ((r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR);
  if (r <= 0) return -1;
  if (m.msg_flags & MSG_CTRUNC) { errno = EMSGSIZE; warm_die("job's files"); }
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    if (*n + k > WARM_MAX_CGROUPS) { errno = E2BIG; warm_die("job's files"); }
    memcpy(fds + *n, CMSG_DATA(c), sizeof(int) * (size_t)k);
    *n += k;
  }
  if ((size_t)r < 4 && warm_read_full(fd, (char *)&len + r, 4 - (size_t)r) != 0) return -1;
  return read_job_body(fd, len, job);
}

static void write_map(pid_t pid, const char *which, unsigned long base, unsigned long count) {
  char path[64], map[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, which);
  snprintf(map, sizeof map, "0 %lu %lu\n", base, count);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write_full(fd, map, strlen(map)) != 0) warm_die(path);
  close(fd);
}

static int connect_to(const char *path) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path) { errno = ENAMETOOLONG; warm_die("socket path"); }
  strcpy(a.sun_path, path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) warm_die("connect");
  return s;
}

/* bwrap's convention: a command killed by signal N is reported as exit status 128+N. */
static int status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int cmd_warm(int argc, char **argv) {
  const char *sock = NULL, *id = NULL, *base_dir = NULL;
  unsigned long ns_base = 0, ns_count = 0, nofile = 0;
  for (int i = 0; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--connect") == 0) sock = argv[i + 1];
    else if (strcmp(argv[i], "--id") == 0) id = argv[i + 1];
    else if (strcmp(argv[i], "--base") == 0) base_dir = argv[i + 1];
    else if (strcmp(argv[i], "--nofile") == 0) nofile = strtoul(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--userns") == 0) {
      char *end;
      ns_base = strtoul(argv[i + 1], &end, 10);
      if (*end == ':') ns_count = strtoul(end + 1, &end, 10);
      if (*end || ns_count == 0) { fprintf(stderr, "sbx: bad --userns %s\n", argv[i + 1]); return 125; }
    } else { fprintf(stderr, "sbx: unknown option %s\n", argv[i]); return 125; }
  }
  if (!sock || !id || !base_dir || !ns_count || !nofile || argc % 2) { fprintf(stderr, "sbx warm: missing arguments\n"); return 125; }
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) warm_die("prctl");
  if (getppid() == 1) return 125;
  struct rlimit rl = {.rlim_cur = nofile, .rlim_max = nofile};
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) warm_die("setrlimit nofile");

  /* go: the outer's byte once the id maps are written, then the job; ready: the inner's byte. */
  int go[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) != 0 || pipe2(ready, O_CLOEXEC) != 0) warm_die("socketpair");
  pid_t inner = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, NULL, NULL, NULL, NULL);
  if (inner < 0) warm_die("clone");
  if (inner == 0) {
    close(go[0]);
    close(ready[0]);
    warm_inner(go[1], ready[1], base_dir); /* never returns */
  }
  close(go[1]);
  close(ready[1]);
  signal(SIGPIPE, SIG_IGN); /* a dead inner is an error below, not a silent death (the inner was forked before) */
  write_map(inner, "uid_map", ns_base, ns_count);
  write_map(inner, "gid_map", ns_base, ns_count);
  if (write_full(go[0], "m", 1) != 0) warm_die("inner");
  char c;
  if (warm_read_full(ready[0], &c, 1) != 0) { int st; waitpid(inner, &st, 0); return 125; } /* it said why on stderr */
  char mnt_path[64];
  snprintf(mnt_path, sizeof mnt_path, "/proc/%d/ns/mnt", (int)inner);
  int mnt_ns = open(mnt_path, O_RDONLY | O_CLOEXEC);
  if (mnt_ns < 0) warm_die(mnt_path);

  int ctl = connect_to(sock);
  char hello[128];
  int n = snprintf(hello, sizeof hello, "%s\n", id);
  if (write_full(ctl, hello, (size_t)n) != 0) warm_die("hello");
  /* Wait for the job, or for the inner's end (its side of `go` closes): a dead member ends here. */
  struct pollfd pf[2] = {{.fd = ctl, .events = POLLIN}, {.fd = go[0], .events = POLLIN}};
  while (poll(pf, 2, -1) < 0) if (errno != EINTR) warm_die("poll");
  struct warm_job job;
  if (pf[1].revents || warm_read_job(ctl, &job) != 0) { kill(inner, SIGKILL); return 0; } /* let go unused */

  int cg_fds[WARM_MAX_CGROUPS];
  int ncg = warm_outer_prepare(&job, inner, mnt_ns, cg_fds);
  /* The job to the inner, which answers "j", makes the sandbox and waits for "g" before it starts
   * the command. A killed inner never answers, even one whose SIGKILL is still on its way (not yet
   * reaped, so waitpid cannot tell), and its end of `go` closes: not started. */
  if (warm_send_job(go[0], &job, cg_fds, ncg) != 0) return 125;
  for (int k = 0; k < ncg; k++) close(cg_fds[k]);
  if (warm_read_full(go[0], &c, 1) != 0 || c != 'j') return 125;
  /* Before the command can run: a sandbox that ends without this byte never ran it. */
  if (write_full(ctl, "s", 1) != 0) warm_die("ack");
  close(ctl);
  (void)write_full(go[0], "g", 1); /* an inner whose set-up failed has ended: its status says why */
  close(go[0]);
  int status;
  while (waitpid(inner, &status, 0) < 0) if (errno != EINTR) warm_die("waitpid");
  return status_of(status);
}
