/* What the parts of sbx-spawner (one static binary) share. */
#ifndef SBX_SPAWNER_H
#define SBX_SPAWNER_H
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* spawner.c: serves the frame protocol; listen_fd < 0: on fds 0 and 1 (the local spawner),
   else on every connection accepted there (the guest agent). */
int spawner_serve(int listen_fd);
void die(const char *what);
/* procs.c: the process table and what it does with processes. */
struct client;
void proc_start(struct client *c, uint32_t id, const char *payload, uint32_t len, int extended);
void proc_request(struct client *c, uint32_t id, char type, const char *payload, uint32_t len);
void procs_forget_client(struct client *c);
/* For the loop: emit a frame to a client (spawner.c). */
void emit(struct client *c, uint32_t id, char type, const void *data, uint32_t len);
int client_congested(const struct client *c);
extern int as_agent;

/* user.c: /etc/passwd and /etc/group read directly (a static binary has no NSS). */
struct user_info { uid_t uid; gid_t gid; char name[256]; char home[1024]; char shell[256]; };
int user_by_name(const char *name, struct user_info *u);
int user_by_uid(uid_t uid, struct user_info *u);
const char *group_name(gid_t gid, char *buf, size_t len);
/* Takes NAME's groups, gid and uid (in a child before exec); -1 with errno set when it cannot. */
int become_user(const char *name, struct user_info *u);

/* agent.c, fsops.c, watch.c: the modes selected by the first argument. */
int agent_main(int argc, char **argv);
int fs_main(int argc, char **argv);
int watch_main(int argc, char **argv);
/* fsops.c: writes ABS's entry (fsops.c describes its fields) to OUT; -1 with errno when there is none. */
int fs_entry(FILE *out, const char *abs);
/* Lexically cleaned absolute form of PATH (relative ones from the working directory). */
int absolute_path(const char *path, char *out, size_t len);
#endif
