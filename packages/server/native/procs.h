/* The process table's interface to the loop (spawner.c), and a byte buffer both use. */
#ifndef SBX_PROCS_H
#define SBX_PROCS_H
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/types.h>

/* Bytes p[off, len) are pending. */
struct buf { char *p; size_t off, len, cap; };

static inline size_t buf_size(const struct buf *b) { return b->len - b->off; }

static inline void buf_add(struct buf *b, const void *d, size_t n) {
  if (b->off == b->len) b->off = b->len = 0;
  if (b->len + n > b->cap && b->off) {
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
  }
  if (b->len + n > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->len + n) c *= 2;
    char *p = realloc(b->p, c);
    if (!p) abort();
    b->p = p;
    b->cap = c;
  }
  memcpy(b->p + b->len, d, n);
  b->len += n;
}

static inline void buf_take(struct buf *b, size_t n) { b->off += n; if (b->off == b->len) b->off = b->len = 0; }
static inline void buf_free(struct buf *b) { free(b->p); b->p = NULL; b->off = b->len = b->cap = 0; }

enum { START_STDIN = 1, START_PTY = 2 };
/* Where an 'E' start failed (the second word of its 'F'). */
enum { FAIL_SETUP = 0, FAIL_USER = 1, FAIL_CWD = 2, FAIL_EXEC = 3 };

struct sub { struct client *c; uint32_t id; };
struct waiter { struct client *c; uint32_t id; uint64_t upto; };

struct proc {
  pid_t pid;
  int fd[2];            /* stdout, stderr read ends (a PTY's master in fd[0]); -1 at EOF */
  int in;               /* stdin pipe's write end or the PTY master; -1 when closed */
  struct buf inbuf;     /* input not yet written */
  uint64_t in_added, in_written;
  struct waiter *waiters;
  size_t nwaiters;
  int close_in, pty;
  int discard[2], dropping[2], widened[2];
  long long drain_at[2];
  int reaped, status;
  struct sub *subs;
  size_t nsubs;
  char *label;
  uint32_t label_len;
};

/* The signals the loop blocks (children unblock them) and /dev/null, opened once. */
extern const sigset_t *spawn_blocked;
extern int spawn_devnull;
/* Adds a started process to the table, subscribed by (c, id), and sends its 'P'. */
struct proc *add_proc(pid_t pid, int out, int err, int in, struct client *c, uint32_t id);
void fail_start(struct client *c, uint32_t id, int err, int stage);
void nonblock(int fd);

void procs_init(const sigset_t *blocked);
/* Upper bound of the poll entries procs_pollfds fills. */
size_t procs_pollfd_count(void);
/* Fills poll entries for the processes' pipes; lowers *timeout for throttled streams. */
size_t procs_pollfds(struct pollfd *fds, int *timeout);
/* Forwards output and writes pending input after poll, for the entries procs_pollfds filled. */
void procs_after_poll(const struct pollfd *fds);
/* Reaps exited children and ends the processes that are done. */
void procs_reap(void);
#endif
