/*
 * The spawner's process table (see spawner.c for the frames). A process is
 * in the table from its start until it was reaped and both of its output
 * streams ended; clients subscribe to its events (the one that started it,
 * and any that attach), and its output is read whether or not anyone is
 * subscribed (dropped at a bounded pace when nobody is).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include "spawner.h"
#include "procs.h"

/*
 * A stream past its cap (or with nobody to send it to) is drained at most every DISCARD_DRAIN_MS
 * from a pipe of DISCARD_PIPE_BYTES: a flood then costs this loop ~100 wake-ups a second, not one
 * per write, and the command's writes slow to that pace (~100 MiB/s) instead of running the CPU.
 */
enum { DISCARD_PIPE_BYTES = 1 << 20, DISCARD_DRAIN_MS = 10 };

static struct proc **procs, **polled;
static size_t nprocs, capprocs, npolled;
const sigset_t *spawn_blocked;
int spawn_devnull = -1;

void procs_init(const sigset_t *b) {
  spawn_blocked = b;
  spawn_devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (spawn_devnull < 0) die("/dev/null");
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void subscribe(struct proc *p, struct client *c, uint32_t id) {
  p->subs = realloc(p->subs, (p->nsubs + 1) * sizeof *p->subs);
  if (!p->subs) die("realloc");
  p->subs[p->nsubs++] = (struct sub){ c, id };
}

struct proc *add_proc(pid_t pid, int out, int err, int in, struct client *c, uint32_t id) {
  struct proc *p = calloc(1, sizeof *p);
  if (!p) die("calloc");
  *p = (struct proc){ .pid = pid, .fd = { out, err }, .in = in };
  if (in >= 0) nonblock(in);
  subscribe(p, c, id);
  if (nprocs == capprocs) {
    capprocs = capprocs ? capprocs * 2 : 16;
    procs = realloc(procs, capprocs * sizeof *procs);
    polled = realloc(polled, capprocs * sizeof *polled);
    if (!procs || !polled) die("realloc");
  }
  procs[nprocs++] = p;
  uint32_t p32 = (uint32_t)pid;
  emit(c, id, 'P', &p32, 4);
  return p;
}

static void emit_all(struct proc *p, char type, const void *data, uint32_t len) {
  for (size_t i = 0; i < p->nsubs; i++) emit(p->subs[i].c, p->subs[i].id, type, data, len);
}

static void reply(struct client *c, uint32_t id, int err) { int32_t e = err; emit(c, id, 'R', &e, 4); }

void fail_start(struct client *c, uint32_t id, int err, int stage) {
  uint32_t e[2] = { (uint32_t)err, (uint32_t)stage };
  emit(c, id, 'F', e, 8);
}

static struct proc *by_pid(uint32_t pid) {
  for (size_t i = 0; i < nprocs; i++) if ((uint32_t)procs[i]->pid == pid) return procs[i];
  return NULL;
}

static struct proc *by_sub(struct client *c, uint32_t id, size_t *at) {
  for (size_t i = 0; i < nprocs; i++)
    for (size_t j = 0; j < procs[i]->nsubs; j++)
      if (procs[i]->subs[j].c == c && procs[i]->subs[j].id == id) { if (at) *at = j; return procs[i]; }
  return NULL;
}

static void close_input(struct proc *p, int err) {
  for (size_t i = 0; i < p->nwaiters; i++) reply(p->waiters[i].c, p->waiters[i].id, err);
  p->nwaiters = 0;
  buf_free(&p->inbuf);
  if (p->in >= 0) close(p->in);
  p->in = -1;
}

/* Writes pending input; replies to the 'I' requests whose bytes are all written. */
static void pump_input(struct proc *p) {
  while (p->in >= 0 && buf_size(&p->inbuf) > 0) {
    ssize_t n = write(p->in, p->inbuf.p + p->inbuf.off, buf_size(&p->inbuf));
    if (n > 0) { buf_take(&p->inbuf, (size_t)n); p->in_written += (uint64_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    close_input(p, n < 0 ? errno : EPIPE);
    return;
  }
  size_t kept = 0;
  for (size_t i = 0; i < p->nwaiters; i++) {
    if (p->waiters[i].upto <= p->in_written) reply(p->waiters[i].c, p->waiters[i].id, 0);
    else p->waiters[kept++] = p->waiters[i];
  }
  p->nwaiters = kept;
  if (p->close_in && p->in >= 0 && buf_size(&p->inbuf) == 0 && !p->pty) close_input(p, 0);
}

static void input(struct client *c, uint32_t id, struct proc *p, const char *data, uint32_t len) {
  if (p->in < 0 || p->close_in) { reply(c, id, EPIPE); return; }
  buf_add(&p->inbuf, data, len);
  p->in_added += len;
  p->waiters = realloc(p->waiters, (p->nwaiters + 1) * sizeof *p->waiters);
  if (!p->waiters) die("realloc");
  p->waiters[p->nwaiters++] = (struct waiter){ c, id, p->in_added };
  pump_input(p);
}

void proc_request(struct client *c, uint32_t id, char type, const char *payload, uint32_t len) {
  size_t at = 0;
  struct proc *p = NULL;
  uint32_t pid = 0, a = 0;
  if (strchr("AICGW", type)) {
    if (len < 4) { reply(c, id, EINVAL); return; }
    memcpy(&pid, payload, 4);
    if (len >= 8) memcpy(&a, payload + 4, 4);
    p = by_pid(pid);
    if (!p || (p->reaped && type != 'A')) { if (type == 'A') fail_start(c, id, ESRCH, FAIL_SETUP); else reply(c, id, ESRCH); return; }
  }
  switch (type) {
  case 'K':
    if ((p = by_sub(c, id, NULL)) && !p->reaped) kill(as_agent ? -p->pid : p->pid, SIGKILL);
    break;
  case 'D':
    if ((p = by_sub(c, id, NULL)) && len == 1 && (payload[0] == '1' || payload[0] == '2')) p->discard[payload[0] - '1'] = 1;
    break;
  case 'U':
    if ((p = by_sub(c, id, &at))) p->subs[at] = p->subs[--p->nsubs];
    break;
  case 'A':
    subscribe(p, c, id);
    emit(c, id, 'P', &pid, 4);
    break;
  case 'I': input(c, id, p, payload + 4, len - 4); break;
  case 'C':
    if (p->pty) { reply(c, id, ENOTTY); break; }
    p->close_in = 1;
    pump_input(p);
    reply(c, id, 0);
    break;
  case 'G':
    if (len < 8) { reply(c, id, EINVAL); break; }
    reply(c, id, kill(as_agent ? -p->pid : p->pid, (int)a) == 0 || kill(p->pid, (int)a) == 0 ? 0 : errno);
    break;
  case 'W': {
    struct winsize ws = { .ws_col = (unsigned short)(a & 0xffff), .ws_row = (unsigned short)(a >> 16) };
    reply(c, id, !p->pty || len < 8 ? ENOTTY : ioctl(p->in, TIOCSWINSZ, &ws) == 0 ? 0 : errno);
    break;
  }
  case 'L': {
    struct buf out = { 0 };
    for (size_t i = 0; i < nprocs; i++) {
      struct proc *q = procs[i];
      if (!q->label_len || q->reaped) continue;
      uint32_t head[2] = { (uint32_t)q->pid, q->label_len };
      buf_add(&out, head, 8);
      buf_add(&out, q->label, q->label_len);
    }
    emit(c, id, 'T', out.p, (uint32_t)buf_size(&out));
    buf_free(&out);
    break;
  }
  default: break;
  }
}

void procs_forget_client(struct client *c) {
  for (size_t i = 0; i < nprocs; i++) {
    struct proc *p = procs[i];
    size_t k = 0;
    for (size_t j = 0; j < p->nsubs; j++) if (p->subs[j].c != c) p->subs[k++] = p->subs[j];
    p->nsubs = k;
    k = 0;
    for (size_t j = 0; j < p->nwaiters; j++) if (p->waiters[j].c != c) p->waiters[k++] = p->waiters[j];
    p->nwaiters = k;
  }
}

size_t procs_pollfd_count(void) { return 3 * nprocs; }

static int congested(const struct proc *p) {
  for (size_t i = 0; i < p->nsubs; i++) if (client_congested(p->subs[i].c)) return 1;
  return 0;
}

size_t procs_pollfds(struct pollfd *fds, int *timeout) {
  long long now = now_ms();
  npolled = nprocs;
  for (size_t i = 0; i < nprocs; i++) {
    struct proc *p = procs[i];
    polled[i] = p;
    int hold = congested(p);
    for (int s = 0; s < 2; s++) {
      int fd = hold ? -1 : p->fd[s];
      p->dropping[s] = p->discard[s] || p->nsubs == 0;
      long long wait = p->dropping[s] ? p->drain_at[s] - now : 0;
      if (fd >= 0 && wait > 0) { fd = -1; if (*timeout < 0 || wait < *timeout) *timeout = (int)wait; }
      fds[3 * i + s] = (struct pollfd){ .fd = fd, .events = POLLIN };
    }
    fds[3 * i + 2] = (struct pollfd){ .fd = buf_size(&p->inbuf) ? p->in : -1, .events = POLLOUT };
  }
  return 3 * npolled;
}

/* Reads one chunk of a stream: forwarded, or dropped; closes it at EOF (a PTY's EIO is its EOF).
   Returns what read returned. */
static ssize_t read_stream(struct proc *p, int s) {
  static char chunk[1 << 16];
  ssize_t got;
  if (p->dropping[s] && !p->pty) {
    if (!p->widened[s]) { fcntl(p->fd[s], F_SETPIPE_SZ, DISCARD_PIPE_BYTES); p->widened[s] = 1; }
    got = splice(p->fd[s], NULL, spawn_devnull, NULL, DISCARD_PIPE_BYTES, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  } else {
    got = read(p->fd[s], chunk, sizeof chunk);
    if (got > 0 && !p->dropping[s]) emit_all(p, s ? '2' : '1', chunk, (uint32_t)got);
  }
  if (p->dropping[s]) p->drain_at[s] = now_ms() + DISCARD_DRAIN_MS;
  if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) { close(p->fd[s]); p->fd[s] = -1; }
  return got;
}

void procs_after_poll(const struct pollfd *fds) {
  for (size_t i = 0; i < npolled; i++) {
    struct proc *p = polled[i];
    for (int s = 0; s < 2; s++)
      if (fds[3 * i + s].revents && p->fd[s] >= 0 && fds[3 * i + s].fd == p->fd[s]) read_stream(p, s);
    if (fds[3 * i + 2].revents) pump_input(p);
  }
}

static void finish_if_done(size_t i) {
  struct proc *p = procs[i];
  if (!p->reaped || p->fd[0] >= 0 || p->fd[1] >= 0) return;
  int32_t st = p->status;
  emit_all(p, 'X', &st, 4);
  close_input(p, EPIPE);
  free(p->waiters);
  free(p->subs);
  free(p->label);
  free(p);
  procs[i] = procs[--nprocs];
}

void procs_reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    struct proc *p = by_pid((uint32_t)pid);
    if (!p || p->reaped) continue;
    p->reaped = 1;
    p->status = status;
    /* A PTY ends with its process: what is left in it now, then EOF (a background job may hold it). */
    if (p->pty) {
      p->dropping[0] = p->nsubs == 0;
      while (p->fd[0] >= 0 && read_stream(p, 0) > 0) {}
      if (p->fd[0] >= 0) { close(p->fd[0]); p->fd[0] = -1; }
    }
  }
  for (size_t i = nprocs; i-- > 0;) finish_if_done(i);
}
