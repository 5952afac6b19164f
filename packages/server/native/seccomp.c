/*
 * The seccomp filter of a sandbox's command (applied by bubblewrap right
 * before it execs the command, after its own set-up). A deny list in the
 * spirit of Docker's default profile: what an unprivileged container has no
 * business calling fails with EPERM (clone3 with ENOSYS, so that libc falls
 * back to clone, whose flags a filter can see). Calls of other ABIs than the
 * native one (x32, i386 through int 0x80) kill the process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

/* Names unknown on this architecture are skipped. Keep docs/security.md in step. */
static const char *const DENIED[] = {
  /* kernel and machine state */
  "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
  "create_module", "get_kernel_syms", "query_module", "swapon", "swapoff", "acct", "syslog",
  "clock_settime", "clock_adjtime", "settimeofday", "stime", "iopl", "ioperm", "vhangup",
  "nfsservctl", "sysfs", "_sysctl", "uselib", "ustat", "vm86", "vm86old", "lookup_dcookie",
  "quotactl", "quotactl_fd",
  /* large attack surfaces an agent's code does not need */
  "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
  "io_uring_setup", "io_uring_enter", "io_uring_register", "kcmp",
  "process_vm_readv", "process_vm_writev", "open_by_handle_at",
  "get_mempolicy", "set_mempolicy", "mbind", "migrate_pages", "move_pages",
  /* new mounts and namespaces */
  "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
  "move_mount", "open_tree", "mount_setattr", "unshare", "setns",
  NULL,
};

static const unsigned long NAMESPACE_FLAGS[] = {
  CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

/* The compiled filter in a memory file, positioned at its start; -1 on failure. */
int sandbox_filter_fd(void) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return -1;
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  for (int i = 0; rc == 0 && DENIED[i]; i++) {
    int nr = seccomp_syscall_resolve_name(DENIED[i]);
    if (nr != __NR_SCMP_ERROR) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  for (unsigned i = 0; rc == 0 && i < sizeof NAMESPACE_FLAGS / sizeof *NAMESPACE_FLAGS; i++) {
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, NAMESPACE_FLAGS[i], NAMESPACE_FLAGS[i]));
  }
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  int fd = rc == 0 ? memfd_create("seccomp", 0) : -1;
  if (fd >= 0 && (seccomp_export_bpf(ctx, fd) != 0 || lseek(fd, 0, SEEK_SET) != 0)) {
    close(fd);
    fd = -1;
  }
  seccomp_release(ctx);
  return fd;
}
