/* The sandboxes' seccomp filter (filter.c; compiled at build time by seccomp.c). */
#ifndef SBX_FILTER_H
#define SBX_FILTER_H
#include <linux/filter.h>

/* The filter, for prctl(PR_SET_SECCOMP). */
const struct sock_fprog *sandbox_filter(void);
/* The filter in a memory file positioned at its start (for `bwrap --seccomp`), or -1. */
int sandbox_filter_fd(void);
#endif
