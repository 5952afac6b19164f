import { readFileSync, readdirSync } from 'node:fs';

/**
 * The recipe of the `debian` image. Changing anything here means a new image:
 * bump `version`, and every host rebuilds it on its next set-up.
 */
export const debianRecipe = {
  name: 'debian',
  version: 7,
  suite: 'bookworm',
  variant: 'minbase',
  // `python` is python3 (python-is-python3), as on E2B's base image: scripts and its SDK's examples run `python`.
  include: ['bash', 'coreutils', 'python3', 'python-is-python3', 'git', 'procps', 'ca-certificates', 'curl', 'xz-utils',
    // Machines boot the same tree: systemd as PID 1, udev for its device units (queries never start them),
    // D-Bus for timedatectl, localectl and hostnamectl; the host's own name resolves without DNS (sudo asks).
    'systemd-sysv', 'udev', 'dbus', 'libnss-myhostname',
    // A server's basics in a machine: modules (the kernel's own are added per machine: machines/vm/kernel-layer.ts),
    // FUSE (fuse-overlayfs: bindfs would pull in FUSE 2, which breaks fuse3), sudo, a firewall, locales and time zones, `ip`, and resize2fs for a disk that grows.
    'kmod', 'fuse3', 'fuse-overlayfs', 'sudo', 'iptables', 'nftables', 'locales', 'tzdata', 'iproute2', 'netbase', 'e2fsprogs',
    // What a stock Debian 12 install has beyond minbase and scripts take for granted. AppArmor: the guest
    // kernel has it on (Debian's default LSM order), and a stock install gets `apparmor` as a Recommends of
    // its kernel package; without it `dockerd` cannot load its docker-default profile and `docker run`
    // fails. Its unit loads /etc/apparmor.d when a machine boots; its postinst, run in debootstrap's
    // chroot, loads nothing into the host's kernel, and queries never start units.
    'apparmor',
    // From priority important and the `standard` task, the tools without a daemon: ping, traceroute,
    // less, file, lsof, wget, nc, ssh/scp, bzip2, envsubst, editors, tab completion. Left out: daemons
    // that run on a schedule or own the network or the clock (cron, logrotate, systemd-timesyncd,
    // ifupdown, isc-dhcp-client: the host sets a machine's network and clock, and a machine restored
    // from its template would fire their jobs at once), dig/host (with libxml2 and ICU, 43 MB: getent
    // resolves names), lspci (a microVM has no PCI bus), man pages and docs, perl's full module set.
    // `gpg` is not in the standard task, but adding a vendor's apt repository (`gpg --dearmor`) needs it.
    'iputils-ping', 'traceroute', 'less', 'file', 'lsof', 'wget', 'netcat-traditional', 'openssh-client', 'bzip2',
    'gettext-base', 'nano', 'vim-tiny', 'bash-completion', 'gpg',
    // /bin/bash linked statically (below).
    'bash-static'],
  /**
   * Run in the new root (chroot, before ids are shifted): the locale, the default user `user`
   * (uid and gid 1000, /home/user, bash; accounts have no passwords, so members of `sudo` need
   * none), and login shells that start no program of their own. Every command of E2B's SDKs is
   * `/bin/bash -l -c CMD`, and under TCG (machines here) each program started costs tens of ms,
   * most of it the dynamic loader's: so `/etc/profile` takes the user's id from bash's `$EUID` where
   * it has one instead of running `id -u`, root's `.profile` runs `mesg` only on a terminal, and
   * `/bin/bash` is Debian's `bash-static` (the same bash, linked statically; the dynamic one is
   * diverted to `/bin/bash.dynamic`, where an upgrade of `bash` puts it).
   */
  postInstall: `set -e
sed -i '/^# en_US.UTF-8 UTF-8$/s/^# //' /etc/locale.gen
locale-gen
update-locale LANG=en_US.UTF-8
useradd --create-home --uid 1000 --user-group --shell /bin/bash --groups sudo user
sed -i 's/"$(id -u)"/"\${EUID:-$(id -u)}"/' /etc/profile
grep -q 'EUID:-' /etc/profile
sed -i 's#^mesg n 2> /dev/null || true$#if [ -t 0 ]; then mesg n 2> /dev/null || true; fi#' /root/.profile
grep -qF 'if [ -t 0 ]' /root/.profile
dpkg-divert --quiet --add --rename --divert /bin/bash.dynamic /bin/bash
ln -s bash-static /bin/bash
test "$(/bin/bash -c 'echo $BASH_VERSION')" = "$(/bin/bash.dynamic -c 'echo $BASH_VERSION')"
echo '# shellbase: accounts have no passwords; members of sudo (the default user, user) need none.' > /etc/sudoers.d/shellbase
echo '%sudo ALL=(ALL:ALL) NOPASSWD: ALL' >> /etc/sudoers.d/shellbase
chmod 0440 /etc/sudoers.d/shellbase
visudo -cq`,
  /** Added to every uid and gid: files are stored as the sandboxes' user namespace maps them (util/idmap.ts). */
  idShift: 100_000,
} as const;

/** The Debian mirror apt is already configured with (deb822 `.sources` files or sources.list). */
export function configuredMirror(): string {
  const candidates: string[] = [];
  const dir = '/etc/apt/sources.list.d';
  let files: string[] = [];
  try { files = readdirSync(dir).map((f) => `${dir}/${f}`); } catch { /* no directory */ }
  for (const file of ['/etc/apt/sources.list', ...files]) {
    let text = '';
    try { text = readFileSync(file, 'utf8'); } catch { continue; }
    for (const line of text.split('\n')) {
      const deb = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(line);
      if (deb && !deb[2].includes('security')) candidates.push(deb[1]);
      const uris = /^\s*URIs:\s*(\S+)/i.exec(line);
      if (uris && !uris[1].includes('security')) candidates.push(uris[1]);
    }
  }
  return candidates[0] ?? 'http://deb.debian.org/debian';
}
