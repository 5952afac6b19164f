/* Ports on a sandbox's loopback whose connections are handed whole to a Unix socket (SCM_RIGHTS):
   shared by sbx-forward (forward.c) and the warm sandboxes' pid 1 (warm-inner.c). */
#ifndef SBX_HANDOVER_H
#define SBX_HANDOVER_H

/* Listens on 127.0.0.1:PORT, or ADDR:PORT when `spec` (modified) is "ADDR:PORT"; -1 with errno on failure. */
int handover_listen(char *spec);
/* Connects to the Unix socket at `path`; -1 when it cannot. */
int handover_connect(const char *path);
/* Sends socket `fd` over the Unix socket at `path` (one byte of data carries it); 0 on success. */
int handover_send(int fd, const char *path);
#endif
