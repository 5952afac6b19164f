#define _GNU_SOURCE
#include "handover.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int handover_listen(char *spec) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char *colon = strrchr(spec, ':');
  if (colon) {
    *colon = 0;
    if (inet_pton(AF_INET, spec, &sin.sin_addr) != 1) { *colon = ':'; errno = EINVAL; return -1; }
    *colon = ':';
  }
  long port = strtol(colon ? colon + 1 : spec, NULL, 10);
  if (port <= 0 || port > 65535) { errno = EINVAL; return -1; }
  sin.sin_port = htons((unsigned short)port);
  int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 || listen(fd, 128) != 0) { int e = errno; close(fd); errno = e; return -1; }
  return fd;
}

int handover_connect(const char *path) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
  int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (u >= 0 && connect(u, (struct sockaddr *)&sun, sizeof sun) != 0) { close(u); return -1; }
  return u;
}

int handover_send(int fd, const char *path) {
  int u = handover_connect(path);
  if (u < 0) return -1;
  char byte = 'S';
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  int ok = sendmsg(u, &msg, MSG_NOSIGNAL) == 1 ? 0 : -1;
  close(u);
  return ok;
}
