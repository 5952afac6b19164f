/*
 * sbx-egress: the data plane of the egress proxy (net/egress.ts is its
 * control plane: policy, name resolution, limits, the audit log). One per
 * server. It never decides anything: it reads what a connection asks for,
 * tells the server, and carries out the answer.
 *
 * Sandboxes never connect to it over the network. sbx-forward, inside a
 * sandbox, accepts on 127.0.0.1:3128 and :1080 and hands each accepted socket
 * over (SCM_RIGHTS) to the session's Unix socket here; machines' guestfwd does
 * the same with the connection QEMU gives it. So the sandbox's own socket is
 * joined to the upstream one with splice(2): the bytes never cross user space.
 *
 * A connection is sniffed: a first byte 0x05 is SOCKS5 (the greeting is
 * answered here, no authentication), anything else an HTTP proxy request
 * (CONNECT host:port, or a request with an absolute http:// URL).
 *
 * Commands on stdin and events on stdout, one per line, fields separated by
 * spaces, bytes in hex:
 *   open SID DIR UID [direct]
 *                           listen on DIR/egress.sock (owned by UID, mode 0600) -> opened SID | error SID WHY;
 *                           `direct`: a connection to it is itself the client (the server's own connections,
 *                           webhook deliveries), no socket is handed over
 *   close SID               stop listening, cut the session's connections (each -> closed) -> shut SID
 *   allow CID ADDR PORT UP OK FAIL
 *                           connect to ADDR:PORT (ADDR starting with / is a Unix socket: a service's); then UP to the upstream (followed by whatever the client
 *                           sent after its request) and OK to the client, and join them -> connected CID;
 *                           if the connect fails, FAIL to the client -> failed CID WHY, then closed
 *   deny CID BYTES          BYTES to the client, then close it -> closed
 * Events:
 *   request CID SID HEAD    a connection's request: the HTTP head up to its blank line, or the SOCKS5
 *                           request that follows the greeting
 *   closed CID OUT IN       the connection ended: bytes the client sent up, bytes the upstream sent back
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define HEAD_MAX 65536
#define PIPE_SIZE (1 << 20)
#define CHUNK (1 << 20)

enum kind { K_CONTROL, K_LISTENER, K_CLIENT, K_UPSTREAM };
enum state { S_HEAD, S_SOCKS_REQ, S_WAIT, S_CONNECTING, S_JOINED };

struct tag { enum kind kind; void *p; };

struct session {
  char id[64];
  char path[4096];
  int fd;
  int dead;
  /* Connections to the socket are clients themselves (nothing handed over). */
  int direct;
  struct tag tag;
  struct session *next;
};

struct dir { int pipe[2]; size_t pending; int eof, shut; uint64_t bytes; };

struct conn {
  uint64_t id;
  struct session *s;
  enum state state;
  int client, upstream;
  unsigned char *buf;
  size_t len;
  size_t head; /* bytes of buf that are the request; the rest go upstream after UP */
  unsigned char *ok, *fail;
  size_t ok_len, fail_len;
  struct dir up, down; /* client -> upstream, upstream -> client */
  int dead;
  struct tag client_tag, upstream_tag;
  struct conn *next;
};

static int ep;
static struct session *sessions;
static struct conn *conns;
static uint64_t next_id = 1;

/* ---- output ---- */

static void emit(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
}

static void emit_hex(const unsigned char *b, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) { putchar(digits[b[i] >> 4]); putchar(digits[b[i] & 15]); }
}

static unsigned char *unhex(const char *h, size_t *n) {
  size_t len = strlen(h);
  if (len == 1 && h[0] == '-') { *n = 0; return NULL; }
  unsigned char *out = malloc(len / 2 + 1);
  for (size_t i = 0; i + 1 < len; i += 2) {
    unsigned v;
    sscanf(h + i, "%2x", &v);
    out[i / 2] = (unsigned char)v;
  }
  *n = len / 2;
  return out;
}

/* ---- epoll ---- */

/* Connections' sockets are edge-triggered: every event pumps until nothing moves (see joined). */
#define CONN_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

static void watch(int fd, struct tag *t, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = t};
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* ---- connections ---- */

/* Closed connections and sessions stay allocated until the end of the event batch that may still name them. */
static struct conn *dead_conns;
static struct session *dead_sessions;

static void write_all(int fd, const unsigned char *b, size_t n) {
  /* Small prefaces (a reply, a rewritten head) on a fresh socket: blocking, with a timeout. */
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) { if (w < 0 && errno == EINTR) continue; break; }
    b += w;
    n -= (size_t)w;
  }
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void conn_close(struct conn *c) {
  if (c->dead) return;
  emit("closed %llu %llu %llu\n", (unsigned long long)c->id, (unsigned long long)c->up.bytes, (unsigned long long)c->down.bytes);
  for (struct conn **p = &conns; *p; p = &(*p)->next) if (*p == c) { *p = c->next; break; }
  if (c->client >= 0) close(c->client);
  if (c->upstream >= 0) close(c->upstream);
  for (int i = 0; i < 2; i++) {
    if (c->up.pipe[i] >= 0) close(c->up.pipe[i]);
    if (c->down.pipe[i] >= 0) close(c->down.pipe[i]);
  }
  c->dead = 1;
  c->next = dead_conns;
  dead_conns = c;
}

static void bury(void) {
  while (dead_conns) {
    struct conn *c = dead_conns;
    dead_conns = c->next;
    free(c->buf);
    free(c->ok);
    free(c->fail);
    free(c);
  }
  while (dead_sessions) {
    struct session *s = dead_sessions;
    dead_sessions = s->next;
    free(s);
  }
}

static struct conn *conn_by_id(uint64_t id) {
  for (struct conn *c = conns; c; c = c->next) if (c->id == id) return c;
  return NULL;
}

/* Moves what can move from src through the direction's pipe to dst; -1 when the connection broke. */
static int pump(struct dir *d, int src, int dst) {
  for (;;) {
    int progress = 0;
    if (d->pending == 0 && !d->eof) {
      ssize_t n = splice(src, NULL, d->pipe[1], NULL, CHUNK, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) { d->pending += (size_t)n; d->bytes += (uint64_t)n; progress = 1; }
      else if (n == 0) d->eof = 1;
      else if (errno != EAGAIN && errno != EINTR) d->eof = 1;
    }
    if (d->pending > 0) {
      ssize_t m = splice(d->pipe[0], NULL, dst, NULL, d->pending, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (m > 0) { d->pending -= (size_t)m; progress = 1; }
      else if (m < 0 && errno != EAGAIN && errno != EINTR) return -1;
    }
    if (d->eof && d->pending == 0 && !d->shut) { shutdown(dst, SHUT_WR); d->shut = 1; }
    if (!progress) return 0;
  }
}

/* Any event of a joined connection: both directions move until each waits for an edge (or both ended). */
static void joined(struct conn *c) {
  if (pump(&c->up, c->client, c->upstream) < 0 || pump(&c->down, c->upstream, c->client) < 0) { conn_close(c); return; }
  if (c->up.shut && c->down.shut) conn_close(c);
}

/* A head is complete: an HTTP one at its blank line, a SOCKS5 one once greeted and asked. */
static void read_head(struct conn *c) {
  for (;;) {
    if (c->len == HEAD_MAX) { conn_close(c); return; }
    ssize_t n = recv(c->client, c->buf + c->len, HEAD_MAX - c->len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { conn_close(c); return; }
    c->len += (size_t)n;
    if (c->state == S_HEAD && c->buf[0] == 5) {
      if (c->len < 2 || c->len < 2u + c->buf[1]) continue;
      int noauth = 0;
      for (unsigned i = 0; i < c->buf[1]; i++) if (c->buf[2 + i] == 0) noauth = 1;
      size_t used = 2u + c->buf[1];
      write_all(c->client, (const unsigned char *)(noauth ? "\x05\x00" : "\x05\xff"), 2);
      if (!noauth) { conn_close(c); return; }
      memmove(c->buf, c->buf + used, c->len - used);
      c->len -= used;
      c->state = S_SOCKS_REQ;
    }
    if (c->state == S_SOCKS_REQ) {
      if (c->len < 5) continue;
      size_t need = c->buf[3] == 1 ? 10 : c->buf[3] == 4 ? 22 : c->buf[3] == 3 ? 7u + c->buf[4] : 4;
      if (c->len < need) continue;
      c->head = need;
    } else {
      unsigned char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
      if (!end) continue;
      c->head = (size_t)(end - c->buf) + 4;
    }
    c->state = S_WAIT;
    emit("request %llu %s ", (unsigned long long)c->id, c->s->id);
    emit_hex(c->buf, c->head);
    emit("\n");
    return;
  }
}

/* The socket sbx-forward handed over on `u` (one byte carrying it), or -1. Closes `u`. */
static int handed_fd(int u) {
  char byte;
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct timeval tv = {.tv_sec = 2};
  setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ssize_t n = recvmsg(u, &msg, MSG_CMSG_CLOEXEC);
  close(u);
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  if (n != 1 || !cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int))) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(cm), sizeof fd);
  return fd;
}

static void accept_handed(struct session *s) {
  /* Each message on the session socket carries one socket to serve (sbx-forward's accepted one);
     on a direct session the accepted connection is the one to serve. */
  int u = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
  if (u < 0) return;
  int fd = s->direct ? u : handed_fd(u);
  if (fd < 0) return;
  int type = 0;
  socklen_t tl = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) { close(fd); return; }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  struct conn *c = calloc(1, sizeof *c);
  c->id = next_id++;
  c->s = s;
  c->client = fd;
  c->upstream = -1;
  c->buf = malloc(HEAD_MAX);
  c->up.pipe[0] = c->up.pipe[1] = c->down.pipe[0] = c->down.pipe[1] = -1;
  c->client_tag = (struct tag){K_CLIENT, c};
  c->upstream_tag = (struct tag){K_UPSTREAM, c};
  c->next = conns;
  conns = c;
  watch(fd, &c->client_tag, CONN_EVENTS);
  read_head(c);
}

/* ---- commands ---- */

static struct session *session_by_id(const char *id) {
  for (struct session *s = sessions; s; s = s->next) if (strcmp(s->id, id) == 0) return s;
  return NULL;
}

static void cmd_open(char *id, char *dir, char *uid, const char *mode) {
  struct session *s = calloc(1, sizeof *s);
  snprintf(s->id, sizeof s->id, "%s", id);
  s->direct = mode != NULL && strcmp(mode, "direct") == 0;
  if (snprintf(s->path, sizeof s->path, "%s/egress.sock", dir) >= (int)sizeof s->path) { emit("error %s path too long\n", id); free(s); return; }
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(s->path) >= sizeof sun.sun_path) { emit("error %s socket path too long\n", id); free(s); return; }
  strcpy(sun.sun_path, s->path);
  unlink(s->path);
  s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&sun, sizeof sun) != 0 || listen(s->fd, 1024) != 0
      || chown(s->path, (uid_t)atol(uid), (gid_t)atol(uid)) != 0 || chmod(s->path, 0600) != 0) {
    emit("error %s %s\n", id, strerror(errno));
    if (s->fd >= 0) close(s->fd);
    free(s);
    return;
  }
  s->next = sessions;
  sessions = s;
  s->tag = (struct tag){K_LISTENER, s};
  watch(s->fd, &s->tag, EPOLLIN);
  emit("opened %s\n", id);
}

static void cmd_close(char *id) {
  struct session *s = session_by_id(id);
  if (s) {
    for (struct conn *c = conns, *next; c; c = next) { next = c->next; if (c->s == s) conn_close(c); }
    close(s->fd);
    unlink(s->path);
    for (struct session **p = &sessions; *p; p = &(*p)->next) if (*p == s) { *p = s->next; break; }
    s->dead = 1;
    s->next = dead_sessions;
    dead_sessions = s;
  }
  emit("shut %s\n", id);
}

static void cmd_allow(char *cid, char *addr, char *port, char *up, char *ok, char *fail) {
  struct conn *c = conn_by_id(strtoull(cid, NULL, 10));
  if (!c || c->state != S_WAIT) return;
  size_t up_len;
  unsigned char *up_bytes = unhex(up, &up_len);
  c->ok = unhex(ok, &c->ok_len);
  c->fail = unhex(fail, &c->fail_len);
  struct sockaddr_storage ss = {0};
  socklen_t sl;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  struct sockaddr_un *un = (struct sockaddr_un *)&ss;
  if (addr[0] == '/' && strlen(addr) < sizeof un->sun_path) { un->sun_family = AF_UNIX; strcpy(un->sun_path, addr); sl = sizeof *un; }
  else if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) { v4->sin_family = AF_INET; v4->sin_port = htons((uint16_t)atoi(port)); sl = sizeof *v4; }
  else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) { v6->sin6_family = AF_INET6; v6->sin6_port = htons((uint16_t)atoi(port)); sl = sizeof *v6; }
  else { free(up_bytes); emit("failed %s bad address\n", cid); write_all(c->client, c->fail, c->fail_len); conn_close(c); return; }
  /* What goes upstream first: the rewritten head, then what the client sent after its request. */
  size_t rest = c->len - c->head;
  unsigned char *pre = malloc(up_len + rest + 1);
  if (up_len) memcpy(pre, up_bytes, up_len);
  memcpy(pre + up_len, c->buf + c->head, rest);
  free(up_bytes);
  free(c->buf);
  c->buf = pre;
  c->len = up_len + rest;
  c->upstream = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->upstream < 0 || (connect(c->upstream, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS)) {
    emit("failed %s %s\n", cid, strerror(errno));
    write_all(c->client, c->fail, c->fail_len);
    conn_close(c);
    return;
  }
  c->state = S_CONNECTING;
  watch(c->upstream, &c->upstream_tag, CONN_EVENTS);
}

static void connected(struct conn *c) {
  int err = 0;
  socklen_t el = sizeof err;
  getsockopt(c->upstream, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err) {
    emit("failed %llu %s\n", (unsigned long long)c->id, strerror(err));
    write_all(c->client, c->fail, c->fail_len);
    conn_close(c);
    return;
  }
  if (pipe2(c->up.pipe, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(c->down.pipe, O_CLOEXEC | O_NONBLOCK) != 0) { conn_close(c); return; }
  fcntl(c->up.pipe[1], F_SETPIPE_SZ, PIPE_SIZE);
  fcntl(c->down.pipe[1], F_SETPIPE_SZ, PIPE_SIZE);
  write_all(c->upstream, c->buf, c->len);
  c->up.bytes += c->len;
  write_all(c->client, c->ok, c->ok_len);
  c->state = S_JOINED;
  emit("connected %llu\n", (unsigned long long)c->id);
  joined(c);
}

static void cmd_deny(char *cid, char *bytes) {
  struct conn *c = conn_by_id(strtoull(cid, NULL, 10));
  if (!c || c->state != S_WAIT) return;
  size_t n;
  unsigned char *b = unhex(bytes, &n);
  write_all(c->client, b, n);
  free(b);
  conn_close(c);
}

static char line[4 * HEAD_MAX + 1024];
static size_t line_len;

static void control(void) {
  ssize_t n = read(0, line + line_len, sizeof line - 1 - line_len);
  if (n <= 0) exit(0); /* the server is gone */
  line_len += (size_t)n;
  char *start = line, *nl;
  while ((nl = memchr(start, '\n', line_len - (size_t)(start - line)))) {
    *nl = 0;
    char *f[8] = {0};
    int k = 0;
    for (char *tok = strtok(start, " "); tok && k < 8; tok = strtok(NULL, " ")) f[k++] = tok;
    if ((k == 4 || k == 5) && strcmp(f[0], "open") == 0) cmd_open(f[1], f[2], f[3], k == 5 ? f[4] : NULL);
    else if (k == 2 && strcmp(f[0], "close") == 0) cmd_close(f[1]);
    else if (k == 7 && strcmp(f[0], "allow") == 0) cmd_allow(f[1], f[2], f[3], f[4], f[5], f[6]);
    else if (k == 3 && strcmp(f[0], "deny") == 0) cmd_deny(f[1], f[2]);
    else if (k > 0) fprintf(stderr, "sbx-egress: bad command %s\n", f[0]);
    start = nl + 1;
  }
  line_len -= (size_t)(start - line);
  memmove(line, start, line_len);
  if (line_len == sizeof line - 1) { fprintf(stderr, "sbx-egress: command too long\n"); line_len = 0; }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) { perror("sbx-egress: epoll"); return 1; }
  static struct tag control_tag = {K_CONTROL, NULL};
  watch(0, &control_tag, EPOLLIN);
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    if (n < 0) { if (errno == EINTR) continue; perror("sbx-egress: epoll_wait"); return 1; }
    for (int i = 0; i < n; i++) {
      struct tag *t = evs[i].data.ptr;
      uint32_t e = evs[i].events;
      if (t->kind == K_CONTROL) { control(); continue; }
      if (t->kind == K_LISTENER) { if (!((struct session *)t->p)->dead) accept_handed(t->p); continue; }
      struct conn *c = t->p;
      if (c->dead) continue;
      if (c->state == S_HEAD || c->state == S_SOCKS_REQ) { if (t->kind == K_CLIENT) read_head(c); }
      else if (c->state == S_JOINED) joined(c);
      else if (t->kind == K_CLIENT && (e & (EPOLLHUP | EPOLLERR))) conn_close(c); /* gone while waiting */
      else if (c->state == S_CONNECTING && t->kind == K_UPSTREAM && (e & (EPOLLOUT | EPOLLERR | EPOLLHUP))) connected(c);
    }
    bury();
  }
}
