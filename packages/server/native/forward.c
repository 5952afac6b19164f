/*
 * sbx-forward: makes a context's services answer on 127.0.0.1 inside a
 * sandbox (a query's, or another service's), without a network: built
 * static, it is bind-mounted into the sandbox and runs first.
 *
 *   sbx-forward PORT=SOCKET [PORT=SOCKET]... -- PROGRAM ARGS...
 *
 * Binds 127.0.0.1:PORT for each pair *before* PROGRAM starts (so PROGRAM can
 * never connect too early), forks a relay that passes every connection to
 * the Unix SOCKET (the server's side, which wakes the service), and execs
 * PROGRAM. The relay dies with the sandbox's pid namespace.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
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

static void serve(int n, const int *fds, char **paths) {
  struct pollfd p[MAX_PAIRS];
  for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
  signal(SIGCHLD, SIG_IGN); /* handlers are reaped by the kernel */
  for (;;) {
    if (poll(p, n, -1) < 0) { if (errno == EINTR) continue; die("poll"); }
    for (int i = 0; i < n; i++) {
      if (!(p[i].revents & POLLIN)) continue;
      int c = accept4(fds[i], NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      if (fork() == 0) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        snprintf(sun.sun_path, sizeof sun.sun_path, "%s", paths[i]);
        int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (u >= 0 && connect(u, (struct sockaddr *)&sun, sizeof sun) == 0) relay(c, u);
        _exit(0);
      }
      close(c);
    }
  }
}

int main(int argc, char **argv) {
  int fds[MAX_PAIRS], n = 0, i = 1;
  char *paths[MAX_PAIRS];
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq || n == MAX_PAIRS) { fprintf(stderr, "sbx-forward: bad pair %s\n", argv[i]); return 125; }
    *eq = 0;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[i])), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(fd, 128) != 0) die(argv[i]);
    fds[n] = fd;
    paths[n++] = eq + 1;
  }
  if (i + 1 >= argc) { fprintf(stderr, "sbx-forward PORT=SOCKET... -- PROGRAM ARGS...\n"); return 125; }
  pid_t relay_pid = fork();
  if (relay_pid < 0) die("fork");
  if (relay_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* PROGRAM is this process's parent after the exec */
    serve(n, fds, paths);
  }
  for (int k = 0; k < n; k++) close(fds[k]);
  execvp(argv[i + 1], &argv[i + 1]);
  return die(argv[i + 1]);
}
