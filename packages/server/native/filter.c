/*
 * The sandboxes' seccomp filter, as seccomp.c compiled it at build time (build/filter.h): for the
 * warm sandbox's inner (straight from memory) and for `bwrap --seccomp N` (a memory file).
 */
#define _GNU_SOURCE
#include "filter.h"
#include <linux/filter.h>
#include <sys/mman.h>
#include <unistd.h>
#include "build/filter.h"

#define FILTER_LEN (sizeof SANDBOX_FILTER / sizeof *SANDBOX_FILTER)
_Static_assert(FILTER_LEN > 0 && FILTER_LEN <= BPF_MAXINSNS, "the seccomp filter's length");

const struct sock_fprog *sandbox_filter(void) {
  static const struct sock_fprog prog = {.len = (unsigned short)FILTER_LEN, .filter = (struct sock_filter *)SANDBOX_FILTER};
  return &prog;
}

int sandbox_filter_fd(void) {
  int fd = memfd_create("seccomp", 0);
  if (fd < 0) return -1;
  if (write(fd, SANDBOX_FILTER, sizeof SANDBOX_FILTER) != (ssize_t)sizeof SANDBOX_FILTER || lseek(fd, 0, SEEK_SET) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
