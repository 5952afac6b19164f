/*
 * sbx-spawner: starts processes on behalf of the server, so that the
 * server never forks itself. Forking a large Node process costs ~5 ms of
 * page-table copying on the event loop per sandbox; forking this small
 * program costs a fraction of that, whatever the server's heap.
 *
 * Protocol over stdin (requests) and stdout (events), frames of
 *   u32 id | u8 type | u32 length | payload        (little endian)
 * Requests:  'S' start: argv as NUL-terminated strings, then u32 stdin
 *                length and the stdin bytes (held in a memfd, so the
 *                spawner never blocks on a child that does not read)
 *            'K' kill: SIGKILL the process
 *            'D' discard: payload "1" or "2"; stop forwarding that stream
 *                (the bytes are still read and dropped, at a bounded pace)
 * Events:    'P' started (u32 pid), 'F' failed (u32 errno),
 *            '1' stdout bytes, '2' stderr bytes,
 *            'X' ended (i32 wait status), sent once both streams hit EOF
 *                and the process was reaped.
 * The spawner exits when its stdin closes, and is SIGKILLed if the server
 * dies (its children, `sbx run`, follow through their own PDEATHSIG).
 *
 * The same static binary is the guest agent of machines (agent.c):
 * `sbx-spawner --listen PORT` serves this protocol on every TCP connection
 * it accepts; there each process gets its own session and 'K' kills its
 * whole process group, and a closed connection leaves processes running.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct proc {
  uint32_t id;
  pid_t pid;
  int fd[2];        /* stdout, stderr read ends; -1 at EOF */
  int discard[2];
  long long drain_at[2]; /* a discarded stream is next read at this time (monotonic ms) */
  int reaped;
  int status;
};

static struct proc *procs;
static size_t nprocs, capprocs;
static sigset_t blocked;
static int devnull = -1;
/* Guest agent mode: children lead their own sessions; 'K' kills the group. */
static int as_agent;

static void die(const char *what) {
  fprintf(stderr, "sbx-spawner: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_all(const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(1, p, len);
    if (n < 0) { if (errno == EINTR) continue; exit(1); }
    p += n;
    len -= (size_t)n;
  }
}

static void emit(uint32_t id, char type, const void *data, uint32_t len) {
  char head[9];
  memcpy(head, &id, 4);
  head[4] = type;
  memcpy(head + 5, &len, 4);
  write_all(head, 9);
  if (len) write_all(data, len);
}

static int read_full(void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(0, p, len);
    if (n == 0) return 0;
    if (n < 0) { if (errno == EINTR) continue; die("read"); }
    p += n;
    len -= (size_t)n;
  }
  return 1;
}

static struct proc *find(uint32_t id) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i].id == id) return &procs[i];
  return NULL;
}

static void start(uint32_t id, char *payload, uint32_t len) {
  char *argv[4096];
  size_t argc = 0, off = 0;
  while (off < len && payload[off] != 0 && argc < 4095) {
    argv[argc++] = payload + off;
    off += strlen(payload + off) + 1;
  }
  off++; /* the empty string that ends argv */
  argv[argc] = NULL;
  uint32_t in_len = 0;
  if (argc == 0 || off + 4 > len) { uint32_t e = EINVAL; emit(id, 'F', &e, 4); return; }
  memcpy(&in_len, payload + off, 4);
  off += 4;
  if (off + in_len > len) { uint32_t e = EINVAL; emit(id, 'F', &e, 4); return; }
  int in = memfd_create("stdin", MFD_CLOEXEC);
  if (in < 0) die("memfd_create");
  if (in_len && write(in, payload + off, in_len) != (ssize_t)in_len) die("write stdin");
  lseek(in, 0, SEEK_SET);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) die("pipe2");
  pid_t pid = fork();
  if (pid < 0) { uint32_t e = errno; emit(id, 'F', &e, 4); close(in); close(out[0]); close(out[1]); close(err[0]); close(err[1]); return; }
  if (pid == 0) {
    sigprocmask(SIG_UNBLOCK, &blocked, NULL);
    if (as_agent) setsid();
    dup2(in, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    /* Only stdin, stdout and stderr go on: whatever the server inherited stays out of sandboxes. */
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0)
      for (int fd = 3; fd < 1024; fd++) close(fd);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(in);
  close(out[1]);
  close(err[1]);
  if (nprocs == capprocs) {
    capprocs = capprocs ? capprocs * 2 : 16;
    procs = realloc(procs, capprocs * sizeof *procs);
    if (!procs) die("realloc");
  }
  procs[nprocs++] = (struct proc){ .id = id, .pid = pid, .fd = { out[0], err[0] } };
  uint32_t p32 = (uint32_t)pid;
  emit(id, 'P', &p32, 4);
}

static void finish_if_done(size_t i) {
  struct proc *p = &procs[i];
  if (!p->reaped || p->fd[0] >= 0 || p->fd[1] >= 0) return;
  int32_t st = p->status;
  emit(p->id, 'X', &st, 4);
  procs[i] = procs[--nprocs];
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (size_t i = 0; i < nprocs; i++) {
      if (procs[i].pid == pid && !procs[i].reaped) {
        procs[i].reaped = 1;
        procs[i].status = status;
        finish_if_done(i);
        break;
      }
    }
  }
}

/*
 * Past its cap a stream is drained at most every DISCARD_DRAIN_MS from a pipe of
 * DISCARD_PIPE_BYTES: a flood then costs this loop ~100 wake-ups a second, not one per write,
 * and the command's writes slow to that pace (~100 MiB/s) instead of running the host's CPU.
 */
enum { DISCARD_PIPE_BYTES = 1 << 20, DISCARD_DRAIN_MS = 10 };

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int handle_request(void) {
  char head[9];
  if (!read_full(head, 9)) return 0;
  uint32_t id, len;
  memcpy(&id, head, 4);
  memcpy(&len, head + 5, 4);
  char *payload = malloc(len + 1);
  if (!payload) die("malloc");
  if (len && !read_full(payload, len)) { free(payload); return 0; }
  payload[len] = 0;
  struct proc *p = find(id);
  switch (head[4]) {
  case 'S': start(id, payload, len); break;
  case 'K': if (p && !p->reaped) kill(as_agent ? -p->pid : p->pid, SIGKILL); break;
  case 'D':
    if (p && len == 1 && (payload[0] == '1' || payload[0] == '2')) {
      int s = payload[0] - '1';
      p->discard[s] = 1;
      if (p->fd[s] >= 0) fcntl(p->fd[s], F_SETPIPE_SZ, DISCARD_PIPE_BYTES);
    }
    break;
  default: break;
  }
  free(payload);
  return 1;
}

/* Serves requests on fds 0 and 1 until fd 0 closes. */
int spawner_serve(int agent) {
  as_agent = agent;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigaddset(&blocked, SIGPIPE);
  if (sigprocmask(SIG_BLOCK, &blocked, NULL)) die("sigprocmask");
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull < 0) die("/dev/null");
  static char buf[1 << 16];
  struct pollfd *fds = NULL;
  size_t capfds = 0;
  for (;;) {
    size_t n = 2 + 2 * nprocs;
    if (n > capfds) { capfds = n * 2; fds = realloc(fds, capfds * sizeof *fds); if (!fds) die("realloc"); }
    fds[0] = (struct pollfd){ .fd = 0, .events = POLLIN };
    fds[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    long long now = now_ms();
    int timeout = -1;
    for (size_t i = 0; i < nprocs; i++)
      for (int s = 0; s < 2; s++) {
        int fd = procs[i].fd[s];
        long long wait = procs[i].discard[s] ? procs[i].drain_at[s] - now : 0;
        if (fd >= 0 && wait > 0) { fd = -1; if (timeout < 0 || wait < timeout) timeout = (int)wait; }
        fds[2 + 2 * i + s] = (struct pollfd){ .fd = fd, .events = POLLIN };
      }
    size_t watched = nprocs;
    if (poll(fds, n, timeout) < 0) { if (errno == EINTR) continue; die("poll"); }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
    }
    /* Output first, then exits, then new requests: a process's bytes always precede its 'X'. */
    for (size_t i = 0; i < watched && i < nprocs; i++) {
      for (int s = 0; s < 2; s++) {
        short ev = fds[2 + 2 * i + s].revents;
        if (!ev || procs[i].fd[s] < 0 || fds[2 + 2 * i + s].fd != procs[i].fd[s]) continue;
        /* A discarded stream (past its output cap) goes to /dev/null without a copy through here. */
        ssize_t got = procs[i].discard[s]
          ? splice(procs[i].fd[s], NULL, devnull, NULL, DISCARD_PIPE_BYTES, SPLICE_F_NONBLOCK | SPLICE_F_MOVE)
          : read(procs[i].fd[s], buf, sizeof buf);
        if (procs[i].discard[s]) procs[i].drain_at[s] = now_ms() + DISCARD_DRAIN_MS;
        if (got > 0) { if (!procs[i].discard[s]) emit(procs[i].id, s ? '2' : '1', buf, (uint32_t)got); }
        else if (got == 0 || (errno != EINTR && errno != EAGAIN)) { close(procs[i].fd[s]); procs[i].fd[s] = -1; }
      }
    }
    reap();
    for (size_t i = nprocs; i-- > 0;) finish_if_done(i);
    if (fds[0].revents && !handle_request()) return 0;
  }
}

int agent_main(int argc, char **argv);

int main(int argc, char **argv) {
  if (argc > 1) return agent_main(argc, argv);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
  if (getppid() == 1) return 1;
  /* Its own process group: a Ctrl-C or a `timeout` aimed at the server's group must leave the
     spawner (and the sandboxes it starts) to the server, which stops them in order. */
  if (setpgid(0, 0) != 0) die("setpgid");
  return spawner_serve(0);
}
