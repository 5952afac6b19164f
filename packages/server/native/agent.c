/*
 * The guest side of sbx-spawner (linked into the same static binary), run by
 * systemd inside machines (machines/disk.ts installs it):
 *
 *   sbx-spawner --listen PORT
 *       Accepts TCP connections on PORT (reached from the host only through
 *       QEMU's user-mode network) and serves the spawner protocol on each,
 *       with one process table for all: every QEMU process that restores
 *       the machine talks over a connection of its own, starting at a frame
 *       boundary, and finds the processes earlier connections started.
 *
 *   sbx-spawner --settle UNIX_NS
 *       After a restore: sets the clock to UNIX_NS and mixes the bytes on
 *       stdin into the kernel's random pool, crediting them, then reseeds
 *       the generator at once, so forks of one snapshot share no secrets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "spawner.h"

static int fail(const char *what) {
  fprintf(stderr, "sbx-spawner: %s: %s\n", what, strerror(errno));
  return 1;
}

static int listen_on(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fail("socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = { htonl(INADDR_ANY) } };
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) return fail("bind");
  if (listen(s, 64) != 0) return fail("listen");
  return spawner_serve(s);
}

static int settle(const char *ns_text) {
  long long ns = atoll(ns_text);
  struct timespec ts = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) return fail("clock_settime");
  struct { struct rand_pool_info info; unsigned char buf[256]; } e;
  ssize_t n = read(0, e.buf, sizeof e.buf);
  if (n <= 0) { errno = EINVAL; return fail("no entropy on stdin"); }
  e.info.entropy_count = (int)n * 8;
  e.info.buf_size = (int)n;
  int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fail("/dev/urandom");
  if (ioctl(fd, RNDADDENTROPY, &e.info) != 0) return fail("RNDADDENTROPY");
  if (ioctl(fd, RNDRESEEDCRNG) != 0) return fail("RNDRESEEDCRNG");
  close(fd);
  return 0;
}

int agent_main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--listen") == 0) return listen_on(atoi(argv[2]));
  if (argc == 3 && strcmp(argv[1], "--settle") == 0) return settle(argv[2]);
  fprintf(stderr, "usage: sbx-spawner [--listen PORT | --settle UNIX_NS]\n");
  return 2;
}
