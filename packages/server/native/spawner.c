/*
 * sbx-spawner: starts processes on behalf of the server, so that the
 * server never forks itself. Forking a large Node process costs ~5 ms of
 * page-table copying on the event loop per sandbox; forking this small
 * program costs a fraction of that, whatever the server's heap.
 *
 * Protocol: frames of   u32 id | u8 type | u32 length | payload   (little
 * endian), requests from the client, events back. An id names a process
 * for the client that started (or attached to) it, or a request awaiting
 * its reply.
 * Requests:  'S' start: argv as NUL-terminated strings, then u32 stdin
 *                length and the stdin bytes (held in a memfd, so the
 *                spawner never blocks on a child that does not read)
 *            'E' start with options (procs.c: flags for a stdin pipe or a
 *                PTY and its size, user, cwd, environment, argv, a label)
 *            'K' kill: SIGKILL the process (the group, in the agent)
 *            'D' discard: payload "1" or "2"; stop forwarding that stream
 *                (the bytes are still read and dropped, at a bounded pace)
 *            'A' attach: u32 pid; this id receives that process's events
 *            'U' detach: this id stops receiving them (the process goes on)
 *            'I' input: u32 pid, bytes for its stdin pipe or PTY; 'R' once written
 *            'C' close stdin: u32 pid; 'R'
 *            'G' signal: u32 pid, u32 signal (its group, in the agent); 'R'
 *            'W' window size: u32 pid, u16 cols, u16 rows (PTY); 'R'
 *            'L' list: 'T' with u32 pid, u32 length, label for each labelled process
 * Events:    'P' started or attached (u32 pid), 'F' failed (u32 errno),
 *            '1' stdout bytes (a PTY's output too), '2' stderr bytes,
 *            'X' ended (i32 wait status), sent once both streams hit EOF
 *                and the process was reaped; 'R' reply (i32 errno, 0 = done).
 * A process outlives the client that started it; with nobody attached its
 * output is read and dropped. Locally the spawner exits when its stdin
 * closes and is SIGKILLed if the server dies (its children, `sbx run`,
 * follow through their own PDEATHSIG).
 *
 * The same static binary is the guest agent of machines (agent.c):
 * `sbx-spawner --listen PORT` serves this protocol on every TCP connection
 * it accepts, one process table for all of them; there each process gets
 * its own session. Further modes: `--fs` (fsops.c), `--watch` (watch.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "spawner.h"
#include "procs.h"

/* Past this much unsent output to a client, its processes' pipes wait (backpressure). */
enum { TX_HIGH = 256 << 10, MAX_FRAME = 256 << 20 };

struct client { int in, out; struct buf rx, tx; int dead; };
static struct client **clients;
static size_t nclients, capclients;
int as_agent;

void die(const char *what) {
  fprintf(stderr, "sbx-spawner: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void flush(struct client *c) {
  while (!c->dead && buf_size(&c->tx) > 0) {
    ssize_t n = write(c->out, c->tx.p + c->tx.off, buf_size(&c->tx));
    if (n > 0) { buf_take(&c->tx, (size_t)n); continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    c->dead = 1;
  }
}

void emit(struct client *c, uint32_t id, char type, const void *data, uint32_t len) {
  if (c->dead) return;
  char head[9];
  memcpy(head, &id, 4);
  head[4] = type;
  memcpy(head + 5, &len, 4);
  buf_add(&c->tx, head, 9);
  if (len) buf_add(&c->tx, data, len);
  flush(c);
}

int client_congested(const struct client *c) { return buf_size(&c->tx) > TX_HIGH; }

static struct client *add_client(int in, int out) {
  fcntl(in, F_SETFL, fcntl(in, F_GETFL) | O_NONBLOCK);
  if (out != in) fcntl(out, F_SETFL, fcntl(out, F_GETFL) | O_NONBLOCK);
  struct client *c = calloc(1, sizeof *c);
  if (!c) die("calloc");
  c->in = in;
  c->out = out;
  if (nclients == capclients) {
    capclients = capclients ? capclients * 2 : 8;
    clients = realloc(clients, capclients * sizeof *clients);
    if (!clients) die("realloc");
  }
  clients[nclients++] = c;
  return c;
}

static void drop_client(size_t i) {
  struct client *c = clients[i];
  procs_forget_client(c);
  close(c->in);
  if (c->out != c->in) close(c->out);
  buf_free(&c->rx);
  buf_free(&c->tx);
  free(c);
  clients[i] = clients[--nclients];
}

/* Handles every whole frame the client has sent. */
static void handle_frames(struct client *c) {
  while (!c->dead && buf_size(&c->rx) >= 9) {
    const char *h = c->rx.p + c->rx.off;
    uint32_t id, len;
    memcpy(&id, h, 4);
    memcpy(&len, h + 5, 4);
    if (len > MAX_FRAME) { c->dead = 1; return; }
    if (buf_size(&c->rx) < 9 + (size_t)len) return;
    char type = h[4];
    /* Payloads are read as strings in places: keep one NUL after them. */
    char *payload = malloc((size_t)len + 1);
    if (!payload) die("malloc");
    memcpy(payload, h + 9, len);
    payload[len] = 0;
    buf_take(&c->rx, 9 + (size_t)len);
    if (type == 'S' || type == 'E') proc_start(c, id, payload, len, type == 'E');
    else proc_request(c, id, type, payload, len);
    free(payload);
  }
}

/* Reads what the client sent; 0 at EOF or on an error. */
static int receive(struct client *c) {
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(c->in, chunk, sizeof chunk);
    if (n > 0) { buf_add(&c->rx, chunk, (size_t)n); if (n < (ssize_t)sizeof chunk) break; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return 0;
  }
  handle_frames(c);
  return 1;
}

static void accept_client(int s) {
  int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) return;
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* A restored copy of this machine inherits connections whose host side is gone: keepalive
     probes meet a reset from QEMU's network, and those clients are dropped within ~20 s. */
  int idle = 10, intvl = 5, cnt = 2;
  setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(c, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(c, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  add_client(c, c);
}

int spawner_serve(int listen_fd) {
  as_agent = listen_fd >= 0;
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigaddset(&blocked, SIGPIPE);
  if (sigprocmask(SIG_BLOCK, &blocked, NULL)) die("sigprocmask");
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  procs_init(&blocked);
  if (!as_agent) add_client(0, 1);
  struct pollfd *fds = NULL;
  size_t capfds = 0;
  for (;;) {
    size_t n = 2 + 2 * nclients + procs_pollfd_count();
    if (n > capfds) { capfds = n * 2; fds = realloc(fds, capfds * sizeof *fds); if (!fds) die("realloc"); }
    fds[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    fds[1] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
    size_t watched = nclients;
    for (size_t i = 0; i < watched; i++) {
      struct client *c = clients[i];
      fds[2 + 2 * i] = (struct pollfd){ .fd = c->in, .events = POLLIN };
      fds[3 + 2 * i] = (struct pollfd){ .fd = buf_size(&c->tx) ? c->out : -1, .events = POLLOUT };
    }
    int timeout = -1;
    size_t at = 2 + 2 * watched;
    size_t pfds = procs_pollfds(fds + at, &timeout);
    if (poll(fds, at + pfds, timeout) < 0) { if (errno == EINTR) continue; die("poll"); }
    if (fds[0].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
    }
    /* Output first, then exits, then new requests: a process's bytes always precede its 'X'. */
    procs_after_poll(fds + at);
    procs_reap();
    for (size_t i = 0; i < watched; i++) {
      struct client *c = clients[i];
      if (fds[3 + 2 * i].revents) flush(c);
      if (fds[2 + 2 * i].revents && !receive(c)) {
        if (!as_agent) return 0;
        c->dead = 1;
      }
    }
    if (fds[1].revents) accept_client(listen_fd);
    for (size_t i = nclients; i-- > 0;) if (clients[i]->dead) drop_client(i);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--fs") == 0) return fs_main(argc - 1, argv + 1);
  if (argc > 1 && strcmp(argv[1], "--watch") == 0) return watch_main(argc - 1, argv + 1);
  if (argc > 1) return agent_main(argc, argv);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl");
  if (getppid() == 1) return 1;
  /* Its own process group: a Ctrl-C or a `timeout` aimed at the server's group must leave the
     spawner (and the sandboxes it starts) to the server, which stops them in order. */
  if (setpgid(0, 0) != 0) die("setpgid");
  return spawner_serve(-1);
}
