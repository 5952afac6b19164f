import { accessSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { release } from 'node:os';
import path from 'node:path';
import { spawner } from '../../util/spawner.js';
import type { MachineAssets } from './assets.js';
import type { MachineLayout } from '../layout.js';
import { qemuBuild, type Accel } from './qemu.js';

export interface AccelChoice {
  accel: Accel;
  /** Why: no /dev/kvm, the probe's outcome, or the operator's setting. */
  reason: string;
}

/**
 * KVM where /dev/kvm exists and works, TCG otherwise. "Works" is proved once
 * per host kernel and QEMU build by booting the machine kernel under KVM with
 * `shellbase.probe` (it prints a line and powers off); the answer is kept in
 * the cache. Nested virtualisation can offer a /dev/kvm that accepts a VM and
 * then never runs its kernel: the probe catches that.
 */
export async function chooseAccel(layout: MachineLayout, assets: MachineAssets, setting: 'auto' | Accel): Promise<AccelChoice> {
  if (setting !== 'auto') return { accel: setting, reason: 'set by SHELLBASE_MACHINE_ACCEL' };
  try { accessSync('/dev/kvm', constants.R_OK | constants.W_OK); } catch { return { accel: 'tcg', reason: 'no usable /dev/kvm' }; }
  const key = `${release()} ${await qemuBuild()} ${assets.tag}`;
  const file = layout.accelFile;
  try {
    const cached = JSON.parse(readFileSync(file, 'utf8')) as { key: string } & AccelChoice;
    if (cached.key === key) return { accel: cached.accel, reason: cached.reason };
  } catch { /* not probed yet */ }
  const ok = await probeKvm(assets);
  const choice: AccelChoice = ok
    ? { accel: 'kvm', reason: '/dev/kvm booted the probe kernel' }
    : { accel: 'tcg', reason: '/dev/kvm exists but did not boot the probe kernel (nested virtualisation?)' };
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify({ key, ...choice }, null, 2));
  return choice;
}

async function probeKvm(assets: MachineAssets): Promise<boolean> {
  let out = '';
  const p = spawner.start(['timeout', '20', 'qemu-system-x86_64', '-M', 'microvm', '-accel', 'kvm', '-cpu', 'host', '-m', '128M',
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot', '-serial', 'stdio',
    '-kernel', assets.vmlinux, '-initrd', assets.initrd, '-append', 'console=ttyS0 panic=-1 shellbase.probe'], undefined, {
    onStdout: (c) => { out += c.toString(); }, onStderr: () => undefined,
  });
  await p.exited;
  return out.includes('SHELLBASE-PROBE-OK');
}
