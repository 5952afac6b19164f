import { formatDuration } from '@shellbase/protocol';
import type { Vm } from '../vm/types.js';

/**
 * An image's readiness check: an executable at this path in its root file system. A template's
 * boot runs it through the guest agent, once the guest's system is up, until it exits 0; only then
 * is the template's memory saved. So what the image starts at boot and needs time to get ready (the
 * code-interpreter image's server and its kernels) is already running in every machine restored
 * from the template. Images without it are saved as soon as systemd is up.
 */
export const TEMPLATE_READY = '/etc/shellbase/template-ready';

export interface ReadinessOptions {
  /** How long the check may take to pass, in all (its runs and the pauses between them). */
  timeoutMs: number;
  /** The pause between two runs that did not pass. */
  intervalMs?: number;
}

/** What a run of the check said (the tail of its output), for the error when it never passed. */
const said = (stdout: Buffer, stderr: Buffer) => (stderr.toString().trim() || stdout.toString().trim()).slice(-500);

/**
 * Runs the guest's readiness check (TEMPLATE_READY) until it exits 0; returns how many runs that
 * took (0: the image has none). Throws when it has not passed within `timeoutMs`, naming the
 * check, its last exit status and what it said.
 */
export async function waitUntilReady(vm: Vm, o: ReadinessOptions): Promise<number> {
  const found = await vm.guest.read(TEMPLATE_READY, 0);
  if (found.kind === 'missing') return 0;
  const deadline = Date.now() + o.timeoutMs;
  let last = 'it did not run';
  for (let runs = 1; ; runs++) {
    const left = deadline - Date.now();
    const r = await vm.agent.run({ argv: [TEMPLATE_READY], timeoutMs: Math.max(1, Math.min(left, 60_000)), outputBytes: 4096 });
    if (r.exitCode === 0 && !r.timedOut) return runs;
    const out = said(r.stdout, r.stderr);
    last = `${r.timedOut ? 'it timed out' : `exit ${r.exitCode}`}${out ? `: ${out}` : ''}`;
    if (!vm.alive) throw new Error(`the machine ended while its image's readiness check ${TEMPLATE_READY} ran (${last})`);
    if (Date.now() + (o.intervalMs ?? 500) >= deadline) break;
    await new Promise((res) => setTimeout(res, o.intervalMs ?? 500));
  }
  throw new Error(`the image's readiness check ${TEMPLATE_READY} did not pass within ${formatDuration(o.timeoutMs)} (last run: ${last})`);
}
