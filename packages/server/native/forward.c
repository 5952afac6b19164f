/*
 * sbx-forward: makes ports on a sandbox's loopback reach the server, without
 * a network: a context's services and the services shared with it, and the
 * egress proxy. Built static, it is bind-mounted into the sandbox and runs first.
 *
 *   sbx-forward [ADDR:]PORT=SOCKET|[ADDR:]PORT>SOCKET... -- PROGRAM ARGS...
 *   sbx-forward --hand-stdin SOCKET
 *
 * Binds 127.0.0.1:PORT (or ADDR:PORT) for each pair *before* PROGRAM starts (so PROGRAM can
 * never connect too early), forks a server that serves them, and execs
 * PROGRAM; the server dies with the sandbox's pid namespace. A `PORT=SOCKET`
 * connection is relayed to the Unix SOCKET (the server's side, which wakes
 * the service) by a process of its own; a `PORT>SOCKET` one is handed over
 * whole: the accepted socket itself is sent over SOCKET (SCM_RIGHTS) and
 * nothing here touches its bytes (the egress proxy, native/egress.c).
 *
 * `--hand-stdin SOCKET` hands over its standard input the same way and exits
 * (QEMU's guestfwd runs it per connection of a machine to the proxy).
 */
#define _GNU_SOURCE
#include "handover.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_PAIRS 64

static int die(const char *what) {
  fprintf(stderr, "sbx-forward: %s: %s\n", what, strerror(errno));
  exit(125);
}

/* Copies bytes both ways until both directions are closed. */
static void relay(int a, int b) {
  struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
  int open_dirs = 2;
  char buf[65536];
  while (open_dirs > 0) {
    if (poll(p, 2, -1) < 0) { if (errno == EINTR) continue; return; }
    for (int i = 0; i < 2; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(p[i].fd, buf, sizeof buf);
      int to = p[1 - i].fd;
      if (n <= 0) { shutdown(to, SHUT_WR); p[i].fd = -1; open_dirs--; continue; }
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, n - off);
        if (w <= 0) return;
        off += w;
      }
    }
  }
}

static void serve(int n, const int *fds, char **paths, const int *hand) {
  struct pollfd p[MAX_PAIRS];
  for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
  signal(SIGCHLD, SIG_IGN); /* handlers are reaped by the kernel */
  for (;;) {
    if (poll(p, n, -1) < 0) { if (errno == EINTR) continue; die("poll"); }
    for (int i = 0; i < n; i++) {
      if (!(p[i].revents & POLLIN)) continue;
      int c = accept4(fds[i], NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      if (hand[i]) {
        handover_send(c, paths[i]);
      } else if (fork() == 0) {
        int u = handover_connect(paths[i]);
        if (u >= 0) relay(c, u);
        _exit(0);
      }
      close(c);
    }
  }
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--hand-stdin") == 0) {
    if (handover_send(0, argv[2]) != 0) return die(argv[2]);
    return 0;
  }
  int fds[MAX_PAIRS], hand[MAX_PAIRS], n = 0, i = 1;
  char *paths[MAX_PAIRS];
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    char *eq = strpbrk(argv[i], "=>");
    if (!eq || n == MAX_PAIRS) { fprintf(stderr, "sbx-forward: bad pair %s\n", argv[i]); return 125; }
    hand[n] = *eq == '>';
    *eq = 0;
    /* PORT, or ADDR:PORT for a loopback address other than 127.0.0.1 (a linked service's). */
    int fd = handover_listen(argv[i]);
    if (fd < 0) die(argv[i]);
    fds[n] = fd;
    paths[n++] = eq + 1;
  }
  if (i + 1 >= argc) { fprintf(stderr, "sbx-forward PORT=SOCKET... -- PROGRAM ARGS...\n"); return 125; }
  pid_t relay_pid = fork();
  if (relay_pid < 0) die("fork");
  if (relay_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* PROGRAM is this process's parent after the exec */
    serve(n, fds, paths, hand);
  }
  for (int k = 0; k < n; k++) close(fds[k]);
  execvp(argv[i + 1], &argv[i + 1]);
  /* Worded (and exiting) as bubblewrap does when it cannot run a command: with or without the forwarder, a sandbox answers alike. */
  fprintf(stderr, "bwrap: execvp %s: %s\n", argv[i + 1], strerror(errno));
  return 1;
}
